"""Gaussian-process preference learning from pairs (Chu & Ghahramani), Laplace approximation.

The model (sections 2.1-2.2 of "Extensions of Gaussian Processes for Ranking"): a zero-mean GP
prior over latent utilities ``f`` of the items with covariance ``K`` (eq. 2, or the graph-deformed
eq. 5), and the probit likelihood of each observed preference ``v_k > u_k``

    P(v_k > u_k | f) = Phi(z_k),   z_k = (f(v_k) - f(u_k)) / (sqrt(2) sigma)        (eq. 6)

The likelihood touches ``f`` only through the K differences ``g = D f`` (``D`` is the ``K x n``
matrix with +1 at ``v_k`` and -1 at ``u_k``), whose prior is ``N(0, S)``, ``S = D K D^T``. The
Laplace approximation is therefore GP probit classification on ``g`` with the "preference kernel"
``S`` and every label +1; the mode is found by Newton's method in the numerically stable form of
Rasmussen & Williams (Algorithm 3.1), which only factors ``B = I + W^1/2 S W^1/2`` (eigenvalues
>= 1) and never inverts ``K`` or ``S``. The paper approximates the same posterior by EP; here it is
Laplace (the issue's choice), and the entropy criterion below uses the paper's EP/ADF update of
one new pair on top of the Laplace posterior.

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
from dataclasses import dataclass

import torch
from torch import Tensor

from rankers.gp.kernels import cholesky_jitter, rbf

SQRT2 = math.sqrt(2.0)


class InconsistentPairsError(ValueError):
    """The pair set holds ``a > b`` and ``b > a`` and the caller asked for consistent pairs."""


# -- the probit likelihood -----------------------------------------------------------------------
def log_phi(z: Tensor) -> Tensor:
    """``log Phi(z)``, finite for any finite ``z`` (``torch.special.log_ndtr``)."""
    return torch.special.log_ndtr(z)


def inverse_mills(z: Tensor) -> Tensor:
    """``N(z) / Phi(z)`` computed in log space (finite and positive for every finite ``z``)."""
    return torch.exp(-0.5 * z * z - 0.5 * math.log(2 * math.pi) - log_phi(z))


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


# -- the Laplace approximation --------------------------------------------------------------------
@dataclass
class LaplaceState:
    """The Gaussian (Laplace or EP) posterior of ``T`` tasks, in the pairs' coordinates.

    ``a [T, K]``: ``f_hat = K D^T a`` (so ``alpha = D^T a`` are the items' weights); ``g [T, K]``: the
    mode's differences ``S a``; ``w [T, K]``: ``-d^2 log P / dg^2`` at the mode (> 0);
    ``chol [T, K, K]``: Cholesky of ``B = I + W^1/2 S W^1/2``; ``psi [T]``: the log joint
    ``-a.g/2 + sum log Phi``; ``log_evidence [T]``: ``psi - sum log diag(chol)``, the Laplace
    approximation of ``log P(D | theta)``; ``iterations``: Newton steps taken. Under EP (``ep_posterior``)
    ``w`` holds the site precisions, ``psi`` and ``log_evidence`` are None, ``sites`` the
    ``(tau, nu)`` site parameters and ``iterations`` the sweeps.
    """

    a: Tensor
    g: Tensor
    w: Tensor
    chol: Tensor
    psi: Tensor | None
    log_evidence: Tensor | None
    iterations: int
    sites: tuple[Tensor, Tensor] | None = None


def _noise(sigma: Tensor | float, like: Tensor) -> Tensor:
    """``sqrt(2) sigma`` as a ``[T, 1]`` tensor (or a scalar) broadcasting over pairs."""
    s = torch.as_tensor(sigma, dtype=like.dtype, device=like.device) * SQRT2
    return s[..., None] if s.dim() > 0 else s


def _likelihood_terms(g: Tensor, s: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(sum log Phi(g/s) [T], d log P/dg [T, K], W = -d^2 log P/dg^2 [T, K])``, 0 at padding."""
    z = g / s
    r = inverse_mills(z)
    m = mask.to(g.dtype)
    log_p = (log_phi(z) * m).sum(-1)
    grad = m * r / s
    w = m * r * (r + z) / (s * s)
    return log_p, grad, w


def _newton_direction(s_mat: Tensor, g: Tensor, s: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One Newton step from ``g``: the new ``a`` (R&W Algorithm 3.1, lines 4-8), ``W`` and ``chol(B)``."""
    _, grad, w = _likelihood_terms(g, s, mask)
    sw = w.sqrt()
    k = s_mat.shape[-1]
    eye = torch.eye(k, dtype=s_mat.dtype, device=s_mat.device)
    b_mat = eye + sw[..., :, None] * s_mat * sw[..., None, :]
    chol, _ = cholesky_jitter(b_mat, name="B = I + W^1/2 S W^1/2")
    b = w * g + grad
    inner = torch.cholesky_solve((sw * (s_mat @ b[..., None])[..., 0])[..., None], chol)[..., 0]
    return b - sw * inner, w, chol


def _psi(a: Tensor, s_mat: Tensor, s: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    g = (s_mat @ a[..., None])[..., 0]
    log_p, _, _ = _likelihood_terms(g, s, mask)
    return -0.5 * (a * g).sum(-1) + log_p, g


def laplace_mode(
    s_mat: Tensor,
    mask: Tensor,
    sigma: Tensor | float,
    *,
    a0: Tensor | None = None,
    max_iter: int = 100,
    tol: float = 1e-9,
) -> LaplaceState:
    """Posterior mode of the pair-difference GP by damped Newton steps, all tasks at once.

    Args:
        s_mat: ``[T, K, K]`` pair Gram ``D K D^T`` (``pair_gram``); mask: ``[T, K]`` real pairs.
        sigma: the noise ``sigma`` of eq. (6), a float or ``[T]``.
        a0: a warm start ``[T, K]`` (e.g. the previous solution with a new pair appended).
        max_iter, tol: stop when no task's log joint changes by more than ``tol * (1 + |psi|)``.

    The log joint is concave (probit is log-concave), so Newton converges; a step that lowers
    ``psi`` is halved (per task) until it does not.
    """
    mask = mask.bool()
    s = _noise(sigma, s_mat)
    a = torch.zeros_like(mask, dtype=s_mat.dtype) if a0 is None else a0 * mask
    psi, g = _psi(a, s_mat, s, mask)
    iterations = 0
    for iterations in range(1, max_iter + 1):  # noqa: B007  (the count is returned)
        a_new, _, _ = _newton_direction(s_mat, g, s, mask)
        step = a_new - a
        t = torch.ones_like(psi)
        for _ in range(30):  # per-task step halving; a Newton step on a concave psi rarely needs it
            cand_psi, cand_g = _psi(a + t[..., None] * step, s_mat, s, mask)
            worse = cand_psi < psi - 1e-12 * psi.abs()
            if not bool(worse.any()):
                break
            t = torch.where(worse, 0.5 * t, t)
        a = a + t[..., None] * step
        change = (cand_psi - psi).abs()
        psi, g = cand_psi, cand_g
        if bool((change <= tol * (1.0 + psi.abs())).all()):
            break
    _, w, chol = _newton_direction(s_mat, g, s, mask)
    log_det = chol.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    return LaplaceState(a=a, g=g, w=w, chol=chol, psi=psi, log_evidence=psi - log_det, iterations=iterations)


def ep_posterior(
    s_mat: Tensor,
    mask: Tensor,
    sigma: Tensor | float,
    *,
    a0: Tensor | None = None,
    sites: tuple[Tensor, Tensor] | None = None,
    max_sweeps: int = 50,
    tol: float = 1e-8,
) -> LaplaceState:
    """Expectation propagation for the pair-difference GP (the paper's section 2.3 and Appendix A).

    Sequential EP (Rasmussen & Williams, Algorithm 3.5) on the K differences ``g ~ N(0, S)`` with
    sites ``Phi(g_k / s)``: each update removes site ``k`` (the cavity), matches the first two
    moments of the cavity times the probit, and updates the posterior by a rank-one step; all
    tasks move together (one site index at a time, vectorized over ``T``). The posterior is
    returned in the same form as the Laplace one (``w`` = the site precisions, ``a`` such that
    ``E[f] = K D^T a``, ``chol`` of ``I + W^1/2 S W^1/2``), so every prediction function takes
    either; ``psi`` and ``log_evidence`` are ``None`` (the hyperparameters are fit by the Laplace
    evidence). For a noise-free probit (small ``sigma``) EP keeps the variance reduction of a
    labelled pair that Laplace, at a mode deep in the flat part of ``Phi``, loses.

    Args:
        sites: a warm start ``(tau [T, K], nu [T, K])`` (e.g. the previous fit's with a new pair
            appended as 0, 0); a0 is ignored (the Laplace warm start).
        max_sweeps, tol: stop when no site precision or mean changes by more than ``tol``.
    """
    del a0
    mask = mask.bool()
    s = _noise(sigma, s_mat)
    s2 = s * s
    m = mask.to(s_mat.dtype)
    k_count = s_mat.shape[-1]
    if sites is None:
        tau, nu = torch.zeros_like(m), torch.zeros_like(m)
    else:
        tau, nu = sites[0] * m, sites[1] * m
    sigma_post, mu = _ep_refresh(s_mat, tau, nu)
    tiny = torch.finfo(s_mat.dtype).tiny
    sweeps = 0
    for sweeps in range(1, max_sweeps + 1):  # noqa: B007  (the count is returned)
        tau_old, nu_old = tau.clone(), nu.clone()
        for k in range(k_count):
            var_k = sigma_post[..., k, k]
            cav_tau = (1.0 / var_k - tau[..., k]).clamp_min(tiny)
            cav_nu = mu[..., k] / var_k - nu[..., k]
            cav_var, cav_mean = 1.0 / cav_tau, cav_nu / cav_tau
            s2k = s2[..., 0] if s2.dim() else s2
            denom = torch.sqrt(s2k + cav_var)
            z = cav_mean / denom
            r = inverse_mills(z)
            hat_mean = cav_mean + cav_var * r / denom
            hat_var = cav_var - cav_var * cav_var * r * (z + r) / (s2k + cav_var)
            hat_var = torch.minimum(hat_var, cav_var).clamp_min(tiny)
            new_tau = (1.0 / hat_var - cav_tau).clamp_min(0.0) * m[..., k]
            new_nu = (hat_mean / hat_var - cav_nu) * m[..., k]
            delta = new_tau - tau[..., k]
            tau[..., k], nu[..., k] = new_tau, new_nu
            column = sigma_post[..., :, k]
            sigma_post = sigma_post - (delta / (1.0 + delta * var_k))[..., None, None] * (
                column[..., :, None] * column[..., None, :]
            )
            mu = (sigma_post @ nu[..., None])[..., 0]
        sigma_post, mu = _ep_refresh(s_mat, tau, nu)  # recompute stably after each sweep
        change = torch.maximum((tau - tau_old).abs().amax(-1), (nu - nu_old).abs().amax(-1))
        if bool((change <= tol * (1.0 + tau.abs().amax(-1))).all()):
            break
    sw = tau.sqrt()
    eye = torch.eye(k_count, dtype=s_mat.dtype, device=s_mat.device)
    chol, _ = cholesky_jitter(eye + sw[..., :, None] * s_mat * sw[..., None, :], name="B (EP)")
    inner = torch.cholesky_solve((sw * (s_mat @ nu[..., None])[..., 0])[..., None], chol)[..., 0]
    a = nu - sw * inner  # (S + T~^-1)^-1 T~^-1 nu: E[g] = S a
    state = LaplaceState(
        a=a, g=(s_mat @ a[..., None])[..., 0], w=tau, chol=chol, psi=None, log_evidence=None, iterations=sweeps
    )
    state.sites = (tau, nu)
    return state


def _ep_refresh(s_mat: Tensor, tau: Tensor, nu: Tensor) -> tuple[Tensor, Tensor]:
    """``Sigma = S - S T^1/2 B^-1 T^1/2 S`` and ``mu = Sigma nu`` from the site parameters."""
    sw = tau.sqrt()
    eye = torch.eye(s_mat.shape[-1], dtype=s_mat.dtype, device=s_mat.device)
    chol, _ = cholesky_jitter(eye + sw[..., :, None] * s_mat * sw[..., None, :], name="B (EP)")
    v = torch.linalg.solve_triangular(chol, sw[..., :, None] * s_mat, upper=False)
    sigma_post = s_mat - v.transpose(-1, -2) @ v
    return sigma_post, (sigma_post @ nu[..., None])[..., 0]


INFERENCE = ("laplace", "ep")


def fit(
    prior: Tensor,
    v: Tensor,
    u: Tensor,
    sigma: Tensor | float,
    mask: Tensor | None = None,
    *,
    inference: str = "laplace",
    **options,
) -> LaplaceState:
    """The Gaussian posterior of the pairs ``v > u`` under the prior covariance ``prior [T|1, n, n]``:
    ``laplace_mode`` (``inference="laplace"``) or ``ep_posterior`` (``"ep"``)."""
    if inference not in INFERENCE:
        raise ValueError(f"inference must be one of {INFERENCE}, got {inference!r}")
    if v.dim() == 1:
        v, u = v[None], u[None]
        mask = None if mask is None else mask[None]
    mask = torch.ones_like(v, dtype=torch.bool) if mask is None else mask.bool()
    v, u = torch.where(mask, v, 0), torch.where(mask, u, 0)
    check_pairs(v, u, prior.shape[-1], mask)
    solver = ep_posterior if inference == "ep" else laplace_mode
    if inference == "laplace":
        options.pop("sites", None)
    return solver(pair_gram(prior, v, u, mask), mask, sigma, **options)


def lower_solve(chol: Tensor, rhs: Tensor) -> Tensor:
    """``chol^-1 rhs`` for lower-triangular ``chol [T, K, K]`` and wide ``rhs [T, K, m]``.

    Inverts the small ``K x K`` factor and multiplies: on CPU, batched ``solve_triangular`` with
    many right-hand sides was measured 3-50x slower than this (it threads badly over tiny blocks).
    """
    eye = torch.eye(chol.shape[-1], dtype=chol.dtype, device=chol.device).expand_as(chol)
    return torch.linalg.solve_triangular(chol, eye, upper=False) @ rhs


# -- predictions ---------------------------------------------------------------------------------
def posterior_latent(
    state: LaplaceState, cross: Tensor, prior_diag: Tensor, v: Tensor, u: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Posterior mean and variance of ``f`` at ``m`` points, and the factor of their covariance.

    Args:
        state: from ``laplace_mode``; cross: ``K(X, X*)`` ``[T|-, n, m]``; prior_diag: ``K(x*, x*)``
            ``[T|-, m]``; v, u: the fitted pairs ``[T, K]`` (padding anywhere, its ``w`` is 0).

    Returns:
        ``mean [T, m] = K*^T D^T a``, ``var [T, m] = k** - |V_j|^2`` (clamped at 0: float32
        rounding can make it slightly negative), and ``V [T, K, m] = L^-1 W^1/2 D K(X, X*)``, with
        which ``Cov(f_i, f_j) = K(x_i, x_j) - V_i . V_j``.
    """
    rows = difference_rows(cross, v, u)  # D K(X, X*): [T, K, m]
    mean = (state.a[..., None] * rows).sum(-2)
    factor = lower_solve(state.chol, state.w.sqrt()[..., None] * rows)
    var = (prior_diag - (factor * factor).sum(-2)).clamp_min(0.0)
    return mean, var, factor


def pair_probability(mean_diff: Tensor, var_diff: Tensor, sigma: Tensor | float) -> Tensor:
    """Predictive ``P(v > u | D) = Phi(mu / sqrt(2 sigma^2 + s^2))`` (the paper's ``Z_k`` for an
    unused pair) from the posterior mean ``mu`` and variance ``s^2`` of ``f(v) - f(u)``."""
    sigma = torch.as_tensor(sigma, dtype=mean_diff.dtype, device=mean_diff.device)
    sigma = sigma.reshape(sigma.shape + (1,) * (mean_diff.dim() - sigma.dim())) if sigma.dim() else sigma
    return torch.special.ndtr(mean_diff / torch.sqrt(2 * sigma * sigma + var_diff.clamp_min(0.0)))


def predict_pairs(
    state: LaplaceState,
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
    mu = (state.a[..., None] * d_rows).sum(-2)
    factor = lower_solve(state.chol, state.w.sqrt()[..., None] * d_rows)
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
    """Laplace approximation of ``log P(D | theta)`` ``[T]``, differentiable in ``prior`` and ``sigma``.

    The mode is found without autograd; one Newton step from it is then taken *with* autograd. At
    the mode the Newton map's derivative in ``theta`` is exactly the implicit derivative of the mode
    (``-H^-1 d grad/d theta``), so the gradient of the returned value is the exact total gradient of
    the Laplace evidence (including the mode's dependence through ``W`` in ``log|B|``).
    """
    if v.dim() == 1:
        v, u = v[None], u[None]
        mask = None if mask is None else mask[None]
    mask = torch.ones_like(v, dtype=torch.bool) if mask is None else mask.bool()
    v, u = torch.where(mask, v, 0), torch.where(mask, u, 0)
    s_mat = pair_gram(prior, v, u, mask)
    with torch.no_grad():
        state = laplace_mode(s_mat.detach(), mask, sigma.detach(), **options)
    s = _noise(sigma, s_mat)
    g0 = (s_mat.detach() @ state.a[..., None])[..., 0]
    a1, _, _ = _newton_direction(s_mat, g0, s, mask)
    psi, g1 = _psi(a1, s_mat, s, mask)
    _, _, w1 = _likelihood_terms(g1, s, mask)
    sw = w1.sqrt()
    eye = torch.eye(s_mat.shape[-1], dtype=s_mat.dtype, device=s_mat.device)
    chol, _ = cholesky_jitter(eye + sw[..., :, None] * s_mat * sw[..., None, :], name="B")
    return psi - chol.diagonal(dim1=-2, dim2=-1).log().sum(-1)


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
