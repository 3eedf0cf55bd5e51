"""LambdaRank (Burges, Ragno & Le 2006; Burges, NIPS'05 workshop): lambda-gradients from |Delta NDCG|.

The pairwise scaffold with the logistic pair function and the ``delta_ndcg_weight`` lambda weight.
"""

from __future__ import annotations

from torch import Tensor

from losses._common import Reduction
from losses.pairwise import delta_ndcg_weight, logistic_pair, pairwise_gradient, pairwise_loss
from metrics.ranking import Gain


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
    return -pairwise_gradient(
        scores, labels, mask, pair_fn=logistic_pair, lambdaweight_fn=delta_ndcg_weight, sigma=sigma, k=k, gain=gain
    )


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
    return pairwise_loss(
        scores,
        labels,
        mask,
        pair_fn=logistic_pair,
        lambdaweight_fn=delta_ndcg_weight,
        sigma=sigma,
        k=k,
        gain=gain,
        reduction=reduction,
    )
