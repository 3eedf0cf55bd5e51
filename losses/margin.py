"""The piecewise margin lambda-function of Burges' NIPS'05 LambdaRank paper (eqs. 4-9)."""

from __future__ import annotations

import torch
from torch import Tensor

from losses._common import Reduction, as_float32, no_autocast, reduce


def _pair_terms(scores: Tensor, labels: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``x_ij = s_i - s_j`` and the mask of pairs with ``label_i > label_j``, both ``[B, L, L]``."""
    pair_mask = mask[:, :, None] & mask[:, None, :]
    better = pair_mask & (labels[:, :, None] > labels[:, None, :])
    return scores[:, :, None] - scores[:, None, :], better


def margin_lambda_function(x: Tensor, delta: float) -> Tensor:
    """Eqs. 4-6: 1 for ``x < 0``, ``delta - x`` on ``[0, delta]``, 0 beyond. Same shape as x."""
    return torch.where(x < 0, torch.ones_like(x), (delta - x).clamp_min(0.0))


def margin_pair_cost(x: Tensor, delta: float) -> Tensor:
    """Eqs. 7-9: ``-x`` for ``x < 0``, ``x^2/2 - delta x`` on ``[0, delta]``, ``-delta^2/2`` beyond."""
    inside = 0.5 * x.square() - delta * x
    return torch.where(x < 0, -x, torch.where(x <= delta, inside, torch.full_like(x, -0.5 * delta**2)))


def margin_lambdas(scores: Tensor, labels: Tensor, mask: Tensor | None = None, *, delta: float = 1.0) -> Tensor:
    """Margin lambdas summed over pairs: ``lambda_i = sum_{l_i > l_j} lam(x_ij) - sum_{l_j > l_i} lam(x_ji)``.

    ``lam`` is eqs. 4-6 with ``x_ij = s_i - s_j``. Differentiable, so its Jacobian (eq. 11) can be
    taken with autograd; it is symmetric because each pair term depends on ``s_i - s_j`` only.

    Args: scores, labels, mask ``[B, L]``; ``delta`` the margin. Returns ``[B, L]``.
    """
    scores, labels, mask = as_float32(scores, labels, mask)
    with no_autocast(scores.device):
        x, better = _pair_terms(scores, labels, mask)
        pair_lambda = margin_lambda_function(x, delta) * better
        return pair_lambda.sum(2) - pair_lambda.sum(1)


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
    minimum), not 0.

    Args: scores, labels, mask ``[B, L]``; ``delta``; ``reduction`` ``"sum"``, ``"mean"`` (over
    queries) or ``"none"`` (``[B]``). Returns a scalar or ``[B]``.
    """
    scores, labels, mask = as_float32(scores, labels, mask)
    with no_autocast(scores.device):
        x, better = _pair_terms(scores, labels, mask)
        per_query = (margin_pair_cost(x, delta) * better).sum((1, 2))
    return reduce(per_query, reduction, scores.shape[0])
