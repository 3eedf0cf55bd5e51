"""LambdaLoss (Wang, Li, Golbandi, Bendersky & Najork, "The LambdaLoss Framework for Ranking Metric
Optimization", CIKM 2018), on the pairwise scaffold."""

from __future__ import annotations

from typing import Literal

from torch import Tensor

from losses._common import Reduction
from losses.pairwise import (
    binary_logistic_pair,
    delta_ndcg_weight,
    ndcg_loss2_weight,
    ndcg_loss2pp_weight,
    pairwise_loss,
)
from metrics.ranking import Gain

Scheme = Literal["ndcg_loss2", "ndcg_loss2pp", "lambdarank"]


def lambdaloss(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor | None = None,
    *,
    scheme: Scheme = "ndcg_loss2pp",
    mu: float = 10.0,
    sigma: float = 1.0,
    k: int | None = None,
    gain: Gain = "exp2",
    reduction: Reduction = "mean",
) -> Tensor:
    """LambdaLoss: ``l = -sum_{y_i > y_j} log2 sigmoid(sigma (s_i - s_j))^{w_ij}`` with a weighting scheme.

    Wang et al. define the loss as ``-sum log2 sum_pi (1 / (1 + exp(-sigma (s_i - s_j))))^{w_ij} H(pi|s)``
    with the hard assignment ``H(pi|s)`` of the ranking by score, so that ``i``, ``j`` below are the
    ranks by the current scores (ties by list position) and ``G = gain / IDCG``:

    * ``"ndcg_loss2"`` (NDCG-Loss2): ``w_ij = delta_ij |G_i - G_j|``,
      ``delta_ij = |1/D_{|i-j|} - 1/D_{|i-j|+1}|``, ``D_n = log2(1 + n)``;
    * ``"ndcg_loss2pp"`` (NDCG-Loss2++): ``w_ij = (rho_ij + mu delta_ij) |G_i - G_j|``,
      ``rho_ij = |1/D_i - 1/D_j|`` (the LambdaRank weight);
    * ``"lambdarank"``: ``w_ij = rho_ij |G_i - G_j|`` (LambdaRank in the framework, base-2 log).

    These equal allRank's ``lambdaLoss`` with ``ndcgLoss2_scheme``, ``ndcgLoss2PP_scheme`` and
    ``lambdaRank_scheme`` (binary log) at ``k=None``. With ``k``, the ideal DCG is at ``k``, ``rho``
    vanishes below rank ``k``, and only pairs with a document in the top ``k`` are visited
    (``O(B * k * L)`` memory); allRank keeps only pairs with both documents in the top ``k``.

    Args:
        scores, labels: ``[B, L]``; mask: ``[B, L]`` bool, True for real documents.
        scheme: the weighting scheme.
        mu: NDCG-Loss2++'s weight of ``delta_ij``.
        sigma: slope of the logistic.
        k: NDCG cut-off.
        gain: ``"exp2"`` or ``"linear"``.
        reduction: ``"mean"`` over the B queries, ``"sum"``, or ``"none"`` (``[B]``).

    Returns:
        A scalar, or ``[B]``. Lists with no pair of different labels give 0 and zero gradient.

    Example:
        >>> import torch
        >>> lambdaloss(torch.tensor([[0.0, 0.0]]), torch.tensor([[1.0, 0.0]]), scheme="lambdarank")  # 1 - 1/log2(3)
        tensor(0.3691)
    """
    weights = {
        "ndcg_loss2": ndcg_loss2_weight,
        "ndcg_loss2pp": ndcg_loss2pp_weight(mu),
        "lambdarank": delta_ndcg_weight,
    }
    if scheme not in weights:
        raise ValueError(f"scheme must be one of {sorted(weights)}, got {scheme!r}")
    return pairwise_loss(
        scores,
        labels,
        mask,
        pair_fn=binary_logistic_pair,
        lambdaweight_fn=weights[scheme],
        sigma=sigma,
        k=k,
        gain=gain,
        reduction=reduction,
    )
