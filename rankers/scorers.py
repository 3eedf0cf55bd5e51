"""Scorers: ``nn.Module``s mapping document features ``[..., F]`` to scores ``[...]``."""

from __future__ import annotations

from collections.abc import Sequence
from copy import deepcopy

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
    price of one run. ``combine="list_zscore"`` z-scores each member's scores over the list's real
    documents before the mean, so members trained on different losses (``RankerModule`` with a list
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
        self.layers = nn.Sequential(*layers)
        # members beyond the first: deep copies re-initialized, so each has its own starting point
        self.others = nn.ModuleList(_reinitialized(self.layers) for _ in range(members - 1))

    @property
    def n_members(self) -> int:
        """K."""
        return 1 + len(self.others)

    def member_scores(self, features: Tensor) -> Tensor:
        """``[..., K]``: every member's scores."""
        scores = [self.layers(features)]
        for member in self.others:  # a loop, not a generator: TorchScript compiles this
            scores.append(member(features))
        return torch.cat(scores, -1)

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
        if len(self.others) == 0 and not self.standardize_members:
            return self.layers(features).squeeze(-1)
        return self.combine_members(self.member_scores(features), mask)


def _reinitialized(layers: nn.Sequential) -> nn.Sequential:
    copy = deepcopy(layers)
    for layer in copy.modules():
        if isinstance(layer, nn.Linear | nn.LayerNorm):
            layer.reset_parameters()
    return copy
