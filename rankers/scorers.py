"""Scorers: ``nn.Module``s mapping document features ``[..., F]`` to scores ``[...]``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from datamodules.normalization import VARIANCE_FLOOR, query_zscore

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "silu": nn.SiLU}
# how an ensemble's member scores [..., L, K] become one score per document
COMBINES = ("mean", "list_zscore")


class LinearScorer(nn.Module):
    """``s = w . x + b``."""

    def __init__(self, n_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(n_features, 1)

    @classmethod
    def from_weights(cls, weights: Tensor) -> LinearScorer:
        """``s = w . x`` (bias 0) for learned weights ``[F]`` (the perceptrons' linear read-outs)."""
        scorer = cls(len(weights))
        with torch.no_grad():
            scorer.linear.weight.copy_(weights.detach().float().cpu()[None])
            scorer.linear.bias.zero_()
        return scorer

    def forward(self, features: Tensor) -> Tensor:
        return self.linear(features).squeeze(-1)


def member_scores(scorer: nn.Module, features: Tensor) -> Tensor:
    """Each ensemble member's scores ``[..., K]`` of ``features [..., F]`` (``K = 1`` for a plain scorer)."""
    members = getattr(scorer, "member_scores", None)
    return members(features) if members is not None else scorer(features).unsqueeze(-1)


def member_count(scorer: nn.Module) -> int:
    """How many members' scores ``member_scores`` gives (1 for a plain scorer), without running it."""
    return int(getattr(scorer, "n_members", 1))


def combined_scores(scorer: nn.Module, members: Tensor, mask: Tensor | None = None) -> Tensor:
    """``[..., L]``: the scorer's combination of its members' scores ``members [..., L, K]`` over the
    lists' real documents ``mask [..., L]`` (the members' mean for a scorer that names none)."""
    combine = getattr(scorer, "combine_members", None)
    return combine(members, mask) if combine is not None else members.mean(-1)


class MLPScorer(nn.Module):
    """Feed-forward scorer: ``[Linear -> norm -> activation -> dropout] * len(hidden) -> Linear``.

    ``norm`` is ``"none"`` or ``"layer"``. Batch norm is not offered: its batch statistics would
    mix padded documents into real ones.

    ``members=K > 1`` makes a seed ensemble in one module: K networks with their own
    initialization, each trained on its own loss over the same batches (``member_scores``; the
    ranker stacks the members along the batch), scored by the mean of their scores (``forward``,
    hence evaluation and the export). An ensemble of K independently trained networks, for the
    price of one run; the K networks are evaluated together (``StackedMLP``), not one by one.
    ``combine="list_zscore"`` z-scores each member's scores over the list's real documents before
    the mean, so members trained on different losses (``RankerModule`` with a list
    of losses), whose scores live on different scales, weigh alike; a list's ranking then depends
    on its own documents only, as it does in the export, which scores one query at a time.
    """

    def __init__(
        self,
        n_features: int,
        hidden: Sequence[int] = (128, 64),
        *,
        dropout: float = 0.0,
        norm: str = "none",
        activation: str = "relu",
        members: int = 1,
        combine: str = "mean",
    ) -> None:
        super().__init__()
        if members < 1:
            raise ValueError(f"members must be >= 1, got {members}")
        if combine not in COMBINES:
            raise ValueError(f"combine must be one of {COMBINES}, got {combine!r}")
        self.standardize_members = combine == "list_zscore"
        self.variance_floor = VARIANCE_FLOOR  # an attribute: TorchScript reads no module globals
        if norm not in ("none", "layer"):
            raise ValueError(f"norm must be 'none' or 'layer', got {norm!r}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.members = members
        if members == 1:
            self.layers: nn.Module = _network(n_features, hidden, norm, activation, dropout)
        else:
            self.layers = StackedMLP(n_features, hidden, members, norm=norm, activation=activation, dropout=dropout)
        # the private form: the public register_load_state_dict_pre_hook is newer than torch 2.2
        self._register_load_state_dict_pre_hook(_stack_looped_members, with_module=True)

    @property
    def n_members(self) -> int:
        """K."""
        return self.members

    def member_scores(self, features: Tensor) -> Tensor:
        """``[..., K]``: every member's scores."""
        return self.layers(features)

    def combine_members(self, members: Tensor, mask: Tensor | None = None) -> Tensor:
        """``[..., L, K] -> [..., L]``: the members' mean, each z-scored over the list first with
        ``combine="list_zscore"`` (``mask [..., L]`` its real documents; None: all of them)."""
        if self.standardize_members:
            if mask is not None:  # a padded row's score never reaches a list's statistics
                members = members.masked_fill(~mask.unsqueeze(-1), 0.0)
            members = query_zscore(members, mask, self.variance_floor)
        return members.mean(-1)

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        """``features [..., L, F]`` -> ``[..., L]``; ``mask [..., L]`` matters only to ``list_zscore``."""
        if self.members == 1 and not self.standardize_members:
            return self.layers(features).squeeze(-1)
        return self.combine_members(self.member_scores(features), mask)


def _network(n_features: int, hidden: Sequence[int], norm: str, activation: str, dropout: float) -> nn.Sequential:
    """One member: ``[Linear -> norm -> activation -> dropout] * len(hidden) -> Linear``, ``[..., F] -> [..., 1]``."""
    layers: list[nn.Module] = []
    width = n_features
    for size in hidden:
        layers.append(nn.Linear(width, size))
        if norm == "layer":
            layers.append(nn.LayerNorm(size))
        layers.append(ACTIVATIONS[activation]())
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = size
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


class StackedLinear(nn.Module):
    """K independent ``nn.Linear(in, out)`` applied member by member: ``[K, N, in] -> [K, N, out]`` in
    one batched matmul. ``weight [K, in, out]``, ``bias [K, out]``."""

    def __init__(self, members: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(members, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(members, out_features))

    def forward(self, hidden: Tensor) -> Tensor:
        return torch.baddbmm(self.bias.unsqueeze(1), hidden, self.weight)


class StackedLayerNorm(nn.Module):
    """K independent ``nn.LayerNorm(size)`` over ``[K, N, size]``: one normalization, each member's
    own affine ``weight, bias [K, size]``."""

    def __init__(self, members: int, size: int) -> None:
        super().__init__()
        self.size = size
        self.weight = nn.Parameter(torch.ones(members, size))
        self.bias = nn.Parameter(torch.zeros(members, size))

    def forward(self, hidden: Tensor) -> Tensor:
        normalized = nn.functional.layer_norm(hidden, [self.size])
        return normalized * self.weight.unsqueeze(1) + self.bias.unsqueeze(1)


class StackedMLP(nn.Module):
    """K networks of ``_network``'s shape evaluated together: ``features [..., F] -> [..., K]``.

    The first layer of every member reads the same features, so it is one ``nn.Linear(F, K * h)``
    (one matmul that reads the input once, the widest layer when the inputs are the threshold map);
    the later layers are batched matmuls over the member axis (``[K, N, h]``). Against a loop over
    K separate networks: 1.16-1.34x faster per training step on 2 CPU cores at the threshold map's
    width (1.03-1.23x at 300 inputs; ``bench/ensemble_scorer.py``, docs/benchmarks.md), and K times
    fewer kernel launches on a GPU (unmeasured). Each member is initialized exactly as the loop's K
    ``nn.Sequential`` would be from the same seed (the same random draws in the same order), so the two
    start as the same model and compute the same scores and gradients; dropout masks are drawn for
    all members at once, so a run with dropout does not repeat an old run's draws.
    """

    def __init__(
        self,
        n_features: int,
        hidden: Sequence[int],
        members: int,
        *,
        norm: str = "none",
        activation: str = "relu",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.n_members = members
        self.first_width = hidden[0] if hidden else 1
        # skip_init: no random draws here, _initialize_as_separate_networks draws them member by member
        self.first = nn.utils.skip_init(nn.Linear, n_features, members * (hidden[0] if hidden else 1))
        body: list[nn.Module] = []
        for position, size in enumerate(hidden):
            if position > 0:
                body.append(StackedLinear(members, hidden[position - 1], size))
            if norm == "layer":
                body.append(StackedLayerNorm(members, size))
            body.append(ACTIVATIONS[activation]())
            if dropout > 0:
                body.append(nn.Dropout(dropout))
        if hidden:
            body.append(StackedLinear(members, hidden[-1], 1))
        self.body = nn.Sequential(*body)
        self._initialize_as_separate_networks(n_features, hidden)

    @torch.no_grad()
    def _initialize_as_separate_networks(self, n_features: int, hidden: Sequence[int]) -> None:
        # member by member, layer by layer, nn.Linear's own initialization on an [out, in] tensor:
        # the random stream of K nn.Sequential built one after the other
        linears = [layer for layer in self.body if isinstance(layer, StackedLinear)]
        widths = [n_features, *hidden]
        first_width = hidden[0] if hidden else 1
        for member in range(self.n_members):
            for position, (fan_in, fan_out) in enumerate(zip(widths, [*hidden, 1], strict=True)):
                reference = nn.Linear(fan_in, fan_out)  # draws its weight, then its bias
                if position == 0:
                    rows = slice(member * first_width, (member + 1) * first_width)
                    self.first.weight[rows] = reference.weight
                    self.first.bias[rows] = reference.bias
                else:
                    linears[position - 1].weight[member] = reference.weight.T
                    linears[position - 1].bias[member] = reference.bias

    def forward(self, features: Tensor) -> Tensor:
        lead = features.shape[:-1]
        flat = features.reshape(-1, features.shape[-1])
        # the width is named, not inferred: a list of zero documents has nothing to infer it from
        hidden = self.first(flat).view(flat.shape[0], self.n_members, self.first_width).transpose(0, 1)  # [K, N, h]
        scores = self.body(hidden).squeeze(-1).transpose(0, 1)  # [N, K]
        shape = list(lead)  # no starred literal: TorchScript compiles this
        shape.append(self.n_members)
        return scores.reshape(shape)


def _stack_looped_members(scorer: nn.Module, state_dict: dict, prefix: str, *args: object) -> None:
    """Load a checkpoint written when an ensemble was K separate ``nn.Sequential`` (``layers.*`` for
    member 0, ``others.{m-1}.*`` for member m) into the stacked layout: its trained weights evaluate,
    test, export and start new fits as before. (Its optimizer state is in the old layout: a fit cannot
    resume from it, which ``RankerModule.on_load_checkpoint`` says.)"""
    if not isinstance(scorer.layers, StackedMLP) or not holds_looped_members(state_dict, prefix):
        return
    if any(key.startswith(f"{prefix}layers.first.") for key in state_dict):
        raise ValueError(f"{prefix}: a state dict with ensemble members in both the looped and the stacked layout")
    members = [_pop_member(state_dict, f"{prefix}layers.")]
    while any(key.startswith(f"{prefix}others.{len(members) - 1}.") for key in state_dict):
        members.append(_pop_member(state_dict, f"{prefix}others.{len(members) - 1}."))
    linears = [[w for w in member if w[0].ndim == 2] for member in members]  # (weight, bias) in order
    norms = [[w for w in member if w[0].ndim == 1] for member in members]
    first_weight, first_bias = zip(*(member[0] for member in linears), strict=True)
    state_dict[f"{prefix}layers.first.weight"] = torch.cat(first_weight)
    state_dict[f"{prefix}layers.first.bias"] = torch.cat(first_bias)
    body = [(f"{prefix}layers.body.{name}", layer) for name, layer in scorer.layers.body.named_children()]
    linear_names = [name for name, layer in body if isinstance(layer, StackedLinear)]
    norm_names = [name for name, layer in body if isinstance(layer, StackedLayerNorm)]
    for position, name in enumerate(linear_names):
        state_dict[f"{name}.weight"] = torch.stack([member[position + 1][0].T for member in linears])
        state_dict[f"{name}.bias"] = torch.stack([member[position + 1][1] for member in linears])
    for position, name in enumerate(norm_names):
        state_dict[f"{name}.weight"] = torch.stack([member[position][0] for member in norms])
        state_dict[f"{name}.bias"] = torch.stack([member[position][1] for member in norms])


def holds_looped_members(state_dict: dict, prefix: str = "") -> bool:
    """Whether ``state_dict`` holds an ensemble scorer (under ``prefix``) in the looped layout."""
    return any(key.startswith(f"{prefix}others.0.") for key in state_dict)


def _pop_member(state_dict: dict, prefix: str) -> list[tuple[Tensor, Tensor]]:
    """A looped member's ``(weight, bias)`` pairs in layer order, removed from ``state_dict``."""
    indices = sorted({int(key[len(prefix) :].split(".")[0]) for key in state_dict if key.startswith(prefix)})
    return [(state_dict.pop(f"{prefix}{i}.weight"), state_dict.pop(f"{prefix}{i}.bias")) for i in indices]
