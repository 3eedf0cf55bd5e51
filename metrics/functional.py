"""Ranking metrics on padded batches of queries.

Every metric takes ``scores [B, L]``, ``labels [B, L]`` (graded relevance, 0 = not relevant) and an
optional ``mask [B, L]`` bool (True = a real document) and returns one float32 value per query,
``[B]``. There is no Python loop over queries or documents.

Conventions, the same for every metric here:

* A document is *relevant* when its label is ``> 0``.
* Documents are ranked by descending score. **Ties are broken by list position**: of two documents
  with the same score, the one earlier in the list ranks higher (a stable sort). Padded documents
  always rank after real ones and never count.
* ``k=None`` means the whole list. A cut-off larger than the list behaves like the whole list,
  except for ``precision``, which divides by ``k`` as trec_eval's ``P_k`` does.
* ``empty`` is the value of a query for which the metric is undefined: no relevant document (NDCG,
  AP, RR, R-precision, WTA) or no pair with different labels (pairwise and k-partite errors).
  It defaults to 0.0 as in trec_eval; LightGBM and XGBoost use 1.0 for NDCG.
* ``gain="exp2"`` is ``2**rel - 1`` (Burges et al.); ``gain="linear"`` is ``rel`` (trec_eval's
  ``ndcg_cut``, sklearn's ``ndcg_score``). The discount is ``1 / log2(1 + rank)``, rank from 1.
"""

from __future__ import annotations

import torch
from torch import Tensor

from metrics.ranking import Gain, discounts, gains, ideal_dcg, prepare, ranks_of, sort_by_scores

__all__ = [
    "average_precision",
    "dcg",
    "discounts",
    "gains",
    "ideal_dcg",
    "kpartite_error",
    "ndcg",
    "pairwise_error",
    "precision",
    "r_precision",
    "rank_loss",
    "ranks_of",
    "reciprocal_rank",
    "sort_by_scores",
    "winner_takes_all",
]


def _prepare(scores: Tensor, labels: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """float32 ``[B, L]`` with a full mask; padded scores and labels become 0 (NaN/inf there never count)."""
    return prepare(scores, labels, mask)


def _ranked(scores: Tensor, labels: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Labels and mask in ranked order, both ``[B, L]``."""
    order = sort_by_scores(scores, mask)
    return labels.gather(-1, order), mask.gather(-1, order)


def _cutoff(mask_ranked: Tensor, k: int | None) -> Tensor:
    """Mask ``[B, L]`` of ranked positions that are real and within the top ``k``."""
    if k is None:
        return mask_ranked
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    positions = torch.arange(mask_ranked.shape[-1], device=mask_ranked.device)
    return mask_ranked & (positions < k)


def _dcg_ranked(labels_ranked: Tensor, valid: Tensor, gain: Gain) -> Tensor:
    weights = discounts(labels_ranked.shape[-1], labels_ranked.device)
    return (gains(labels_ranked, gain) * weights * valid).sum(-1)


def _with_empty(values: Tensor, defined: Tensor, empty: float) -> Tensor:
    return torch.where(defined, values, torch.full_like(values, empty))


def _row_max(values: Tensor) -> Tensor:
    """Max over the last dim of non-negative values, 0 for zero-length lists."""
    return values.amax(-1) if values.shape[-1] else values.sum(-1)


def _safe_div(num: Tensor, den: Tensor) -> Tensor:
    return num / den.clamp_min(torch.finfo(num.dtype).tiny)


def dcg(
    scores: Tensor, labels: Tensor, mask: Tensor | None = None, *, k: int | None = None, gain: Gain = "exp2"
) -> Tensor:
    """Discounted cumulative gain at ``k``: ``sum_{rank<=k} gain(rel) / log2(1 + rank)``.

    Args: scores, labels ``[B, L]``; mask ``[B, L]`` bool. Returns ``[B]``.
    """
    scores, labels, mask = _prepare(scores, labels, mask)
    labels_ranked, mask_ranked = _ranked(scores, labels, mask)
    return _dcg_ranked(labels_ranked, _cutoff(mask_ranked, k), gain)


def ndcg(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor | None = None,
    *,
    k: int | None = None,
    gain: Gain = "exp2",
    empty: float = 0.0,
) -> Tensor:
    """Normalized DCG at ``k``: DCG@k divided by the ideal DCG@k of the same list.

    Args: scores, labels ``[B, L]``; mask ``[B, L]`` bool. Returns ``[B]``; ``empty`` where the
    list has no relevant document.
    """
    scores, labels, mask = _prepare(scores, labels, mask)
    labels_ranked, mask_ranked = _ranked(scores, labels, mask)
    actual = _dcg_ranked(labels_ranked, _cutoff(mask_ranked, k), gain)
    best = ideal_dcg(labels, mask, k=k, gain=gain)
    return _with_empty(_safe_div(actual, best), best > 0, empty)


def _hits(scores: Tensor, labels: Tensor, mask: Tensor | None, k: int | None) -> tuple[Tensor, Tensor, Tensor]:
    """Relevance indicator in ranked order within the cut-off ``[B, L]``, its cumulative sum
    ``[B, L]``, and the number of relevant documents per list ``[B]``."""
    scores, labels, mask = _prepare(scores, labels, mask)
    labels_ranked, mask_ranked = _ranked(scores, labels, mask)
    hits = ((labels_ranked > 0) & _cutoff(mask_ranked, k)).float()
    n_relevant = ((labels > 0) & mask).sum(-1).float()
    return hits, hits.cumsum(-1), n_relevant


def average_precision(
    scores: Tensor, labels: Tensor, mask: Tensor | None = None, *, k: int | None = None, empty: float = 0.0
) -> Tensor:
    """Average precision at ``k``: ``sum_{rank<=k, relevant} P@rank / n_relevant``.

    The denominator is the number of relevant documents in the whole list, as trec_eval's ``map``
    and ``map_cut_k``. Args: ``[B, L]`` tensors. Returns ``[B]``.
    """
    hits, cumulative, n_relevant = _hits(scores, labels, mask, k)
    ranks = torch.arange(1, hits.shape[-1] + 1, device=hits.device, dtype=torch.float32)
    precision_at_hits = (cumulative / ranks * hits).sum(-1)
    return _with_empty(_safe_div(precision_at_hits, n_relevant), n_relevant > 0, empty)


def reciprocal_rank(
    scores: Tensor, labels: Tensor, mask: Tensor | None = None, *, k: int | None = None, empty: float = 0.0
) -> Tensor:
    """Reciprocal rank of the first relevant document within the top ``k`` (0 if none there).

    Args: ``[B, L]`` tensors. Returns ``[B]``; ``empty`` where the list has no relevant document.
    """
    hits, _, n_relevant = _hits(scores, labels, mask, k)
    ranks = torch.arange(1, hits.shape[-1] + 1, device=hits.device, dtype=torch.float32)
    return _with_empty(_row_max(hits / ranks), n_relevant > 0, empty)


def precision(scores: Tensor, labels: Tensor, mask: Tensor | None = None, *, k: int, empty: float = 0.0) -> Tensor:
    """Precision at ``k``: relevant documents in the top ``k`` divided by ``k`` (trec_eval ``P_k``).

    Args: ``[B, L]`` tensors. Returns ``[B]``; ``empty`` where the list has no relevant document.
    """
    hits, _, n_relevant = _hits(scores, labels, mask, k)
    return _with_empty(hits.sum(-1) / k, n_relevant > 0, empty)


def r_precision(scores: Tensor, labels: Tensor, mask: Tensor | None = None, *, empty: float = 0.0) -> Tensor:
    """R-precision, the break-even point: precision at R, R = the number of relevant documents.

    Args: ``[B, L]`` tensors. Returns ``[B]``; ``empty`` where the list has no relevant document.
    """
    _, cumulative, n_relevant = _hits(scores, labels, mask, None)
    at_r = (n_relevant.long() - 1).clamp_min(0).unsqueeze(-1)
    found = cumulative.gather(-1, at_r).squeeze(-1) if cumulative.shape[-1] else n_relevant * 0
    return _with_empty(_safe_div(found, n_relevant), n_relevant > 0, empty)


def winner_takes_all(scores: Tensor, labels: Tensor, mask: Tensor | None = None, *, empty: float = 0.0) -> Tensor:
    """Winner-takes-all cost (Burges 2005): 0 if the top-ranked document is relevant, else 1.

    Args: ``[B, L]`` tensors. Returns ``[B]``; ``empty`` where the list has no relevant document.
    """
    hits, _, n_relevant = _hits(scores, labels, mask, 1)
    return _with_empty(1.0 - hits.sum(-1), n_relevant > 0, empty)


def _pairs(labels: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``better [B, L, L]``: pair (i, j) has ``label_i > label_j``, both real; and label gaps."""
    pair_mask = mask[:, :, None] & mask[:, None, :]
    gap = labels[:, :, None] - labels[:, None, :]
    return (gap > 0) & pair_mask, gap


def pairwise_error(scores: Tensor, labels: Tensor, mask: Tensor | None = None, *, empty: float = 0.0) -> Tensor:
    """Fraction of pairs with different labels that the ranking puts in the wrong order.

    The ranking is the one every metric here uses (ties broken by list position), so a tie counts
    as misordered when the less relevant document comes first in the list. For the paper's
    half-credit on ties use ``kpartite_error(..., alpha=0)``.

    Args: ``[B, L]`` tensors. Returns ``[B]``; ``empty`` where no pair has different labels.
    """
    scores, labels, mask = _prepare(scores, labels, mask)
    position = ranks_of(scores, mask)
    better, _ = _pairs(labels, mask)
    misordered = better & (position[:, :, None] > position[:, None, :])
    n_pairs = better.sum((-1, -2)).float()
    return _with_empty(_safe_div(misordered.sum((-1, -2)).float(), n_pairs), n_pairs > 0, empty)


def kpartite_error(
    scores: Tensor, labels: Tensor, mask: Tensor | None = None, *, alpha: float = 0.0, empty: float = 0.0
) -> Tensor:
    """Empirical k-partite ranking error (Rajaram & Agarwal, Definition 1).

    ``R_alpha = 1/C * sum_{l < m} sum_{y_i = l, y_j = m} (m - l)**alpha * lam(f, x_j, x_i)`` with
    ``lam = 1[f(x_j) < f(x_i)] + 1/2 1[f(x_j) = f(x_i)]`` and ``C = sum_{l<m} n_l n_m``, the number
    of pairs with different labels (not weighted by ``alpha``). Ties in score cost one half.

    Args: ``[B, L]`` tensors, labels are the ratings. Returns ``[B]``; ``empty`` where no pair has
    different labels.
    """
    scores, labels, mask = _prepare(scores, labels, mask)
    better, gap = _pairs(labels, mask)
    score_gap = scores[:, :, None] - scores[:, None, :]
    wrong = (score_gap < 0).float() + 0.5 * (score_gap == 0).float()
    weight = gap.clamp_min(0.0) ** alpha
    n_pairs = better.sum((-1, -2)).float()
    total = (weight * wrong * better).sum((-1, -2))
    return _with_empty(_safe_div(total, n_pairs), n_pairs > 0, empty)


def rank_loss(
    pred: Tensor, labels: Tensor, mask: Tensor | None = None, *, dtype: torch.dtype = torch.float32
) -> Tensor:
    """Mean absolute rank error ``mean |pred - label|`` per list (Crammer & Singer; Harrington).

    Args: pred (predicted ordinal ranks, or a real-valued mean rank such as a voting ensemble's),
    labels, mask ``[B, L]``; dtype: the compute dtype (float64 for a mean over long lists of
    unrounded ranks). Returns ``[B]`` in ``dtype``; 0 for an empty list.
    """
    pred, labels, mask = prepare(pred, labels, mask, dtype=dtype)
    count = mask.sum(-1).to(dtype)  # in dtype: float64's tiny would round to 0 in a float32 count
    error = ((pred - labels).abs() * mask).sum(-1)
    return _safe_div(error, count)
