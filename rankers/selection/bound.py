"""Usunier, Truong, Amini & Gallinari, "Ranking with Unlabeled Data: A First Study" (NIPS 2005 LR
workshop), section 3: a certified upper bound on the expected bipartite ranking risk of a learned
ranker from the K fold models of a cross-validation and unlabeled queries.

The risk of a ranking ``rg`` (0-based positions) of one query with ``p`` relevant (label > 0) and
``q`` irrelevant documents is the share of misordered (relevant, irrelevant) pairs,

    Delta(y, rg) = 1 / (p q) * sum_{i: y_i > 0} sum_{j: y_j = 0} [[rg(i) > rg(j)]],

defined when ``p, q >= 1``. Eq. (1): for two rankings ``rg, rg'`` of the same ``K`` documents, with
``delta`` the values ``rg(i) - rg'(i)`` sorted in decreasing order,

    Delta(y, rg) - Delta(y, rg') <= d(rg, rg') = max_{p + q = K} 1 / (p q) * sum_{k <= p} delta_k,

for every labelling ``y``: ``d`` needs no label, so ``D(f, f') = E_x d(f(x), f'(x))`` is estimated on
unlabeled queries, and ``eps(f) <= eps(f') + D(f, f')``. Eq. (2), with ``f'`` the randomized
cross-validation ranker ``f_cv`` (one of the K fold models ``f_k``, each trained without fold k,
drawn uniformly):

    eps(f) <= 1/K sum_k [ eps_hat(f_k, S_k) + sqrt(ln(2K / delta) / (2 n_k)) ]      (held-out part)
              + 1/m sum_j 1/K sum_k d(f(x_j), f_k(x_j)) + sqrt(ln(2 / delta) / (2 m))  (disagreement part)

with probability at least ``1 - delta``: McDiarmid's inequality (a mean of independent values in
[0, 1] changes by at most 1/n when one changes) for each fold's held-out mean at ``delta / 2K``
(a union bound over the folds) and for the disagreement mean at ``delta / 2``. The paper draws one
fold model ``theta_j`` per unlabeled query; we average over all K instead, which is the same
expectation and a function of the unlabeled sample alone, so McDiarmid applies with the same constant.

Ties. A model's scores may tie (RankBoost's threshold sums often do). The bound is stated for the
*pessimistic* risk of the learned model, every tied (relevant, irrelevant) pair counted as misordered,
which is at least its risk under any tie-breaking (trec_eval's, ours, or half credit). It follows from
eq. (1) applied to the tie-breaking that is worst against ``f_k``: within a tie, the document ``f_k``
ranks lowest goes first (``worst_case_ranks``); ``d`` of that ranking is the maximum of ``d`` over
all tie-breakings, for every ``p`` at once. The fold models' rankings are fixed permutations (ties
by list position), whose held-out risks are exact.

Queries without a pair. ``Delta`` is undefined for a query whose documents are all relevant or all
irrelevant. ``certified_bound`` bounds the risk over the queries that have a pair (what a test-set
average over such queries estimates): with ``B`` that event and ``pi = P(B)``, ``eps_B(f) <=
eps_B(f_cv) + E[d | B] <= eps_B(f_cv) + D / pi``, and ``pi`` is bounded below from the labeled
training queries (Hoeffding at ``delta / 4``; the disagreement part then takes ``delta / 4``). When
every training query has a pair, as in most LETOR files, ``pi``'s bound costs ``sqrt(ln(4/delta)/2n)``.

Shapes: ``[B, L]`` padded batches with ``mask [B, L]`` (True = a real document), as everywhere.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

__all__ = [
    "BoundParts",
    "bipartite_risk",
    "certified_bound",
    "disagreement",
    "mcdiarmid_radius",
    "permutation_ranks",
    "worst_case_ranks",
]


def _full_mask(scores: Tensor, mask: Tensor | None) -> Tensor:
    if scores.dim() != 2:
        raise ValueError(f"expected [B, L] scores, got {tuple(scores.shape)}")
    if mask is None:
        return torch.ones_like(scores, dtype=torch.bool)
    if mask.shape != scores.shape:
        raise ValueError(f"mask {tuple(mask.shape)} and scores {tuple(scores.shape)} differ")
    return mask.bool()


def _positions(order: Tensor) -> Tensor:
    """Inverse of a per-row permutation ``order [B, L]`` (0-based positions ``[B, L]``)."""
    positions = torch.empty_like(order)
    ranks = torch.arange(order.shape[-1], device=order.device).expand_as(order)
    return positions.scatter_(-1, order, ranks)


def permutation_ranks(scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """0-based positions ``[B, L]`` (long) of the ranking by descending score, ties by list position
    (the metrics' convention), padding after every real document.

    Example:
        >>> permutation_ranks(torch.tensor([[0.5, 2.0, 0.5]]))
        tensor([[1, 0, 2]])
    """
    mask = _full_mask(scores, mask)
    keyed = torch.where(mask, scores.float(), torch.full_like(scores, -math.inf, dtype=torch.float32))
    keyed = torch.nan_to_num(keyed, nan=-math.inf, neginf=-math.inf)
    order = torch.sort(keyed, dim=-1, descending=True, stable=True).indices
    order = _padding_last(order, mask)
    return _positions(order)


def _padding_last(order: Tensor, mask: Tensor) -> Tensor:
    """Reorder ``order`` so real documents keep their relative order and padding comes last."""
    is_pad = (~mask).gather(-1, order).to(torch.int8)
    return order.gather(-1, torch.sort(is_pad, dim=-1, stable=True).indices)


def worst_case_ranks(scores: Tensor, against: Tensor, mask: Tensor | None = None) -> Tensor:
    """Positions ``[B, L]`` of ``scores``' ranking with its ties broken against the ranking
    ``against`` (0-based positions): within a tie, the document ``against`` ranks lowest goes first.
    ``disagreement`` of this ranking and ``against`` is the largest over all tie-breakings.

    Example:
        >>> worst_case_ranks(torch.tensor([[1.0, 1.0, 0.0]]), torch.tensor([[0, 1, 2]]))
        tensor([[1, 0, 2]])
    """
    mask = _full_mask(scores, mask)
    keyed = torch.where(mask, scores.float(), torch.full_like(scores, -math.inf, dtype=torch.float32))
    keyed = torch.nan_to_num(keyed, nan=-math.inf, neginf=-math.inf)
    # secondary key first (stable sorts): against's position, descending
    by_against = torch.sort(against.float(), dim=-1, descending=True, stable=True).indices
    order = by_against.gather(
        -1, torch.sort(keyed.gather(-1, by_against), dim=-1, descending=True, stable=True).indices
    )
    return _positions(_padding_last(order, mask))


def bipartite_risk(
    ranks: Tensor, labels: Tensor, mask: Tensor | None = None, *, scores: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The paper's Delta per query: the share of (relevant, irrelevant) pairs that are misordered.

    Args:
        ranks: 0-based positions ``[B, L]`` of a ranking (``permutation_ranks``).
        labels: ``[B, L]``; relevant when ``> 0``.
        mask: ``[B, L]`` bool or None.
        scores: if given, the pessimistic risk of these scores instead: a pair whose scores tie counts
            as misordered whatever ``ranks`` says (the risk of the worst tie-breaking).

    Returns:
        ``risk [B]`` float32 (0 where undefined) and ``defined [B]`` bool (the query has a pair).

    Example:
        >>> labels = torch.tensor([[1.0, 0.0, 0.0]])
        >>> bipartite_risk(torch.tensor([[1, 0, 2]]), labels)
        (tensor([0.5000]), tensor([True]))
        >>> bipartite_risk(torch.tensor([[0, 1, 2]]), labels, scores=torch.tensor([[1.0, 1.0, 0.0]]))
        (tensor([0.5000]), tensor([True]))
    """
    mask = _full_mask(labels, mask)
    relevant = (labels > 0) & mask
    irrelevant = (labels <= 0) & mask
    pairs = relevant[:, :, None] & irrelevant[:, None, :]  # [B, L(rel i), L(irr j)]
    # pessimistic: a tie is misordered whatever the tie-breaking
    wrong = ranks[:, :, None] > ranks[:, None, :] if scores is None else scores[:, :, None] <= scores[:, None, :]
    n_pairs = pairs.sum((-1, -2)).float()
    misordered = (pairs & wrong).sum((-1, -2)).float()
    defined = n_pairs > 0
    return torch.where(defined, misordered / n_pairs.clamp_min(1.0), torch.zeros_like(n_pairs)), defined


def disagreement(ranks: Tensor, other: Tensor, mask: Tensor | None = None) -> Tensor:
    """Eq. (1)'s ``d(rg, rg')`` per query ``[B]``: the largest, over ``p + q = K`` (``p, q >= 1``), of
    ``1 / (p q)`` times the sum of the ``p`` largest ``rg(i) - rg'(i)``; 0 for lists of fewer than two
    documents. Always in [0, 1].

    Args:
        ranks, other: 0-based positions ``[B, L]`` of two rankings of the same documents (each row a
            permutation of ``0..K-1`` over its real documents).
        mask: ``[B, L]`` bool or None.

    Example:
        >>> disagreement(torch.tensor([[2, 1, 0]]), torch.tensor([[0, 1, 2]]))
        tensor([1.])
        >>> disagreement(torch.tensor([[0, 1, 2]]), torch.tensor([[0, 1, 2]]))
        tensor([0.])
    """
    mask = _full_mask(ranks, mask)
    gaps = torch.where(mask, (ranks - other).double(), torch.full(ranks.shape, -math.inf, dtype=torch.float64))
    top = torch.sort(gaps, dim=-1, descending=True).values.nan_to_num(neginf=0.0)
    sums = top.cumsum(-1)  # sums[:, p - 1]: the p largest
    k = mask.sum(-1, keepdim=True).double()  # [B, 1]
    p = torch.arange(1, ranks.shape[-1] + 1, dtype=torch.float64, device=ranks.device)
    q = k - p
    valid = (q >= 1) & (p <= k)
    ratio = torch.where(valid, sums / (p * q.clamp_min(1.0)), torch.zeros_like(sums))
    best = ratio.amax(-1) if ratio.shape[-1] else ratio.sum(-1)
    return best.clamp(0.0, 1.0).float()


def mcdiarmid_radius(n: int, delta: float) -> float:
    """``sqrt(ln(1/delta) / (2 n))``: with probability at least ``1 - delta`` the expectation of
    values in [0, 1] is below the mean of ``n`` independent draws plus this (McDiarmid / Hoeffding).

    Example:
        >>> round(mcdiarmid_radius(200, 0.05), 4)
        0.0865
    """
    if n < 1:
        raise ValueError(f"need at least one value, got n={n}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return math.sqrt(math.log(1.0 / delta) / (2.0 * n))


@dataclass(frozen=True)
class BoundParts:
    """The certified bounds and every number they are made of (``results.json["bound"]``).

    ``bound`` is the risk over queries that have a pair (eq. (2) on that event, ``D / pi``), at
    ``1 - delta``; ``bound_all_queries`` is eq. (2) as printed, over every query with ``Delta = 0``
    where there is no pair, at ``1 - delta`` too (a separate statement, not a joint one).
    """

    bound: float
    bound_all_queries: float
    delta: float
    folds: int
    selected_among: int  # candidates the folds chose among (a union bound over their fold models)
    held_out_risk: float  # 1/K sum_k eps_hat(f_k, S_k) over held-out queries with a pair
    held_out_bound: float  # eps_hat(f_cv, delta/2): the held-out part of eq. (2), queries with a pair
    held_out_bound_all_queries: float  # the same over every held-out query (Delta = 0 without a pair)
    fold_queries: list[int]  # n_k: held-out queries with a pair, per fold
    fold_queries_all: list[int]  # every held-out query, per fold
    fold_risks: list[float]
    disagreement: float  # 1/m sum_j 1/K sum_k d(f(x_j), f_k(x_j))
    disagreement_bound: float  # D_hat(f, f_cv, S_u) at delta/4 (for ``bound``)
    disagreement_bound_all_queries: float  # D_hat at delta/2 (for ``bound_all_queries``)
    unlabeled_queries: int  # m
    pair_share_lower: float  # pi: lower bound on the share of queries with a pair, at delta/4
    labeled_pair_share: float  # its estimate on the training queries
    training_queries: int

    def as_dict(self) -> dict:
        return asdict(self)


def certified_bound(
    fold_risks: list[Tensor],
    fold_defined: list[Tensor],
    unlabeled_disagreement: Tensor,
    *,
    training_pairs: Tensor,
    delta: float = 0.05,
    selected_among: int = 1,
) -> BoundParts:
    """Eq. (2) with the cross-validation ranker.

    Args:
        fold_risks: K tensors ``[n_k]``: each fold model's ``Delta`` on every held-out query
            (``bipartite_risk``; 0 where undefined).
        fold_defined: K bool tensors ``[n_k]``: which held-out queries have a pair.
        unlabeled_disagreement: ``[m]``: per unlabeled query, the mean over the K fold models of
            ``disagreement(worst_case_ranks(f), ranks of f_k)``.
        training_pairs: ``[n]`` bool: which labeled training queries have a pair (for ``pi``).
        delta: each bound holds with probability at least ``1 - delta``.
        selected_among: how many candidates the held-out folds chose among (``model=auto``): each
            fold's McDiarmid term then takes ``delta / (2 K C)``, a union bound over the C candidates'
            fold models, so that the chosen one's held-out part holds whichever was chosen.

    Example:
        >>> risks = [torch.full((100,), 0.2)] * 5
        >>> defined = [torch.ones(100, dtype=torch.bool)] * 5
        >>> parts = certified_bound(risks, defined, torch.full((300,), 0.05),
        ...                         training_pairs=torch.ones(500, dtype=torch.bool))
        >>> round(parts.bound, 3), round(parts.held_out_bound, 3), round(parts.disagreement_bound, 3)
        (0.508, 0.363, 0.135)
    """
    k = len(fold_risks)
    if k < 2 or len(fold_defined) != k:
        raise ValueError(f"the cross-validation ranker needs at least 2 fold models with their masks, got {k}")
    if selected_among < 1:
        raise ValueError(f"selected_among must be >= 1, got {selected_among}")
    if any(int(d.sum()) == 0 for d in fold_defined):
        raise ValueError("a held-out fold has no query with both a relevant and an irrelevant document")
    m, n = len(unlabeled_disagreement), len(training_pairs)
    if m == 0:
        raise ValueError("no unlabeled query to estimate the disagreement on")
    fold_delta = delta / (2 * k * selected_among)
    with_pair = [r[d].double() for r, d in zip(fold_risks, fold_defined, strict=True)]
    per_fold = [float(r.mean()) for r in with_pair]
    held_out = sum(mean + mcdiarmid_radius(len(r), fold_delta) for mean, r in zip(per_fold, with_pair, strict=True))
    held_out_all = sum(float(r.double().mean()) + mcdiarmid_radius(len(r), fold_delta) for r in fold_risks)
    share = float(training_pairs.double().mean())
    share_lower = share - mcdiarmid_radius(n, delta / 4)
    mean_d = float(unlabeled_disagreement.double().mean())
    d_bound = min(1.0, mean_d + mcdiarmid_radius(m, delta / 4))
    d_bound_all = min(1.0, mean_d + mcdiarmid_radius(m, delta / 2))
    scaled = d_bound / share_lower if share_lower > 0 else math.inf
    return BoundParts(
        bound=min(1.0, held_out / k + scaled),
        bound_all_queries=min(1.0, held_out_all / k + d_bound_all),
        delta=delta,
        folds=k,
        selected_among=selected_among,
        held_out_risk=sum(per_fold) / k,
        held_out_bound=held_out / k,
        held_out_bound_all_queries=held_out_all / k,
        fold_queries=[len(r) for r in with_pair],
        fold_queries_all=[len(r) for r in fold_risks],
        fold_risks=per_fold,
        disagreement=mean_d,
        disagreement_bound=d_bound,
        disagreement_bound_all_queries=d_bound_all,
        unlabeled_queries=m,
        pair_share_lower=share_lower,
        labeled_pair_share=share,
        training_queries=n,
    )
