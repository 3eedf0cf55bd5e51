"""RankNet cross-entropy (Burges et al. 2005; eqs. 9-11 of Grangier & Bengio)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from losses._common import Reduction, as_float32, no_autocast, reduce, row_chunks


def _pair_block(
    scores: Tensor, labels: Tensor, mask: Tensor, targets: Tensor | None, start: int, stop: int, sigma: float
) -> tuple[Tensor, Tensor, Tensor]:
    """Loss, d loss / d(sigma * (s_i - s_j)) and 0/1 pair weights for rows ``start:stop``, ``[B, r, L]``."""
    x = scores[:, start:stop, None] - scores[:, None, :]
    if sigma != 1.0:
        x.mul_(sigma)
    if targets is None:
        # Hard targets: every pair with label_i > label_j has target probability 1. Padded
        # documents carry -inf as the better side and +inf as the worse side, so one comparison
        # gives the valid pairs (cheaper than combining three boolean masks).
        better = labels.masked_fill(~mask, float("-inf"))
        worse = labels.masked_fill(~mask, float("inf"))
        weight = (better[:, start:stop, None] > worse[:, None, :]).to(scores.dtype)
        x.neg_()
        return F.softplus(x).mul_(weight), torch.sigmoid(x).mul_(weight).neg_(), weight
    rows = torch.arange(start, stop, device=scores.device)[:, None]
    cols = torch.arange(scores.shape[1], device=scores.device)[None, :]
    weight = (mask[:, start:stop, None] & mask[:, None, :] & (cols > rows)).to(scores.dtype)  # i < j once
    p = targets[:, start:stop, :].to(scores.dtype)
    loss = p * F.softplus(-x) + (1.0 - p) * F.softplus(x)
    return loss.mul_(weight), (torch.sigmoid(x) - p).mul_(weight), weight


class _RankNetSums(torch.autograd.Function):
    """Per-query sums of pair losses ``[B]`` and pair counts; gradient computed in the forward."""

    @staticmethod
    def forward(ctx, scores, labels, mask, targets, sigma):
        batch, length = scores.shape
        loss = scores.new_zeros(batch)
        count = scores.new_zeros(batch)
        grad = torch.zeros_like(scores) if ctx.needs_input_grad[0] else None
        for start, stop in row_chunks(batch, length, length):
            block_loss, dx, valid = _pair_block(scores, labels, mask, targets, start, stop, sigma)
            loss += block_loss.sum((1, 2))
            count += valid.sum((1, 2))
            if grad is not None:
                grad[:, start:stop] += sigma * dx.sum(2)
                grad -= sigma * dx.sum(1)
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(count)
        return loss, count

    @staticmethod
    def backward(ctx, grad_loss, _grad_count):
        (grad,) = ctx.saved_tensors
        return grad * grad_loss[:, None], None, None, None, None


def ranknet_loss(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor | None = None,
    *,
    sigma: float = 1.0,
    targets: Tensor | None = None,
    reduction: Reduction = "mean",
) -> Tensor:
    """RankNet cross-entropy over document pairs.

    For a pair (i, j) with ``o_ij = sigmoid(sigma * (s_i - s_j))`` and target probability
    ``p_ij``, the cost is ``-p_ij log o_ij - (1 - p_ij) log(1 - o_ij)``, computed with softplus so
    that it stays exact for any score gap. By default ``p_ij = 1/2 (1 + S_ij)`` from the labels,
    which is 1 for every pair with ``label_i > label_j``; pairs with equal labels are skipped.

    Args:
        scores: ``[B, L]`` model scores.
        labels: ``[B, L]`` graded relevance.
        mask: ``[B, L]`` bool, True for real documents.
        sigma: slope of the logistic.
        targets: optional soft target probabilities ``p_ij`` ``[B, L, L]``; every real pair
            ``i < j`` then counts once.
        reduction: ``"mean"`` over all counted pairs of the batch, ``"sum"``, or ``"none"`` for
            per-query sums ``[B]``.

    Returns:
        A scalar, or ``[B]`` for ``reduction="none"``. Lists with no counted pair give 0 and zero
        gradient. Memory is bounded by chunking rows of the pair matrix.
    """
    scores, labels, mask = as_float32(scores, labels, mask)
    if targets is not None and targets.shape != (*scores.shape, scores.shape[1]):
        raise ValueError(f"targets must be [B, L, L], got {tuple(targets.shape)}")
    with no_autocast(scores.device):
        per_query, count = _RankNetSums.apply(scores, labels, mask, targets, float(sigma))
    return reduce(per_query, reduction, count.sum())
