"""Gaussian-process preference learning from pairs (Chu & Ghahramani), Laplace approximation.

The model (sections 2.1-2.2 of "Extensions of Gaussian Processes for Ranking"): a zero-mean GP
prior over latent utilities ``f`` of the items with covariance ``K`` (eq. 2, or the graph-deformed
eq. 5), and the probit likelihood of each observed preference ``v_k > u_k``

    P(v_k > u_k | f) = Phi(z_k),   z_k = (f(v_k) - f(u_k)) / (sqrt(2) sigma)        (eq. 6)

The likelihood touches ``f`` only through the K differences ``g = D f`` (``D`` is the ``K x n``
matrix with +1 at ``v_k`` and -1 at ``u_k``), whose prior is ``N(0, S)``, ``S = D K D^T``. The
posterior is therefore GP probit classification on ``g`` with the "preference kernel" ``S`` and
every label +1: the family's one Laplace approximation or EP (``rankers.gp.inference``) with the
likelihood ``rankers.gp.likelihoods.ProbitPreference``, both of which only factor
``B = I + W^1/2 S W^1/2`` (eigenvalues >= 1) and never invert ``K`` or ``S``. The paper uses EP
(``inference="ep"``); Laplace (the default of ``fit``) gives the differentiable evidence that
``fit_hyperparameters`` maximizes.

Everything is batched over a leading task dimension ``[T, ...]`` (trials, candidates, users):
``prior [T, n, n]`` (or one shared ``[n, n]``), pairs ``v, u [T, K]`` with ``mask [T, K]`` for
tasks with fewer pairs; all tasks run as one tensor program, Newton steps included.

Conventions: padded pairs (mask False) carry no likelihood and no gradient. A pair of an item with
itself is refused. Contradicting pairs (``a > b`` and ``b > a``) are *allowed*: under the probit
likelihood they are two noisy observations whose joint term ``log Phi(z) + log Phi(-z)`` is largest
at ``z = 0``, so they pull ``f(a)`` and ``f(b)`` together (with nothing else observed the mode stays
the prior's, ``f = 0``); everything stays finite. ``check_pairs(..., conflicts="error")`` (and
``model.conflicts=error``) refuses them instead.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from rankers.gp.inference import GaussianPosterior, ep, laplace, laplace_log_evidence
from rankers.gp.kernels import rbf
from rankers.gp.likelihoods import ProbitPreference


class InconsistentPairsError(ValueError):
    """The pair set holds ``a > b`` and ``b > a`` and the caller asked for consistent pairs."""


def check_pairs(v: Tensor, u: Tensor, n: int, mask: Tensor | None = None, *, conflicts: str = "allow") -> int:
    """Validate preference pairs ``v > u`` (``[..., K]`` item indices into ``n`` items).

    Refuses indices out of ``[0, n)`` and pairs of an item with itself; with ``conflicts="error"``
    refuses ``a > b`` together with ``b > a`` in one task. Returns how many such conflicting pairs
    there are (counted once per contradicting pair of pairs).
    """
    if conflicts not in ("allow", "error"):
        raise ValueError(f"conflicts must be 'allow' or 'error', got {conflicts!r}")
    mask = torch.ones_like(v, dtype=torch.bool) if mask is None else mask
    if v.shape != u.shape or v.shape != mask.shape:
        raise ValueError(f"pairs v {tuple(v.shape)}, u {tuple(u.shape)}, mask {tuple(mask.shape)} differ in shape")
    real_v, real_u = v[mask], u[mask]
    if real_v.numel() and (min(real_v.min(), real_u.min()) < 0 or max(real_v.max(), real_u.max()) >= n):
        raise ValueError(f"a pair names an item outside [0, {n})")
    if bool((real_v == real_u).any()):
        raise ValueError("a pair prefers an item to itself (v == u): not a preference")
    # a conflicting pair (a, b) with (b, a) in the same task: is the key of (u, v) among the keys of
    # the task's pairs? (keys t*n*n + v*n + u; O(K log K), not a K x K comparison)
    task = torch.arange(v[..., :1].numel(), device=v.device).reshape((*v.shape[:-1], 1)) if v.dim() > 1 else 0
    key = (task * n + v) * n + u
    reverse = (task * n + u) * n + v
    count = int(torch.isin(reverse[mask], key[mask]).sum()) // 2
    if count and conflicts == "error":
        raise InconsistentPairsError(
            f"{count} contradicting preference(s): a > b and b > a both observed "
            "(use conflicts='allow' to treat them as noisy observations)"
        )
    return count


# -- gathering the pair structure ----------------------------------------------------------------
def _rows(matrix: Tensor, index: Tensor) -> Tensor:
    """``matrix[..., index, :]`` per task: ``[n, m]`` or ``[T, n, m]`` with ``index [T, K]`` -> ``[T, K, m]``."""
    if matrix.dim() == 2:
        return matrix[index]
    return matrix.gather(-2, index[..., None].expand(*index.shape, matrix.shape[-1]))


def difference_rows(matrix: Tensor, v: Tensor, u: Tensor) -> Tensor:
    """``D M``: rows ``M[v_k] - M[u_k]``, ``[..., K, m]`` (``D`` is the pair-difference matrix)."""
    return _rows(matrix, v) - _rows(matrix, u)


def pair_gram(prior: Tensor, v: Tensor, u: Tensor, mask: Tensor | None = None) -> Tensor:
    """``S = D K D^T``, the prior covariance of the latent differences ``f(v_k) - f(u_k)``.

    Args:
        prior: ``[n, n]`` or ``[T, n, n]``; v, u: ``[T, K]`` (or ``[K]`` with a 2-d prior); mask: ``[T, K]``.

    Returns:
        ``[T, K, K]``; rows and columns of padded pairs are 0.

    Example:
        >>> K = torch.eye(3)
        >>> pair_gram(K, torch.tensor([0, 1]), torch.tensor([1, 2]))
        tensor([[ 2., -1.],
                [-1.,  2.]])
    """
    rows = difference_rows(prior, v, u)  # [T, K, n]
    s = gather_columns(rows, v) - gather_columns(rows, u)
    if mask is not None:
        keep = (mask[..., :, None] & mask[..., None, :]).to(s.dtype)
        s = s * keep
    return s


def gather_columns(matrix: Tensor, index: Tensor) -> Tensor:
    """``matrix[..., :, index]`` per task: ``[T, K, n]`` with ``index [T, K']`` -> ``[T, K, K']``."""
    if matrix.dim() == 2:
        return matrix[:, index]
    return matrix.gather(-1, index[..., None, :].expand(*matrix.shape[:-1], index.shape[-1]))


def scatter_pairs(weights: Tensor, v: Tensor, u: Tensor, n: int) -> Tensor:
    """``D^T w``: ``+w_k`` at ``v_k``, ``-w_k`` at ``u_k``; ``[..., K]`` -> ``[..., n]``."""
    out = weights.new_zeros(*weights.shape[:-1], n)
    out.scatter_add_(-1, v, weights)
    out.scatter_add_(-1, u, -weights)
    return out


# -- the posterior ---------------------------------------------------------------------------------
INFERENCE = ("laplace", "ep")


def _prepare(v: Tensor, u: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Pairs as ``[T, K]`` with a bool mask; padded pairs point at item 0 (never used)."""
    if v.dim() == 1:
        v, u = v[None], u[None]
        mask = None if mask is None else mask[None]
    mask = torch.ones_like(v, dtype=torch.bool) if mask is None else mask.bool()
    return torch.where(mask, v, 0), torch.where(mask, u, 0), mask


def fit(
    prior: Tensor,
    v: Tensor,
    u: Tensor,
    sigma: Tensor | float,
    mask: Tensor | None = None,
    *,
    inference: str = "laplace",
    alpha0: Tensor | None = None,
    sites: tuple[Tensor, Tensor] | None = None,
    **options,
) -> GaussianPosterior:
    """The Gaussian posterior of the pair differences for the pairs ``v > u`` (``[T, K]`` or ``[K]``)
    under the prior covariance ``prior [T|1, n, n]`` of the items, noise ``sigma`` (float or ``[T]``).

    ``inference="laplace"`` (``rankers.gp.inference.laplace``, warm start ``alpha0 [T, K]``) or ``"ep"``
    (``rankers.gp.inference.ep``, sequential, the paper's; warm start ``sites``); ``options`` go to it.
    The result's ``alpha [T, K]`` gives the items' posterior mean ``f_hat = K D^T alpha``
    (``scatter_pairs``), ``mean [T, K]`` the differences' ``S alpha``, ``tau`` the site precisions.
    """
    if inference not in INFERENCE:
        raise ValueError(f"inference must be one of {INFERENCE}, got {inference!r}")
    v, u, mask = _prepare(v, u, mask)
    check_pairs(v, u, prior.shape[-1], mask)
    s_mat, likelihood = pair_gram(prior, v, u, mask), ProbitPreference(sigma)
    if inference == "ep":
        return ep(s_mat, likelihood, mask, sites=sites, **options)
    return laplace(s_mat, likelihood, mask, alpha0=alpha0, **options)


def lower_solve(chol: Tensor, rhs: Tensor) -> Tensor:
    """``chol^-1 rhs`` for lower-triangular ``chol [T, K, K]`` and wide ``rhs [T, K, m]``.

    Inverts the small ``K x K`` factor and multiplies: on CPU, batched ``solve_triangular`` with
    many right-hand sides was measured 3-50x slower than this (it threads badly over tiny blocks).
    """
    eye = torch.eye(chol.shape[-1], dtype=chol.dtype, device=chol.device).expand_as(chol)
    return torch.linalg.solve_triangular(chol, eye, upper=False) @ rhs


# -- predictions ---------------------------------------------------------------------------------
def posterior_latent(
    state: GaussianPosterior, cross: Tensor, prior_diag: Tensor, v: Tensor, u: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Posterior mean and variance of ``f`` at ``m`` points, and the factor of their covariance.

    Args:
        state: from ``fit``; cross: ``K(X, X*)`` ``[T|-, n, m]``; prior_diag: ``K(x*, x*)``
            ``[T|-, m]``; v, u: the fitted pairs ``[T, K]`` (padding anywhere, its ``tau`` is 0).

    Returns:
        ``mean [T, m] = K*^T D^T alpha``, ``var [T, m] = k** - |V_j|^2`` (clamped at 0: float32
        rounding can make it slightly negative), and ``V [T, K, m] = L^-1 W^1/2 D K(X, X*)``, with
        which ``Cov(f_i, f_j) = K(x_i, x_j) - V_i . V_j``.
    """
    rows = difference_rows(cross, v, u)  # D K(X, X*): [T, K, m]
    mean = (state.alpha[..., None] * rows).sum(-2)
    factor = lower_solve(state.chol, state.root[..., None] * rows)
    var = (prior_diag - (factor * factor).sum(-2)).clamp_min(0.0)
    return mean, var, factor


def pair_probability(mean_diff: Tensor, var_diff: Tensor, sigma: Tensor | float) -> Tensor:
    """Predictive ``P(v > u | D) = Phi(mu / sqrt(2 sigma^2 + s^2))`` (the paper's ``Z_k`` for an
    unused pair) from the posterior mean ``mu`` and variance ``s^2`` of ``f(v) - f(u)``."""
    sigma = torch.as_tensor(sigma, dtype=mean_diff.dtype, device=mean_diff.device)
    sigma = sigma.reshape(sigma.shape + (1,) * (mean_diff.dim() - sigma.dim())) if sigma.dim() else sigma
    return torch.special.ndtr(mean_diff / torch.sqrt(2 * sigma * sigma + var_diff.clamp_min(0.0)))


def predict_pairs(
    state: GaussianPosterior,
    prior: Tensor,
    v: Tensor,
    u: Tensor,
    cand_v: Tensor,
    cand_u: Tensor,
    sigma: Tensor | float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Mean, variance of ``f(a) - f(b)`` and ``P(a > b | D)`` for candidate pairs of the items.

    Args:
        prior: ``[T|-, n, n]`` over the same items as the fitted pairs ``v, u [T, K]``;
        cand_v, cand_u: ``[T, P]`` candidate pairs ``a > b``.

    Returns:
        ``(mu [T, P], s2 [T, P], p [T, P])``.
    """
    rows = difference_rows(prior, v, u)  # [T, K, n]
    d_rows = gather_columns(rows, cand_v) - gather_columns(rows, cand_u)  # D K D_c^T: [T, K, P]
    mu = (state.alpha[..., None] * d_rows).sum(-2)
    factor = lower_solve(state.chol, state.root[..., None] * d_rows)
    prior_var = _entries(prior, cand_v, cand_v) + _entries(prior, cand_u, cand_u) - 2 * _entries(prior, cand_v, cand_u)
    s2 = (prior_var - (factor * factor).sum(-2)).clamp_min(0.0)
    return mu, s2, pair_probability(mu, s2, sigma)


def _entries(matrix: Tensor, rows: Tensor, cols: Tensor) -> Tensor:
    """``matrix[..., rows[p], cols[p]]``: ``[n, n]`` or ``[T, n, n]`` with ``[T, P]`` -> ``[T, P]``."""
    if matrix.dim() == 2:
        return matrix[rows, cols]
    n = matrix.shape[-1]
    return matrix.flatten(-2).gather(-1, rows * n + cols)


# -- the evidence, differentiable in the hyperparameters ------------------------------------------
def log_evidence(prior: Tensor, v: Tensor, u: Tensor, sigma: Tensor, mask: Tensor | None = None, **options) -> Tensor:
    """Laplace approximation of ``log P(D | theta)`` ``[T]``, differentiable in ``prior`` and ``sigma``
    (``rankers.gp.inference.laplace_log_evidence``: the exact total gradient)."""
    v, u, mask = _prepare(v, u, mask)
    return laplace_log_evidence(pair_gram(prior, v, u, mask), ProbitPreference(sigma), mask, **options)


def fit_hyperparameters(
    x: Tensor,
    v: Tensor,
    u: Tensor,
    *,
    kappa: Tensor | float = 1.0,
    sigma: float = 1.0,
    kappa0: float = 1.0,
    ard: bool = False,
    steps: int = 30,
) -> dict[str, Tensor | float]:
    """Kernel width(s) ``kappa`` and noise ``sigma`` maximizing the Laplace evidence (L-BFGS in logs).

    ``kappa0`` stays fixed: scaling ``f`` by ``c`` leaves every preference probability unchanged when
    ``sigma`` scales by ``c``, so the evidence is flat along ``(c^2 kappa0, c sigma)`` and only
    their ratio is identifiable; fixing ``kappa0`` removes the flat direction.

    Args:
        x: ``[n, d]`` items; v, u: ``[K]`` pairs ``v > u``; kappa: start (float, or ``[d]`` with ``ard``).

    Returns:
        ``{"kappa": [d] or scalar tensor, "sigma": float, "kappa0": float, "log_evidence": float}``.
    """
    d = x.shape[-1]
    start = torch.as_tensor(kappa, dtype=x.dtype, device=x.device)
    if ard and start.dim() == 0:
        start = start.expand(d)
    log_kappa = start.clone().log().requires_grad_(True)
    log_sigma = torch.tensor(math.log(sigma), dtype=x.dtype, device=x.device, requires_grad=True)
    optimizer = torch.optim.LBFGS([log_kappa, log_sigma], max_iter=steps, line_search_fn="strong_wolfe")

    def objective() -> Tensor:
        optimizer.zero_grad()
        prior = rbf(x, x, kappa0, log_kappa.exp(), ard=ard)
        loss = -log_evidence(prior, v, u, log_sigma.exp())[0]
        loss.backward()
        return loss

    optimizer.step(objective)
    with torch.no_grad():
        prior = rbf(x, x, kappa0, log_kappa.exp(), ard=ard)
        value = float(fit(prior, v, u, log_sigma.exp()).log_evidence[0])
    return {
        "kappa": log_kappa.detach().exp(),
        "sigma": float(log_sigma.detach().exp()),
        "kappa0": float(kappa0),
        "log_evidence": value,
    }
