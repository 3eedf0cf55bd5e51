"""RankBoost (Freund, Iyer, Schapire & Singer, JMLR 4, 2003) with the O(n) RankBoost.B potentials.

    python train.py model=rankboost data=letor data.train=train.txt data.val=vali.txt data.test=test.txt

The feedback is every crucial pair of a query: ``(x0, x1)`` with ``label(x1) > label(x0)`` (the k-partite
reduction of graded labels: pairs between every two label levels; equal labels are no pair). The initial
distribution ``D_1(x0, x1) = c_q`` is uniform over all crucial pairs (``pair_weight="pairs"``, the paper's
``D = c max(0, Phi)`` with ``Phi = +-1``, as RankLib) or gives every query the same mass
(``pair_weight="queries"``). Round t picks a weak ranker ``h_t``, a weight ``alpha_t``, and updates
``D_{t+1}(x0, x1) = D_t(x0, x1) exp(alpha_t (h_t(x0) - h_t(x1))) / Z_t``; the final ranking is
``H(x) = sum_t alpha_t h_t(x)`` and Theorem 1 bounds ``rloss_{D_1}(H) <= prod_t Z_t``.

How a round stays O(documents x features) instead of O(pairs) (the paper's section 3.3, generalized to
k levels): ``D_t(x0, x1) = D_1(x0, x1) exp(H(x0) - H(x1)) / prod Z`` factorizes per document, so
everything a round needs is a per-(query, level) log-sum-exp of ``H`` (or ``-H``) followed by a prefix
over the query's levels:

* potentials ``pi(x) = sum_x' D(x', x) - D(x, x')`` (in-mass from the levels below minus out-mass to the
  levels above), in O(n);
* ``r(h) = sum D(x0, x1) (h(x1) - h(x0)) = sum_x h(x) pi(x)`` for every candidate at once: the
  documents are sorted per feature once, and each round a cumulative sum of ``pi`` along that order
  gives ``r`` of every threshold ``[F, J]`` (and both ``q_def``) in one tensor operation;
* the exact ``alpha = 1/2 ln(W+ / W-)`` of a {0, 1} ranker (``W+-`` the D-mass of pairs it orders
  right / wrong): ``W+`` by the same prefix sums with the lower documents restricted to ``h = 0``,
  ``W- = W+ - r``, in O(n); ``Z_t = W0 + W+ e^-alpha + W- e^alpha`` follows exactly.

Weak rankers (section 4): ``h(x) = 1 if x_f > theta, 0 if x_f <= theta, q_def if x_f is unranked``. A
feature value equal to ``missing`` (e.g. 0 = "not rated" in collaborative filtering) is the paper's
abstention; with ``missing=None`` every value is ranked. The learner maximizes ``|r|`` over features,
candidate thresholds (``thresholds`` quantiles or equal-width steps of the ranked values per feature,
or all distinct values when there are fewer) and ``q_def in {0, 1}``.

No Python loop runs over queries, features, thresholds or pairs in a round, and a round reads nothing
back from the device; the LightningModule syncs once per epoch (``rounds_per_epoch`` rounds).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from datamodules.normalization import FeatureNormalizer

log = logging.getLogger(__name__)

THRESHOLD_KINDS = ("quantile", "uniform", "ranklib")
PAIR_WEIGHTS = ("pairs", "queries")
ALPHAS = ("exact", "approx")
NEG_INF = float("-inf")


# ---------------------------------------------------------------------------------------------------
# the ensemble as a scorer (training, evaluation and export share it)
# ---------------------------------------------------------------------------------------------------
def weak_outputs(
    features: Tensor, unranked: Tensor | None, feature: Tensor, threshold: Tensor, q_def: Tensor
) -> Tensor:
    """``h_t(x)`` of T weak rankers: ``[..., F]`` features -> ``[..., T]`` in {0, 1}.

    ``unranked [..., F]`` bool marks abstentions (None: none); ``feature [T]`` long, ``threshold [T]``,
    ``q_def [T]`` float.
    """
    values = features.index_select(-1, feature)
    h = (values > threshold).to(features.dtype)
    if unranked is not None:
        h = torch.where(unranked.index_select(-1, feature), q_def.to(features.dtype), h)
    return h


class RankBoostScorer(nn.Module):
    """``H(x) = sum_t alpha_t h_t(x)``: raw features ``[..., F]`` -> scores ``[...]``.

    It carries the datamodule's normalizer: thresholds apply to normalized values, abstentions
    (``raw == missing``) are read from the raw ones, so the export needs the raw features.
    """

    def __init__(
        self,
        normalizer: FeatureNormalizer,
        feature: Tensor,
        threshold: Tensor,
        q_def: Tensor,
        alpha: Tensor,
        missing: float | None = None,
    ) -> None:
        super().__init__()
        self.normalizer = normalizer
        self.register_buffer("feature", feature.long())
        self.register_buffer("threshold", threshold.float())
        self.register_buffer("q_def", q_def.float())
        self.register_buffer("alpha", alpha.float())
        self.has_missing = missing is not None
        self.missing = float(missing) if missing is not None else 0.0

    def forward(self, features: Tensor) -> Tensor:
        normalized = self.normalizer(features, None)
        unranked = features == self.missing
        h = weak_outputs(normalized, unranked if self.has_missing else None, self.feature, self.threshold, self.q_def)
        return (h * self.alpha).sum(-1)


# ---------------------------------------------------------------------------------------------------
# training data laid out for the O(n) potentials and the per-feature prefix sums
# ---------------------------------------------------------------------------------------------------
@dataclass
class BoostData:
    """Flat training documents and what every round reuses.

    features [N, F] (normalized), unranked [N, F] bool or None, query [N] long, level [N] long (the
    rank of the document's label among its query's distinct labels), log_c [N] (log D_1 of a pair
    whose top document is this one's query), n_queries Q, n_levels K (most levels in a query),
    thresholds [F, J], positions [F, J] long (ranked documents above each threshold), n_ranked [F]
    long; selected [S] long: per feature, its documents by decreasing value down to the lowest
    threshold (or down to the last ranked one when some abstain), the features one after another;
    starts [F] long: where each feature's run begins in ``selected``. Documents below every
    threshold never enter an ``r`` (on sparse LETOR features, most of them), so a round costs
    O(S) <= O(F N).
    """

    features: Tensor
    unranked: Tensor | None
    query: Tensor
    level: Tensor
    log_c: Tensor
    n_queries: int
    n_levels: int
    positions: Tensor
    n_ranked: Tensor
    thresholds: Tensor
    selected: Tensor
    starts: Tensor
    n_pairs: int
    columns: Tensor | None = None  # [F, N], the features column by column (a chosen ranker's outputs)
    unranked_columns: Tensor | None = None  # [F, N] bool

    def outputs(self, feature: Tensor, threshold: Tensor, q_def: Tensor) -> Tensor:
        """``h(x) [N]`` of one weak ranker on the training documents (feature etc. 0-dim tensors)."""
        if self.columns is None:  # made on first use: a row per feature is a contiguous read
            self.columns = self.features.T.contiguous()
            self.unranked_columns = None if self.unranked is None else self.unranked.T.contiguous()
        h = (self.columns[feature] > threshold).to(self.features.dtype)
        if self.unranked_columns is not None:
            h = torch.where(self.unranked_columns[feature], q_def.to(h.dtype), h)
        return h

    @property
    def group(self) -> Tensor:
        return self.query * self.n_levels + self.level


def candidate_thresholds(
    features: Tensor, unranked: Tensor | None, *, count: int = 10, kind: str = "quantile"
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Candidate thresholds per feature and the sort they come from.

    Args: features ``[N, F]``; unranked ``[N, F]`` bool or None; count J; kind ``quantile`` (the
    ranked values at quantile levels ``j / J``, j = 0..J-1, the minimum included) or ``uniform``
    (``min + j (max - min) / J``, equal-width steps). A feature with at most J distinct ranked values
    gets exactly those values. ``ranklib`` is RankLib's RankBoost candidate set bit for bit, J + 1
    columns: ``max``, then J - 1 times ``- (max - min) / J`` (subtracted step by step in float64),
    and ``min - 1e8``; RankLib compares float32 values with these float64 thresholds, so each is
    rounded down to the features' dtype (``x > t`` in float64 iff ``x > round_down(t)``). Duplicates
    become ``+inf`` (an empty ranker, r = 0).

    Returns ``thresholds [F, J]`` (``[F, J + 1]`` for ranklib), ``order [F, N]`` int32 (documents by
    decreasing ranked value, unranked last), ``positions [F, J]`` (ranked documents above each
    threshold), ``n_ranked [F]``.
    """
    if kind not in THRESHOLD_KINDS:
        raise ValueError(f"threshold kind must be one of {THRESHOLD_KINDS}, got {kind!r}")
    n, f = features.shape
    ranked = torch.ones_like(features, dtype=torch.bool) if unranked is None else ~unranked
    keyed = torch.where(ranked, features, torch.full_like(features, NEG_INF)).T.contiguous()  # [F, N]
    ascending, order_up = keyed.sort(dim=1, stable=True)
    n_ranked = ranked.sum(0)  # [F]
    first = n - n_ranked  # the first ranked position of the ascending sort
    levels = torch.arange(count, device=features.device, dtype=torch.float64) / count  # [J]
    if kind == "quantile":
        index = first[:, None] + (levels[None, :] * (n_ranked[:, None] - 1).clamp_min(0)).floor().long()
        thresholds = ascending.gather(1, index.clamp(0, max(n - 1, 0)))
    else:
        low = ascending.gather(1, first.clamp_max(max(n - 1, 0))[:, None])
        high = ascending[:, -1:]
        if kind == "ranklib":
            thresholds = _ranklib_thresholds(low, high, count, features.dtype)
        else:
            thresholds = (low.double() + levels[None, :] * (high - low).double()).to(features.dtype)
    if kind == "ranklib":
        return _finish_candidates(thresholds, ascending, order_up, n_ranked)
    # few distinct values: exactly those (vectorized: the j-th new value of a feature goes to column j)
    new = torch.ones_like(ascending, dtype=torch.bool)
    new[:, 1:] = ascending[:, 1:] != ascending[:, :-1]
    new &= torch.arange(n, device=features.device)[None, :] >= first[:, None]
    n_distinct = new.sum(1)
    few = n_distinct <= count
    column = new.long().cumsum(1) - 1
    exact = torch.full((f, count + 1), float("inf"), dtype=features.dtype, device=features.device)
    exact.scatter_(1, torch.where(new, column, count).clamp(0, count), ascending)
    thresholds = torch.where(few[:, None], exact[:, :count], thresholds)
    return _finish_candidates(thresholds, ascending, order_up, n_ranked)


def _ranklib_thresholds(low: Tensor, high: Tensor, count: int, dtype: torch.dtype) -> Tensor:
    """RankLib's candidates from per-feature ``[F, 1]`` min and max: ``[F, count + 1]`` (see above)."""
    low, high = low.double(), high.double()
    step = (high - low).abs() / count
    columns = [high]
    for _ in range(count - 1):  # step by step, as RankLib accumulates (bitwise the same values)
        columns.append(columns[-1] - step)
    columns.append(low - 1.0e8)
    exact = torch.cat(columns, dim=1)
    rounded = exact.to(dtype)
    below = torch.nextafter(rounded, torch.full_like(rounded, float("-inf")))
    return torch.where(rounded.double() > exact, below, rounded)


def _finish_candidates(
    thresholds: Tensor, ascending: Tensor, order_up: Tensor, n_ranked: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    n = ascending.shape[1]
    thresholds = torch.where((n_ranked > 0)[:, None], thresholds, torch.full_like(thresholds, float("inf")))
    # duplicates (a quantile repeated) would only repeat a candidate
    sorted_thresholds = thresholds.sort(1).values
    repeated = torch.zeros_like(sorted_thresholds, dtype=torch.bool)
    repeated[:, 1:] = sorted_thresholds[:, 1:] == sorted_thresholds[:, :-1]
    thresholds = sorted_thresholds.masked_fill(repeated, float("inf"))
    # ranked documents strictly above each threshold: n - (# of keys <= threshold)
    positions = n - torch.searchsorted(ascending, thresholds.contiguous(), right=True)
    order = order_up.flip(1).to(torch.int32).contiguous()  # decreasing; unranked (-inf) last
    return thresholds, order, positions, n_ranked


def prepare(
    features: Tensor,
    labels: Tensor,
    query: Tensor,
    *,
    unranked: Tensor | None = None,
    thresholds: int = 10,
    threshold_kind: str = "quantile",
    pair_weight: str = "pairs",
) -> BoostData:
    """Lay out training documents for RankBoost.B.

    Args: features ``[N, F]`` float; labels ``[N]`` graded relevance; query ``[N]`` long query ids
    (any integers; documents of a query need not be contiguous); unranked ``[N, F]`` bool abstentions.
    """
    if pair_weight not in PAIR_WEIGHTS:
        raise ValueError(f"pair_weight must be one of {PAIR_WEIGHTS}, got {pair_weight!r}")
    device = features.device
    _, query = torch.unique(query, return_inverse=True)
    n_queries = int(query.max()) + 1 if len(query) else 0
    _, label_code = torch.unique(labels, return_inverse=True)
    n_labels = int(label_code.max()) + 1 if len(label_code) else 1
    # level = rank of the label among the query's distinct labels (dense per query: K stays small)
    groups, group_of = torch.unique(query * n_labels + label_code, return_inverse=True)
    group_query = groups // n_labels
    first_group = torch.searchsorted(group_query, group_query)  # the query's first group
    level = (torch.arange(len(groups), device=device) - first_group)[group_of]
    n_levels = int(level.max()) + 1 if len(level) else 1
    # crucial pairs per query: sum over levels of n_level * (documents below it)
    counts = torch.zeros(n_queries * n_levels, device=device, dtype=torch.float64)
    counts.index_add_(0, query * n_levels + level, torch.ones_like(labels, dtype=torch.float64))
    counts = counts.view(n_queries, n_levels)
    pairs = (counts * (counts.cumsum(1) - counts)).sum(1)  # [Q]
    n_pairs = int(pairs.sum())
    if n_pairs == 0:
        raise ValueError("RankBoost needs crucial pairs: no query has two documents with different labels")
    with_pairs = pairs > 0
    if pair_weight == "pairs":
        c = torch.where(with_pairs, 1.0 / pairs.sum().clamp_min(1.0), 0.0)
    else:
        c = torch.where(with_pairs, 1.0 / (pairs * with_pairs.sum().clamp_min(1)).clamp_min(1.0), 0.0)
    log_c = torch.log(c).to(features.dtype)[query]
    cand, order, positions, n_ranked = candidate_thresholds(features, unranked, count=thresholds, kind=threshold_kind)
    # a candidate that takes every ranked document (RankLib's ``min - 1e8``) needs no prefix sum: its
    # r is the sum of all potentials, so such candidates do not deepen the per-feature runs
    partial = torch.where(positions < n_ranked[:, None], positions, torch.zeros_like(positions))
    depth = partial.max(1).values  # [F]
    if unranked is not None:  # r with q_def = 1 needs the sum over every ranked document too
        depth = torch.maximum(depth, n_ranked)
    keep = torch.arange(order.shape[1], device=device)[None, :] < depth[:, None]
    selected = order[keep].long()  # row-major: feature after feature
    starts = depth.cumsum(0) - depth
    return BoostData(
        features=features,
        unranked=unranked,
        query=query,
        level=level,
        log_c=log_c,
        n_queries=n_queries,
        n_levels=n_levels,
        positions=positions,
        n_ranked=n_ranked,
        thresholds=cand,
        selected=selected,
        starts=starts,
        n_pairs=n_pairs,
    )


# ---------------------------------------------------------------------------------------------------
# one round, as pure functions of the current training scores H [N]
# ---------------------------------------------------------------------------------------------------
def _group_logsumexp(values: Tensor, group: Tensor, n_groups: int) -> Tensor:
    """``log sum exp`` of ``values [N]`` per group -> ``[n_groups]`` (``-inf`` where empty)."""
    peak = torch.full((n_groups,), NEG_INF, dtype=values.dtype, device=values.device)
    peak = peak.scatter_reduce(0, group, values, reduce="amax", include_self=True)
    shift = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    total = torch.zeros_like(peak).index_add_(0, group, torch.exp(values - shift[group]))
    return torch.log(total) + shift


def _levels_below(values: Tensor, data: BoostData) -> Tensor:
    """``log sum_{x' in q(x), level(x') < level(x)} exp(values(x'))`` for every document, ``[N]``."""
    per_level = _group_logsumexp(values, data.group, data.n_queries * data.n_levels).view(-1, data.n_levels)
    inclusive = torch.logcumsumexp(per_level, dim=1)
    exclusive = torch.cat([torch.full_like(inclusive[:, :1], NEG_INF), inclusive[:, :-1]], 1)
    return exclusive.reshape(-1)[data.group]


def _levels_above(values: Tensor, data: BoostData) -> Tensor:
    """``log sum_{x' in q(x), level(x') > level(x)} exp(values(x'))``, ``[N]``."""
    per_level = _group_logsumexp(values, data.group, data.n_queries * data.n_levels).view(-1, data.n_levels)
    inclusive = torch.logcumsumexp(per_level.flip(1), dim=1).flip(1)
    exclusive = torch.cat([inclusive[:, 1:], torch.full_like(inclusive[:, :1], NEG_INF)], 1)
    return exclusive.reshape(-1)[data.group]


def log_in_mass(scores: Tensor, data: BoostData, *, bottom: Tensor | None = None) -> Tensor:
    """``log sum_{x0} D_1(x0, x) exp(H(x0) - H(x))`` per document ``x`` (unnormalized in-mass), ``[N]``;
    with ``bottom [N]`` bool only pairs whose lower document is in it."""
    lower = scores if bottom is None else scores.masked_fill(~bottom, NEG_INF)
    return data.log_c - scores + _levels_below(lower, data)


def exp_loss(scores: Tensor, data: BoostData) -> Tensor:
    """``log sum_{pairs} D_1(x0, x1) exp(H(x0) - H(x1))`` (log of prod_t Z_t), a scalar."""
    return torch.logsumexp(log_in_mass(scores, data), 0)


def potentials(scores: Tensor, data: BoostData) -> tuple[Tensor, Tensor]:
    """``pi(x) = sum_x' D_t(x', x) - D_t(x, x')`` ``[N]`` and ``log M`` (``D_t = D_1 e^{H(x0) - H(x1)} / M``)."""
    log_in = log_in_mass(scores, data)
    log_out = data.log_c + scores + _levels_above(-scores, data)
    log_mass = torch.logsumexp(log_in, 0)
    return torch.exp(log_in - log_mass) - torch.exp(log_out - log_mass), log_mass


def ranking_loss(scores: Tensor, data: BoostData) -> Tensor:
    """``rloss_{D_1}(H) = sum D_1(x0, x1) [H(x1) <= H(x0)]`` over crucial pairs (ties count, as in
    Theorem 1), in O(N K + N log N) without pairs: documents sorted by query then decreasing score,
    per-level running counts, read at the end of each document's tie group. Returns a scalar."""
    n = len(scores)
    order = torch.argsort(scores, descending=True, stable=True)
    order = order[torch.argsort(data.query[order], stable=True)]
    query, value, level = data.query[order], scores[order], data.level[order]
    fresh = torch.ones(n, dtype=torch.bool, device=scores.device)
    fresh[1:] = (query[1:] != query[:-1]) | (value[1:] != value[:-1])
    tie_group = fresh.long().cumsum(0) - 1
    positions = torch.arange(n, device=scores.device)
    tie_end = torch.zeros(n, dtype=torch.long, device=scores.device).scatter_reduce(
        0, tie_group, positions, reduce="amax", include_self=False
    )[tie_group]
    counts = torch.nn.functional.one_hot(level, data.n_levels).cumsum(0)  # [N, K] running, all queries
    query_start = torch.searchsorted(query, query)  # first position of each document's query
    before_query = torch.where((query_start > 0)[:, None], counts[(query_start - 1).clamp_min(0)], 0)
    at_or_above = counts[tie_end] - before_query  # per level: documents of the query scored >= this one
    lower = torch.arange(data.n_levels, device=scores.device)[None, :] < level[:, None]
    wrong = (at_or_above * lower).sum(1).to(scores.dtype)
    return (wrong * torch.exp(data.log_c[order])).sum()


def candidate_r(pi: Tensor, data: BoostData) -> Tensor:
    """``r = sum_x h(x) pi(x)`` of every candidate: ``[F, J, 2]`` (last axis ``q_def = 0, 1``).

    One gather of ``pi`` along every feature's sorted documents, one cumulative sum, one gather at
    the thresholds.
    """
    # prefix[i]: sum of the first i + 1. The features' runs follow one another, so a feature's sums
    # carry the rounding of the runs before it: accumulated in float64 and rounded back to pi's dtype
    # at the end, two features that split the documents alike get the same r (RankLib sums each
    # feature from 0, and its ties go to the first feature), not r's that differ in the last bit.
    pi64 = pi.double()
    prefix = pi64.index_select(0, data.selected).cumsum(0)

    def before(index: Tensor) -> Tensor:  # sum of the first ``index`` entries
        return torch.where(index > 0, prefix[(index - 1).clamp_min(0)], 0.0)

    base = before(data.starts)[:, None]  # [F, 1]
    above = before((data.starts[:, None] + data.positions).clamp_max(len(prefix))) - base  # [F, J]
    total = pi64.sum()
    if data.unranked is None:
        above = torch.where(data.positions >= data.n_ranked[:, None], total, above)  # every document
        return above.to(pi.dtype)[..., None].expand(*above.shape, 2)
    ranked_total = before(data.starts + data.n_ranked)[:, None] - base  # [F, 1]
    unranked_total = total - ranked_total  # sum of pi over abstaining documents
    return torch.stack([above, above + unranked_total], -1).to(pi.dtype)


def right_mass(scores: Tensor, h: Tensor, data: BoostData, log_mass: Tensor) -> Tensor:
    """``W+ = sum D_t(x0, x1) [h(x0) = 0, h(x1) = 1]``, the D_t-mass a {0, 1} ranker orders right
    (``W- = W+ - r``, since ``r = sum D_t (h(x1) - h(x0)) = W+ - W-``)."""
    one = h > 0.5
    return torch.exp(log_in_mass(scores, data, bottom=~one) - log_mass).masked_fill(~one, 0.0).sum()


def choose_alpha(
    r: Tensor, right: Tensor | None = None, wrong: Tensor | None = None, *, kind: str = "exact", smoothing: float
) -> Tensor:
    """``alpha``: exact ``1/2 ln((W+ + s) / (W- + s))`` (minimizes Z of a {0, 1} ranker) or the paper's
    approximation ``1/2 ln((1 + r + s) / (1 - r + s))`` (minimizes its bound ``Z <= sqrt(1 - r^2)``)."""
    if kind == "exact":
        return 0.5 * torch.log((right + smoothing) / (wrong + smoothing))
    return 0.5 * torch.log((1 + r + smoothing) / (1 - r + smoothing))


class RankBoostLearner:
    """RankBoost.B on ``BoostData``: state is the training scores ``H [N]``; ``step`` adds rounds.

    ``q_def``: ``"best"`` (the learner picks 0 or 1 per candidate, as the paper's weak learner) or 0/1
    fixed; ``allow_negative``: select by ``|r|`` (a negative alpha reverses a ranker) or by ``r`` only
    (RankLib); ``alpha``: ``exact`` or ``approx``; ``smoothing`` keeps alpha finite when a ranker
    orders no pair wrong.
    """

    def __init__(
        self,
        data: BoostData,
        *,
        q_def: str | int = "best",
        allow_negative: bool = True,
        alpha: str = "exact",
        smoothing: float = 1e-6,
        scores: Tensor | None = None,
    ) -> None:
        if alpha not in ALPHAS:
            raise ValueError(f"alpha must be one of {ALPHAS}, got {alpha!r}")
        if q_def not in ("best", 0, 1):
            raise ValueError(f"q_def must be 'best', 0 or 1, got {q_def!r}")
        self.data, self.q_def, self.allow_negative = data, q_def, allow_negative
        self.alpha_kind, self.smoothing = alpha, smoothing
        self.scores = torch.zeros(len(data.query), dtype=data.features.dtype) if scores is None else scores.clone()
        self.scores = self.scores.to(data.features.device)

    def round(self) -> dict[str, Tensor]:
        """One boosting round; every value stays on the device (no host sync).

        Returns ``feature, threshold, q_def, alpha, r, z`` (``Z_t``) and ``log_loss`` (``log prod_{s<=t} Z_s``,
        the log of the exponential ranking loss after the round).
        """
        data = self.data
        pi, log_mass = potentials(self.scores, data)
        r = candidate_r(pi, data)  # [F, J, 2]
        fixed = 0 if data.unranked is None else (None if self.q_def == "best" else int(self.q_def))
        if fixed is not None:  # without abstentions q_def changes nothing: report 0
            r = r[..., fixed : fixed + 1]
        merit = r.abs() if self.allow_negative else r
        # ties (rankers equal on the training data): the first feature, the highest threshold, as RankLib
        best = merit.flip(1).reshape(-1).argmax()
        width = r.shape[1] * r.shape[2]
        feature, rest = best // width, best % width
        j, q = r.shape[1] - 1 - rest // r.shape[2], rest % r.shape[2]
        if fixed is not None:
            q = torch.full_like(q, fixed)
        threshold = data.thresholds[feature, j]
        q_def = q.to(data.features.dtype)
        h = data.outputs(feature, threshold, q_def)
        # the chosen ranker's r again, as one dot product (the prefix sums are only for choosing)
        r_exact = (h * pi).sum()
        right = right_mass(self.scores, h, data, log_mass)
        wrong = (right - r_exact).clamp_min(0.0)
        alpha = choose_alpha(r_exact, right, wrong, kind=self.alpha_kind, smoothing=self.smoothing)
        # Z_t = W0 + W+ e^-alpha + W- e^alpha exactly, whichever alpha was chosen
        z = (1.0 - right - wrong) + right * torch.exp(-alpha) + wrong * torch.exp(alpha)
        self.scores = self.scores + alpha * h
        return {
            "feature": feature,
            "threshold": threshold,
            "q_def": q_def,
            "alpha": alpha,
            "r": r_exact,
            "z": z,
            "log_loss": log_mass + torch.log(z),
        }


def fit_rankboost(
    features: Tensor,
    labels: Tensor,
    query: Tensor,
    *,
    rounds: int,
    unranked: Tensor | None = None,
    thresholds: int = 10,
    threshold_kind: str = "quantile",
    pair_weight: str = "pairs",
    **learner_options: Any,
) -> dict[str, Tensor]:
    """Fit ``rounds`` rounds; ``{"feature", "threshold", "q_def", "alpha", "r", "z", "log_loss"}`` each ``[T]``."""
    data = prepare(
        features,
        labels,
        query,
        unranked=unranked,
        thresholds=thresholds,
        threshold_kind=threshold_kind,
        pair_weight=pair_weight,
    )
    learner = RankBoostLearner(data, **learner_options)
    steps = [learner.round() for _ in range(rounds)]
    return {key: torch.stack([step[key] for step in steps]) for key in steps[0]} if steps else {}
