"""The pairwise perceptron family as one batched tensor: plain, pocket, averaged, voted and committee.

Elsas, Carvalho & Carbonell, "Rank Learning with the Committee Perceptron" (slides, pseudo-code on
the last page). The learner streams preference pairs ``(q, d_i, d_j)`` with ``d_i`` preferred to
``d_j``: a mistake is ``s(d_j) >= s(d_i)``, i.e. ``w . (d_i - d_j) <= 0``, and is answered by
``w <- w + eta_q (d_i - d_j)`` with ``eta_q = 1 / |S_q|`` (query balancing). Each hypothesis
``w^l`` counts its successes ``c_l``; on a mistake it is offered to the committee, a fixed-size
priority queue of the K best ``(w, c)``: it enters when ``c_l > min_k c_k`` and the member with
the least count leaves (ties: the oldest hypothesis leaves first, as a heap keyed by
``(c, l)`` does). While the committee has fewer than K members every hypothesis enters.

R independent runs (their own pair orders and committee sizes) advance together: the current
hypotheses are ``weights [R, d]``, the committees ``committee [R, K, d]`` with ``counts [R, K]``
and ``births [R, K]`` (the index ``l`` of each member), and one pair of every run is processed
per step by a fixed handful of tensor ops, with no host synchronization.

Every variant is a read-out of the same run (the sequence of hypotheses does not depend on it):

* ``plain``: the last hypothesis ``w^l``.
* ``pocket``: the committee with ``K = 1``.
* ``averaged``: ``sum_l c_l w^l / sum_l c_l`` over every hypothesis (a running sum).
* ``committee``: ``sum_k c_k w^k / sum_k c_k`` over the K members (``combine="weight"``, one
  linear scorer, O(1) at test time) or rank voting ``sum_k c_k rank_k(d)`` (``combine="vote"``, O(K)).
* ``voted``: rank voting over every hypothesis: the committee with K at least the number of
  hypotheses (``max_hypotheses``).

``include_current`` (default True) offers the final hypothesis to the committee (and to the
average) when the read-out is made, as if the stream ended with a mistake: the pseudo-code's
output ``W`` never contains the hypothesis that was still running, which for ``K = 1`` would
lose the pocket perceptron's best run when it is the last one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn

from kernels import pairwise_perceptron_cpu

Combine = Literal["last", "average", "weight", "vote"]
COMBINES = ("last", "average", "weight", "vote")

# pairs gathered into difference vectors per chunk (one gather per chunk, not per step)
CHUNK = 1024
# priority of a member = count * PRIORITY_SHIFT + birth: orders by count, then by age (births < 2^31)
PRIORITY_SHIFT = 1 << 31
# count of the slots beyond a run's own committee size: never the minimum, never combined
LOCKED = 1 << 31


def preference_pairs(labels: Tensor, mask: Tensor | None = None, *, query_balance: bool = True) -> Tensor:
    """Every preference pair of each query: ``(b, i, j)`` with ``labels[b, i] > labels[b, j]``.

    Args:
        labels: ``[B, L]`` graded relevance; mask: ``[B, L]`` bool, True = a real document.
        query_balance: ``eta_q = 1 / |S_q|`` (the number of pairs of the query); else 1.

    Returns:
        ``pairs [P, 3]`` long ``(b, i, j)`` in row-major order of ``(b, i, j)``, and ``eta [P]``
        float32. A query whose labels are all equal (or with fewer than 2 documents) has no pairs.
    """
    if mask is None:
        mask = torch.ones_like(labels, dtype=torch.bool)
    preferred = (labels[:, :, None] > labels[:, None, :]) & mask[:, :, None] & mask[:, None, :]
    pairs = preferred.nonzero()  # [P, 3], row-major: query by query, a deterministic base order
    per_query = preferred.flatten(1).sum(1)  # |S_q| [B]
    if query_balance:
        eta = 1.0 / per_query.clamp_min(1).to(torch.float32)[pairs[:, 0]]
    else:
        eta = torch.ones(len(pairs), dtype=torch.float32, device=labels.device)
    return pairs, eta


def pass_orders(n_pairs: int, seeds: Sequence[int], epoch: int, *, device: str | torch.device | None = None) -> Tensor:
    """``[R, P]`` long: run r's seeded order of the P pairs in pass ``epoch`` (a new order per pass)."""
    orders = []
    for seed in seeds:
        generator = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
        orders.append(torch.randperm(n_pairs, generator=generator))
    return torch.stack(orders).to(device) if orders else torch.zeros(0, n_pairs, dtype=torch.long, device=device)


def rank_votes(member_scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """Each member's rank of each document, counted from the bottom: ``[..., L, K]`` float.

    ``member_scores [..., L, K]``: member k's score of document i. The rank is the number of real
    documents member k scores strictly below ``d_i``, plus one half for each other document it
    scores equal (mid-ranks, so ties neither help nor hurt and list order plays no part); the top
    document of L gets ``L - 1``. Padded documents (mask False) are not counted and get 0.
    """
    below = member_scores.unsqueeze(-3) < member_scores.unsqueeze(-2)  # [..., i, j, K]: s_j < s_i
    equal = member_scores.unsqueeze(-3) == member_scores.unsqueeze(-2)
    if mask is not None:
        real = mask.unsqueeze(-2).unsqueeze(-1)  # [..., 1, j, 1]
        below, equal = below & real, equal & real
    rank = below.sum(-2).to(member_scores.dtype) + 0.5 * (equal.sum(-2).to(member_scores.dtype) - 1.0)
    if mask is not None:
        rank = rank * mask.unsqueeze(-1)
    return rank


def rank_vote_scores(member_scores: Tensor, votes: Tensor, mask: Tensor | None = None) -> Tensor:
    """Rank voting: ``score(d_i) = sum_k c_k rank_k(d_i) / sum_k c_k``, ``[..., L]``.

    ``member_scores [..., L, K]``, ``votes [..., K]`` (the success counts ``c_k``, 0 for an empty
    slot), ``mask [..., L]``. Normalized by the total count, so scores are mean ranks.
    """
    ranks = rank_votes(member_scores, mask)
    total = votes.sum(-1, keepdim=True).clamp_min(1e-12)
    return (ranks * (votes / total).unsqueeze(-2)).sum(-1)


class PairwisePerceptron(nn.Module):
    """R runs of the pairwise perceptron with a committee of the K best hypotheses each.

    Args:
        n_features: ``d``.
        committee_size: K, one value or one per run (runs with a smaller K lock their extra
            slots). ``1`` is the pocket perceptron; ``>=`` the number of hypotheses, the voted one.
        n_runs: R.
        device, dtype: where and in which float type the weights live (counters are int64).
        fused: on CPU, run ``fit_pairs`` through the C++ loop of ``kernels.pairwise_perceptron_cpu``
            (the same arithmetic, one loop per run; falls back to the tensor path where it cannot be
            built). False forces the tensor path, the reference; ``"cpu"`` requires the kernel.

    State: ``weights [R, d]`` (the current hypothesis ``w^l``), ``successes [R]`` (its ``c_l``),
    ``hypotheses [R]`` (``l``), ``committee [R, K, d]``, ``counts [R, K]`` (-1 for an empty slot),
    ``births [R, K]`` (the member's ``l``), ``weighted_sum [R, d]`` (``sum c_l w^l`` over closed
    hypotheses, the averaged perceptron), ``mistakes [R]`` and ``seen [R]`` pairs: buffers, so ``.to()``,
    ``state_dict`` and ``load_state_dict`` are ``nn.Module``'s.
    """

    def __init__(
        self,
        n_features: int,
        *,
        committee_size: int | Sequence[int] = 20,
        n_runs: int = 1,
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
        fused: bool | Literal["cpu"] = True,
    ) -> None:
        if fused not in (True, False, "cpu"):
            raise ValueError(f"fused must be True, False or 'cpu'; got {fused!r}")
        super().__init__()
        self.fused = fused
        sizes = torch.as_tensor(committee_size, dtype=torch.long).reshape(-1)
        if sizes.numel() not in (1, n_runs) or (sizes < 1).any():
            raise ValueError(f"committee_size must be >= 1, one value or one per run; got {committee_size}")
        self.d, self.r = n_features, n_runs
        device = torch.device(device) if device is not None else torch.device("cpu")
        self.register_buffer("sizes", sizes.expand(n_runs).clone().to(device))
        self.k = int(sizes.max())
        options = dict(device=device, dtype=dtype)
        self.register_buffer("weights", torch.zeros(n_runs, n_features, **options))
        self.register_buffer("weighted_sum", torch.zeros(n_runs, n_features, **options))
        # one spare slot (index K) takes the writes of the runs that insert nothing this step, so
        # an insertion is one unconditional index_put rather than a gather, a where and a put
        self.register_buffer("_committee", torch.zeros(n_runs, self.k + 1, n_features, **options))
        self.register_buffer("_counts", torch.full((n_runs, self.k + 1), -1, dtype=torch.long, device=device))
        slot = torch.arange(self.k + 1, device=device)
        # empty slots: distinct negative births, so that they fill in slot order
        self.register_buffer("_births", (slot - self.k - 1).expand(n_runs, -1).clone())
        self._counts[slot.expand(n_runs, -1) >= self.sizes[:, None]] = LOCKED
        self._births[slot.expand(n_runs, -1) >= self.sizes[:, None]] = 0
        self.register_buffer("successes", torch.zeros(n_runs, dtype=torch.long, device=device))
        self.register_buffer("hypotheses", torch.zeros(n_runs, dtype=torch.long, device=device))
        self.register_buffer("mistakes", torch.zeros(n_runs, dtype=torch.long, device=device))
        self.register_buffer("seen", torch.zeros(n_runs, dtype=torch.long, device=device))
        self.register_buffer("_runs", torch.arange(n_runs, device=device), persistent=False)
        self.register_buffer("_spare", torch.full((n_runs,), self.k, dtype=torch.long, device=device), persistent=False)

    # views of the first K slots (the spare slot is internal)
    @property
    def committee(self) -> Tensor:
        return self._committee[:, : self.k]

    @property
    def counts(self) -> Tensor:
        return self._counts[:, : self.k]

    @property
    def births(self) -> Tensor:
        return self._births[:, : self.k]

    @property
    def device(self) -> torch.device:
        return self.weights.device

    @property
    def dtype(self) -> torch.dtype:
        return self.weights.dtype

    # -- training -------------------------------------------------------------------------------
    def partial_fit(self, differences: Tensor, eta: Tensor) -> Tensor:
        """Stream ``differences [R, T, d]`` (``d_i - d_j`` of each run's pairs, in order) with their
        ``eta [R, T]``; returns the mistakes ``[R, T]`` bool."""
        differences = differences.to(self.device, self.dtype)
        eta = eta.to(self.device, self.dtype)
        if differences.dim() != 3 or differences.shape[0] != self.r or differences.shape[2] != self.d:
            raise ValueError(f"expected differences [R={self.r}, T, d={self.d}], got {tuple(differences.shape)}")
        if eta.shape != differences.shape[:2]:
            raise ValueError(f"expected eta [R, T] = {tuple(differences.shape[:2])}, got {tuple(eta.shape)}")
        steps = differences.shape[1]
        if steps == 0:
            return torch.zeros(self.r, 0, dtype=torch.bool, device=self.device)
        mistakes = torch.stack(
            [self._step(x, step) for x, step in zip(differences.unbind(1), eta.unbind(1), strict=True)], 1
        )
        self.mistakes += mistakes.sum(1)
        self.seen += steps
        return mistakes

    def fit_pairs(
        self, features: Tensor, pairs: Tensor, eta: Tensor, order: Tensor, *, columns: Tensor | None = None
    ) -> Tensor:
        """One pass: run r streams the pairs ``order[r]`` of ``pairs [P, 2]`` (document indices into
        ``features [N, d]``, preferred first) with ``eta [P]``; ``order [R, P]``. Returns each run's
        mistakes in the pass ``[R]`` long. Difference vectors are gathered a chunk at a time.

        ``columns [c]`` (long): ``features`` holds only these columns of the documents, every other
        one being 0 for every document (a feature map's dead columns), as in every earlier pass.
        Those columns' weights, sums and members are then 0 and stay 0 (each update adds
        ``eta * 0``), so the pass runs on the ``c`` columns alone and leaves the state the
        full-width pass would, for a fraction of the work."""
        if columns is not None:
            return self._fit_columns(features, pairs, eta, order, columns.to(self.device))
        total = torch.zeros(self.r, dtype=torch.long, device=self.device)
        features = features.to(self.device, self.dtype)
        pairs, eta, order = pairs.to(self.device), eta.to(self.device, self.dtype), order.to(self.device)
        if self._use_kernel() and order.shape[1]:
            state = {name: getattr(self, name) for name in ("weights", "weighted_sum", "successes", "hypotheses")}
            state.update(committee=self._committee, counts=self._counts, births=self._births)
            mistakes = pairwise_perceptron_cpu.stream(features, pairs, eta, order, state).sum(1)
            self.mistakes += mistakes
            self.seen += order.shape[1]
            return mistakes
        for start in range(0, order.shape[1], CHUNK):
            chosen = order[:, start : start + CHUNK]  # [R, t]
            preferred, other = pairs[chosen, 0], pairs[chosen, 1]
            total += self.partial_fit(features[preferred] - features[other], eta[chosen]).sum(1)
        return total

    def _fit_columns(self, features: Tensor, pairs: Tensor, eta: Tensor, order: Tensor, columns: Tensor) -> Tensor:
        """``fit_pairs`` on the given columns: a learner over them, the counters shared, then the
        vectors written back into their columns."""
        if features.shape[1] != len(columns):
            raise ValueError(f"features has {features.shape[1]} columns, columns lists {len(columns)}")
        vectors = ("weights", "weighted_sum", "_committee")
        full = {name: getattr(self, name) for name in vectors}
        for name in vectors:
            setattr(self, name, full[name][..., columns].contiguous())
        width, self.d = self.d, len(columns)
        try:
            mistakes = self.fit_pairs(features, pairs, eta, order)
        finally:
            for name in vectors:
                full[name][..., columns] = getattr(self, name)
                setattr(self, name, full[name])
            self.d = width
        return mistakes

    def _use_kernel(self) -> bool:
        """Whether ``fit_pairs`` runs the C++ loop (CPU, contiguous state, kernel built)."""
        if not self.fused or self.device.type != "cpu":
            if self.fused == "cpu":
                raise RuntimeError(f"fused='cpu' needs the learner on the CPU, not {self.device}")
            return False
        if pairwise_perceptron_cpu.kernel() is None:
            if self.fused == "cpu":
                raise RuntimeError("fused='cpu': the pairwise perceptron CPU kernel cannot be built (kernels.build)")
            return False
        return True

    def _step(self, x: Tensor, eta: Tensor) -> Tensor:
        """One pair of every run: ``x [R, d]`` = ``d_i - d_j``, ``eta [R]``. Returns mistakes ``[R]``."""
        # s(d_j) >= s(d_i): a mis-ranking. Summed in float64, so that no summation order (the fused
        # loop's, another device's) flips a decision on a margin within rounding of 0
        mistake = (self.weights * x).sum(-1, dtype=torch.float64) <= 0
        # the committee's minimum by (count, birth); empty slots first, locked slots never
        priority = self.births.add(self.counts, alpha=PRIORITY_SHIFT)
        lowest, slot = priority.min(-1)
        least_count = torch.div(lowest, PRIORITY_SHIFT, rounding_mode="floor")  # empty slots: < 0
        enters = mistake & (self.successes > least_count)
        # the entering hypothesis replaces the minimum (add, then remove the minimum while |W| > K);
        # runs where nothing enters write into the spare slot
        target = torch.where(enters, slot, self._spare)
        self._committee.index_put_((self._runs, target), self.weights)
        self._counts.index_put_((self._runs, target), self.successes)
        self._births.index_put_((self._runs, target), self.hypotheses)
        # a product, then a sum, each rounded (no fused multiply-add), as the C++ loop computes them
        closed = (self.successes * mistake).to(self.dtype).unsqueeze(-1)
        self.weighted_sum.add_(self.weights * closed)  # the averaged perceptron's sum c_l w^l
        self.weights.add_(x * (eta * mistake).unsqueeze(-1))  # w^{l+1} = w^l + eta_q (d_i - d_j)
        self.hypotheses += mistake
        self.successes.add_(1).mul_(~mistake)  # c_l + 1 on a success; a new hypothesis starts at 0
        return mistake

    # -- read-outs -----------------------------------------------------------------------------
    def members(self, *, include_current: bool = True, groups: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The committee ``(weights [R, K, d], votes [R, K])``: votes are the success counts, 0 for
        empty slots. With ``include_current`` the running hypothesis is offered to it first by the
        same rule as on a mistake (a copy; the state is unchanged). ``groups [G, n]`` (run indices)
        pools runs: ``(weights [G, n K, d], votes [G, n K])``, every member of a group's runs."""
        committee, counts = self.committee.clone(), self.counts.clone()
        if include_current:
            priority = self.births.add(counts, alpha=PRIORITY_SHIFT)
            lowest, slot = priority.min(-1)
            enters = self.successes > torch.div(lowest, PRIORITY_SHIFT, rounding_mode="floor")
            rows = self._runs[enters]
            committee[rows, slot[enters]] = self.weights[enters]
            counts[rows, slot[enters]] = self.successes[enters]
        votes = torch.where((counts >= 0) & (counts < LOCKED), counts, 0).to(self.dtype)
        if groups is None:
            return committee, votes
        groups = groups.to(self.device)
        return committee[groups].flatten(1, 2), votes[groups].flatten(1)

    def linear_weights(
        self, combine: Combine = "weight", *, include_current: bool = True, groups: Tensor | None = None
    ) -> Tensor:
        """The linear scorer of a read-out, ``[R, d]``: ``last`` (plain), ``average`` (averaged),
        ``weight`` (the committee's count-weighted mean; pocket for K = 1). All zero before any
        success. ``groups [G, n]`` pools runs: ``[G, d]``, the mean of each group's runs' scorers."""
        weights = self._linear_weights(combine, include_current=include_current)
        return weights if groups is None else weights[groups.to(self.device)].mean(1)

    def _linear_weights(self, combine: Combine, *, include_current: bool) -> Tensor:
        if combine == "last":
            return self.weights.clone()
        if combine == "average":
            total = self.weighted_sum.clone()
            successes = (self.seen - self.mistakes).to(self.dtype)  # sum_l c_l over every hypothesis
            if include_current:
                total.addcmul_(self.weights, self.successes.unsqueeze(-1).to(self.dtype))
            else:
                successes = successes - self.successes.to(self.dtype)
            return total / successes.clamp_min(1).unsqueeze(-1)
        if combine == "weight":
            committee, votes = self.members(include_current=include_current)
            return (committee * votes.unsqueeze(-1)).sum(1) / votes.sum(1).clamp_min(1).unsqueeze(-1)
        raise ValueError(f"linear_weights combines last, average or weight; got {combine!r}")

    def scores(
        self,
        features: Tensor,
        mask: Tensor | None = None,
        combine: Combine = "weight",
        *,
        include_current: bool = True,
        groups: Tensor | None = None,
    ) -> Tensor:
        """Scores ``[R, B, L]`` of the queries ``features [B, L, d]`` (``mask [B, L]``) under every run
        (``[G, B, L]`` under every group of runs with ``groups [G, n]``, as ``members`` pools them).

        Linear read-outs score ``w . x``; ``vote`` scores each document by the members' rank votes
        (padded documents score 0)."""
        features = features.to(self.device, self.dtype)
        if combine != "vote":
            weights = self.linear_weights(combine, include_current=include_current, groups=groups)
            return torch.einsum("bld,rd->rbl", features, weights)
        committee, votes = self.members(include_current=include_current, groups=groups)
        member_scores = torch.einsum("bld,rkd->rblk", features, committee)
        return rank_vote_scores(member_scores, votes[:, None, :], None if mask is None else mask.unsqueeze(0))
