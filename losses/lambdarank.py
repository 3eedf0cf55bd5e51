"""LambdaRank (Burges, Ragno & Le 2006; Burges, NIPS'05 workshop): lambda-gradients from |Delta NDCG|."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from losses._common import Reduction, as_float32, no_autocast, reduce, row_chunks
from metrics.functional import Gain, discounts, gains, ideal_dcg, sort_by_scores


def _sorted_view(scores: Tensor, labels: Tensor, mask: Tensor) -> tuple[Tensor, ...]:
    """Permutation by current score and scores, labels, mask in that order, all ``[B, L]``."""
    order = sort_by_scores(scores, mask)
    return order, scores.gather(1, order), labels.gather(1, order), mask.gather(1, order)


def _lambda_sums(
    scores: Tensor, labels: Tensor, mask: Tensor, *, sigma: float, k: int | None, gain: Gain
) -> tuple[Tensor, Tensor]:
    """Lambdas ``[B, L]`` (list order) and the |Delta NDCG|-weighted RankNet cost per query ``[B]``.

    Works in ranked order. Only pairs with at least one document in the top ``k`` have a non-zero
    |Delta NDCG@k|, so the rows are the top ``k`` ranks and the columns every rank after the row:
    each such pair is visited once, and memory is ``O(B * k * L)`` (chunked further if large).
    """
    batch, length = scores.shape
    order, s, y, m = _sorted_view(scores, labels, mask)
    top = length if k is None else min(k, length)
    discount = discounts(length, scores.device)
    if k is not None:
        discount = discount * (torch.arange(length, device=scores.device) < k)
    gain_sorted = gains(y, gain) * m
    inverse_ideal = 1.0 / ideal_dcg(labels, mask, k=k, gain=gain)
    inverse_ideal = torch.where(torch.isfinite(inverse_ideal), inverse_ideal, torch.zeros_like(inverse_ideal))

    lambdas_sorted = torch.zeros_like(s)
    cost = s.new_zeros(batch)
    cols = torch.arange(length, device=scores.device)
    for start, stop in row_chunks(batch, top, length):
        rows = slice(start, stop)
        later = cols[None, :] > torch.arange(start, stop, device=scores.device)[:, None]
        valid = later & m[:, rows, None] & m[:, None, :] & (y[:, rows, None] != y[:, None, :])
        sign = torch.sign(y[:, rows, None] - y[:, None, :])
        delta = (gain_sorted[:, rows, None] - gain_sorted[:, None, :]).abs()
        delta = delta * (discount[rows, None] - discount[None, :]).abs() * inverse_ideal[:, None, None] * valid
        # margin > 0 when the more relevant document of the pair is scored higher.
        margin = sign * sigma * (s[:, rows, None] - s[:, None, :])
        push = sign * sigma * delta * torch.sigmoid(-margin)
        lambdas_sorted[:, rows] += push.sum(2)
        lambdas_sorted -= push.sum(1)
        cost += (delta * F.softplus(-margin)).sum((1, 2))
    lambdas = torch.zeros_like(lambdas_sorted).scatter_(1, order, lambdas_sorted)
    return lambdas, cost


def lambdas(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor | None = None,
    *,
    sigma: float = 1.0,
    k: int | None = None,
    gain: Gain = "exp2",
) -> Tensor:
    """LambdaRank's lambda_i, positive when document i should move up (lambda = -dC/ds).

    For a pair with ``label_i > label_j``:
    ``w_ij = sigma * |Delta NDCG_ij| / (1 + exp(sigma * (s_i - s_j)))``, where ``|Delta NDCG_ij|``
    is the change of NDCG@k (``gain``, log2 discount, divided by the ideal DCG@k of the list) from
    swapping i and j in the current ranking by score (ties by list position). Then
    ``lambda_i = sum_j w_ij - sum_j w_ji``. No autograd graph is built.

    Args:
        scores, labels: ``[B, L]``.
        mask: ``[B, L]`` bool, True for real documents.
        sigma: slope of the logistic.
        k: NDCG cut-off; only pairs with a document in the top k contribute. Memory O(B * k * L).
        gain: ``"exp2"`` (2^rel - 1) or ``"linear"``.

    Returns:
        ``[B, L]`` float32; 0 for padded documents and for lists with no pair of different labels.
    """
    scores, labels, mask = as_float32(scores, labels, mask)
    with torch.no_grad(), no_autocast(scores.device):
        return _lambda_sums(scores.detach(), labels, mask, sigma=sigma, k=k, gain=gain)[0]


class _LambdaRankSums(torch.autograd.Function):
    """Per-query lambda-weighted cost ``[B]`` whose gradient w.r.t. scores is ``-lambdas``."""

    @staticmethod
    def forward(ctx, scores, labels, mask, sigma, k, gain):
        lambda_values, cost = _lambda_sums(scores, labels, mask, sigma=sigma, k=k, gain=gain)
        ctx.save_for_backward(lambda_values)
        return cost

    @staticmethod
    def backward(ctx, grad_cost):
        (lambda_values,) = ctx.saved_tensors
        return -lambda_values * grad_cost[:, None], None, None, None, None, None


def lambdarank_loss(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor | None = None,
    *,
    sigma: float = 1.0,
    k: int | None = None,
    gain: Gain = "exp2",
    reduction: Reduction = "mean",
) -> Tensor:
    """LambdaRank surrogate: ``sum_{pairs} |Delta NDCG_ij| * log(1 + exp(-sigma (s_i - s_j)))``.

    ``|Delta NDCG_ij|`` is held constant (it depends on the ranking only), so the autograd gradient
    of the ``reduction="sum"`` value w.r.t. ``scores`` is exactly ``-lambdas(...)``. Lambdas and cost
    are computed together in one pass without an autograd graph over pairs.

    Args: as ``lambdas``; ``reduction`` is ``"mean"`` over the B queries (each query's weights
    are already normalized by its ideal DCG), ``"sum"``, or ``"none"`` for ``[B]``.

    Returns: a scalar, or ``[B]`` with ``reduction="none"``.
    """
    scores, labels, mask = as_float32(scores, labels, mask)
    with no_autocast(scores.device):
        per_query = _LambdaRankSums.apply(scores, labels, mask, float(sigma), k, gain)
    return reduce(per_query, reduction, scores.shape[0])
