"""L2-regularized logistic regression for every label at once: one batched truncated-Newton solve.

Binary relevance fits ``d`` independent problems (scikit-learn's ``LogisticRegression``, one per
label, ``baselines.fit_binary_relevance``). The blend's CV fits them again on every fold and for
every ``C`` it tries, which made the logistic part most of a fit (genbase, 1,847 features: 8 s a
fit). The problems share the design matrix, so here they are solved together: every Newton step
is a few matrix products ``[N, F] x [F, d]`` for all labels, with a per-label conjugate-gradient
solve and a per-label backtracking line search. The optimum is scikit-learn's (same objective:
``0.5 |w|^2 + C sum log(1 + exp(-y (x w + b)))``, intercept not penalized), reached to a tighter
tolerance; ``tests/rankers/label_ranking/test_logistic.py`` checks it against scikit-learn and the
speed is in ``bench/label_ranking_logistic.py``.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
from torch import Tensor


def _objective(z: Tensor, sign: Tensor, params: Tensor, C: float) -> Tensor:
    """Per label ``[d]``: ``0.5 |w|^2 + C sum softplus(-y z)`` for margins ``z [N, d]``."""
    return 0.5 * (params[:, :-1] ** 2).sum(1) + C * torch.nn.functional.softplus(-sign * z).sum(0)


def _margins(x: Tensor, params: Tensor) -> Tensor:
    return x @ params[:, :-1].T + params[:, -1]


def _hessian_product(v: Tensor, *, design: Tensor, curvature: Tensor, penalized: Tensor) -> Tensor:
    """Each label's Hessian times its row of ``v [d, F + 1]``: ``v + X' D_l X v`` (intercept unpenalized)."""
    return penalized * v + (curvature * (design @ v.T)).T @ design


def _conjugate_gradient(hvp, rhs: Tensor, *, iterations: int, tolerance: float) -> Tensor:
    """Solve ``H_l p_l = rhs_l`` for each row ``l`` of ``rhs [d, P]`` (each ``H_l`` positive definite)."""
    solution = torch.zeros_like(rhs)
    residual = rhs.clone()
    direction = residual.clone()
    norm = (residual * residual).sum(1)
    stop = tolerance**2 * norm
    for _ in range(iterations):
        active = norm > stop
        if not active.any():
            break
        product = hvp(direction)
        curvature = (direction * product).sum(1)
        step = torch.where(active, norm / curvature.clamp_min(1e-300), torch.zeros_like(norm))
        solution += step[:, None] * direction
        residual -= step[:, None] * product
        new_norm = (residual * residual).sum(1)
        direction = residual + (new_norm / norm.clamp_min(1e-300))[:, None] * direction
        norm = new_norm
    return solution


def fit_logistic(
    features: np.ndarray | Tensor,
    relevant: np.ndarray | Tensor,
    *,
    C: float = 1.0,
    tol: float = 1e-8,
    max_newton: int = 100,
    max_cg: int = 200,
) -> tuple[np.ndarray, np.ndarray]:
    """One L2-regularized logistic regression per label, all solved together by truncated Newton.

    Args:
        features: ``[N, F]``. relevant: ``[N, d]``, > 0 relevant.
        C: inverse regularization strength, as scikit-learn's.
        tol: stop when each label's largest gradient entry is below ``tol * (1 + C N)``.

    Returns ``weight [d, F]`` and ``bias [d]`` (float64). A label constant on the training set gets
    weight 0 and bias -1 or +1, as ``fit_binary_relevance`` gives it.

    Example:
        >>> x = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> w, b = fit_logistic(x, np.array([[0, 1], [0, 1], [1, 1], [1, 1]]))
        >>> bool(w[0, 0] > 0), w[1].tolist(), b[1].item()
        (True, [0.0], 1.0)
    """
    x = torch.as_tensor(np.asarray(features), dtype=torch.float64)
    labels = torch.as_tensor(np.asarray(relevant) > 0)
    n, f = x.shape
    d = labels.shape[1]
    sign = labels.double() * 2 - 1  # [N, d]
    design = torch.cat([x, torch.ones(n, 1, dtype=x.dtype)], 1)  # [N, F + 1]
    penalized = torch.ones(f + 1, dtype=x.dtype)
    penalized[-1] = 0.0  # scikit-learn leaves the intercept unpenalized
    params = torch.zeros(d, f + 1, dtype=x.dtype)
    constant = labels.all(0) | ~labels.any(0)
    limit = tol * (1.0 + C * n)
    for _ in range(max_newton):
        z = _margins(x, params)
        probability = torch.sigmoid(sign * z)
        gradient = penalized * params + C * ((probability - 1) * sign).T @ design  # [d, F + 1]
        gradient[constant] = 0.0
        if float(gradient.abs().max()) < limit:
            break
        curvature = C * probability * (1 - probability)  # [N, d]
        hvp = partial(_hessian_product, design=design, curvature=curvature, penalized=penalized)
        newton = _conjugate_gradient(hvp, -gradient, iterations=max_cg, tolerance=0.1)
        params = _line_search(x, sign, params, newton, gradient, C)
    weight, bias = params[:, :-1].numpy(), params[:, -1].numpy()
    weight[constant.numpy()] = 0.0
    bias[constant.numpy()] = np.where(labels.all(0).numpy(), 1.0, -1.0)[constant.numpy()]
    return weight, bias


def _line_search(x: Tensor, sign: Tensor, params: Tensor, direction: Tensor, gradient: Tensor, C: float) -> Tensor:
    """Backtracking (Armijo) per label: halve each label's step until its objective drops enough."""
    current = _objective(_margins(x, params), sign, params, C)
    slope = (gradient * direction).sum(1)
    step = torch.ones(len(params), dtype=params.dtype)
    accepted = torch.zeros(len(params), dtype=torch.bool)
    for _ in range(30):
        trial = params + step[:, None] * direction
        decreased = _objective(_margins(x, trial), sign, trial, C) <= current + 1e-4 * step * slope
        accepted |= decreased
        if accepted.all():
            break
        step = torch.where(accepted, step, step / 2)
    step = torch.where(accepted, step, torch.zeros_like(step))
    return params + step[:, None] * direction
