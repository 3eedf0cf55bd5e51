"""The piecewise margin lambda-function of Burges' NIPS'05 LambdaRank paper (eqs. 4-9), on the pairwise scaffold."""

from __future__ import annotations

from torch import Tensor

from losses._common import Reduction
from losses.pairwise import margin_lambda_function, margin_pair, margin_pair_cost, pairwise_gradient, pairwise_loss

__all__ = ["margin_cost", "margin_lambda_function", "margin_lambdas", "margin_pair_cost"]


def margin_lambdas(scores: Tensor, labels: Tensor, mask: Tensor | None = None, *, delta: float = 1.0) -> Tensor:
    """Margin lambdas summed over pairs: ``lambda_i = sum_{l_i > l_j} lam(x_ij) - sum_{l_j > l_i} lam(x_ji)``.

    ``lam`` is eqs. 4-6 with ``x_ij = s_i - s_j``. Differentiable, so its Jacobian (eq. 11) can be
    taken with autograd; it is symmetric because each pair term depends on ``s_i - s_j`` only.
    Memory is ``O(B * rows * L)`` per chunk of the pair matrix.

    Args: scores, labels, mask ``[B, L]``; ``delta`` the margin. Returns ``[B, L]``.

    Example:
        >>> import torch
        >>> margin_lambdas(torch.tensor([[0.25, 0.0]]), torch.tensor([[1.0, 0.0]]), delta=1.0)
        tensor([[ 0.7500, -0.7500]])
    """
    return -pairwise_gradient(scores, labels, mask, pair_fn=margin_pair(delta), differentiable=True)


def margin_cost(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor | None = None,
    *,
    delta: float = 1.0,
    reduction: Reduction = "sum",
) -> Tensor:
    """Cost of eqs. 7-9 summed over pairs with ``label_i > label_j``; ``-grad = margin_lambdas``.

    As in the paper, a pair ordered correctly by more than ``delta`` costs ``-delta^2/2`` (the
    minimum), not 0. Pairs are chunked like every pairwise loss (``pairwise_loss``).

    Args: scores, labels, mask ``[B, L]``; ``delta``; ``reduction`` ``"sum"``, ``"mean"`` (over
    queries) or ``"none"`` (``[B]``). Returns a scalar or ``[B]``.
    """
    return pairwise_loss(scores, labels, mask, pair_fn=margin_pair(delta), reduction=reduction)
