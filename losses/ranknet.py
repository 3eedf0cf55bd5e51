"""RankNet cross-entropy (Burges et al. 2005; eqs. 9-11 of Grangier & Bengio), on the pairwise scaffold."""

from __future__ import annotations

from torch import Tensor

from losses._common import Reduction
from losses.pairwise import logistic_pair, pairwise_loss


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
    ``p_ij``, the cost is ``-p_ij log o_ij - (1 - p_ij) log(1 - o_ij)`` (Grangier & Bengio eq. 10),
    computed with softplus so that it stays exact for any score gap. By default
    ``p_ij = 1/2 (1 + S_ij)`` from the labels, which is 1 for every pair with ``label_i > label_j``;
    pairs with equal labels are skipped. This is ``pairwise_loss(pair_fn=logistic_pair)`` with unit
    weights.

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

    Example:
        >>> import torch
        >>> ranknet_loss(torch.tensor([[0.0, 0.0, 2.0]]), torch.tensor([[1.0, 0.0, 0.0]]))  # (log 2 + softplus(2)) / 2
        tensor(1.4100)
    """
    return pairwise_loss(
        scores,
        labels,
        mask,
        pair_fn=logistic_pair,
        sigma=sigma,
        targets=targets,
        reduction=reduction,
        mean_over="pairs",
    )
