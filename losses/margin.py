"""The piecewise margin lambda-function of Burges' NIPS'05 LambdaRank paper (eqs. 4-9), on the pairwise scaffold."""

from __future__ import annotations

from torch import Tensor

from losses._common import Reduction
from losses.pairwise import (
    margin_lambda_function,
    margin_pair,
    margin_pair_cost,
    pairwise_gradient,
    pairwise_loss,
    unit_weight,
)

__all__ = ["margin_cost", "margin_lambda_function", "margin_lambdas", "margin_pair_cost"]


def margin_lambdas(
    scores: Tensor, labels: Tensor, mask: Tensor | None = None, *, delta: float = 1.0, k: int | None = None
) -> Tensor:
    """Margin lambdas summed over pairs: ``lambda_i = sum_{l_i > l_j} lam(x_ij) - sum_{l_j > l_i} lam(x_ji)``.

    ``lam`` is eqs. 4-6 with ``x_ij = s_i - s_j``. Differentiable, so its Jacobian (eq. 11) can be
    taken with autograd; it is symmetric because each pair term depends on ``s_i - s_j`` only.
    The pair matrix is visited in row chunks, but the autograd graph keeps every chunk: memory is
    ``O(B * L * L)``, or ``O(B * k * L)`` with ``k``.

    Args: scores, labels, mask ``[B, L]``; ``delta`` the margin; ``k``: only pairs with a document
    in the top ``k`` of the ranking by score (ties by list position) count, as in LambdaRank@k
    (None: every pair). Returns ``[B, L]``.

    Example:
        >>> import torch
        >>> margin_lambdas(torch.tensor([[0.25, 0.0]]), torch.tensor([[1.0, 0.0]]), delta=1.0)
        tensor([[ 0.7500, -0.7500]])
    """
    weighting = {"lambdaweight_fn": unit_weight, "k": k} if k is not None else {}
    return -pairwise_gradient(scores, labels, mask, pair_fn=margin_pair(delta), differentiable=True, **weighting)


def margin_cost(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor | None = None,
    *,
    delta: float = 1.0,
    k: int | None = None,
    reduction: Reduction = "sum",
) -> Tensor:
    """Cost of eqs. 7-9 summed over pairs with ``label_i > label_j``; ``-grad = margin_lambdas``.

    As in the paper, a pair ordered correctly by more than ``delta`` costs ``-delta^2/2`` (the
    minimum), not 0. Pairs are chunked like every pairwise loss (``pairwise_loss``): memory
    ``O(B * rows * L)`` per chunk, and with ``k`` only the top ``k`` rows of the ranking are
    visited, ``O(B * k * L)`` in all.

    Args: scores, labels, mask ``[B, L]``; ``delta``; ``k``: only pairs with a document in the top
    ``k`` of the ranking by score count (None: every pair); ``reduction`` ``"sum"``, ``"mean"``
    (over queries) or ``"none"`` (``[B]``). Returns a scalar or ``[B]``.
    """
    weighting = {"lambdaweight_fn": unit_weight, "k": k} if k is not None else {}
    return pairwise_loss(scores, labels, mask, pair_fn=margin_pair(delta), reduction=reduction, **weighting)
