"""ApproxNDCG (Qin, Liu & Li, "A General Approximation Framework for Direct Optimization of Information
Retrieval Measures", Information Retrieval 13(4), 2010)."""

from __future__ import annotations

import torch
from torch import Tensor

from losses._common import Reduction, as_float32, informative, no_autocast, reduce, row_chunks
from metrics.ranking import Gain, gains, ideal_dcg


def _approx_rank_block(scores: Tensor, mask: Tensor, start: int, stop: int, alpha: float) -> Tensor:
    """``sigmoid(alpha (s_j - s_i))`` for rows ``i`` in ``start:stop`` and real ``j != i``, ``[B, r, L]``."""
    length = scores.shape[1]
    rows = torch.arange(start, stop, device=scores.device)[:, None]
    others = (
        (rows != torch.arange(length, device=scores.device)[None, :]) & mask[:, None, :] & mask[:, start:stop, None]
    )
    return torch.sigmoid(alpha * (scores[:, None, :] - scores[:, start:stop, None])) * others


class _ApproxRanks(torch.autograd.Function):
    """Smooth ranks ``[B, L]`` in ``O(B * L)`` memory: the ``[B, r, L]`` blocks are recomputed in backward."""

    @staticmethod
    def forward(ctx, scores, mask, alpha):
        ranks = torch.ones_like(scores)
        for start, stop in row_chunks(*scores.shape, scores.shape[1]):
            ranks[:, start:stop] += _approx_rank_block(scores, mask, start, stop, alpha).sum(-1)
        ctx.save_for_backward(scores, mask)
        ctx.alpha = alpha
        return ranks

    @staticmethod
    def backward(ctx, grad_ranks):
        scores, mask = ctx.saved_tensors
        alpha = ctx.alpha
        grad = torch.zeros_like(scores)
        # d rank_i / d s_j = alpha sigma'_ij (j != i) and -alpha sum_j sigma'_ij (j = i), sigma' symmetric:
        # d L / d s_m = alpha sum_j sigma'_mj (g_j - g_m).
        for start, stop in row_chunks(*scores.shape, scores.shape[1]):
            p = _approx_rank_block(scores, mask, start, stop, alpha)
            slope = p * (1.0 - p)
            grad[:, start:stop] = alpha * (slope * (grad_ranks[:, None, :] - grad_ranks[:, start:stop, None])).sum(-1)
        return grad * mask, None, None


def approx_ranks(scores: Tensor, mask: Tensor, *, alpha: float = 1.0) -> Tensor:
    """Qin et al.'s approximate rank position ``pi_hat(i) = 1 + sum_{j != i} sigmoid(alpha (s_j - s_i))``, ``[B, L]``.

    The sum runs over the real documents j of the list.

    Args: scores, mask ``[B, L]`` (padding neutralized). Memory ``O(B * L)`` (chunked, custom backward).
    """
    return _ApproxRanks.apply(scores, mask, float(alpha))


def approx_ndcg_loss(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor | None = None,
    *,
    alpha: float = 1.0,
    gain: Gain = "exp2",
    reduction: Reduction = "mean",
) -> Tensor:
    """``1 - ApproxNDCG``: NDCG with the rank of each document replaced by a smooth rank.

    Qin et al., eqs. 19-21 (numbered as in allRank's implementation):
    ``pi_hat(i) = 1 + sum_{j != i} sigmoid(-alpha (s_i - s_j))`` and

        ``ApproxNDCG = 1/IDCG sum_i gain(y_i) / log2(1 + pi_hat(i))``.

    Same as allRank's ``approxNDCGLoss`` (which returns ``-ApproxNDCG`` averaged over the batch),
    without its epsilon. A list whose real labels are all equal gives 0 with zero gradient.
    Memory ``O(B * L)``: the ``[B, L, L]`` sigmoid is built in row chunks and recomputed in backward.

    Args:
        scores, labels: ``[B, L]``; mask: ``[B, L]`` bool, True for real documents.
        alpha: sharpness of the sigmoid (larger is closer to the true ranks).
        gain: ``"exp2"`` or ``"linear"``.
        reduction: ``"mean"`` over the B queries, ``"sum"``, or ``"none"`` (``[B]``).

    Returns:
        A scalar, or ``[B]``.

    Example:
        >>> import torch
        >>> round(approx_ndcg_loss(torch.tensor([[10.0, -10.0]]), torch.tensor([[1.0, 0.0]])).item(), 4)
        0.0
    """
    scores, labels, mask = as_float32(scores, labels, mask)
    with no_autocast(scores.device):
        keep = informative(labels, mask)
        ideal = ideal_dcg(labels, mask, gain=gain).to(scores.dtype)
        keep = keep & (ideal > 0)
        ranks = approx_ranks(scores, mask, alpha=alpha)
        weight = gains(labels, gain) * mask / torch.where(keep, ideal, torch.ones_like(ideal))[:, None]
        approx = (weight / torch.log2(1.0 + ranks)).sum(-1)
        per_query = torch.where(keep, 1.0 - approx, torch.zeros_like(approx))
    return reduce(per_query, reduction, scores.shape[0])
