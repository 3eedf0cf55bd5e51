"""Ordinal (GPOR) and Gaussian (GPR) likelihoods of many GP tasks at once, and their Gaussian
approximations: EP (Yu, Yu & Tresp 2005, Appendix; Chu & Ghahramani 2005) and Laplace.

One *task* (a user) has a latent function ``f`` over items with a Gaussian prior ``N(h, Sigma)`` and
labels on some of the items. Tasks are batched: a task's observed items are gathered into
``p`` padded slots, so that every tensor is ``[T, p]`` or ``[T, p, p]`` and the whole batch is one
tensor program (one batched Cholesky per step). A padded slot has ``valid = False``: its site
precision is 0, so it has no influence on anything, and whatever it holds never reaches a value.

The ordinal likelihood (GPOR, the paper's section 2.3) with pins ``b_0 = -inf < b_1 < ... <
b_{r-1} < b_r = +inf`` and noise ``sigma``, labels 0-based (``y in 0..r-1``, the paper's label is
``y + 1``)::

    P(y | f) = Phi((b_{y+1} - f) / sigma) - Phi((b_y - f) / sigma)

Every Gaussian approximation here is a set of Gaussian *sites* ``t_i(f_i) ~ exp(-tau_i f_i^2 / 2 +
nu_i f_i)``; the posterior is ``N(mu, C)`` with ``C = (Sigma^-1 + S)^-1``, ``S = diag(tau)``,
computed stably as ``C = Sigma - Sigma S^1/2 B^-1 S^1/2 Sigma`` with ``B = I + S^1/2 Sigma S^1/2``
(Rasmussen & Williams 2006, eq. 3.67), whose eigenvalues are >= 1. The Gaussian likelihood (GPR)
is exact sites ``tau = 1 / sigma^2``, ``nu = y / sigma^2``; EP and Laplace give the ordinal ones.

Example:
    >>> import torch
    >>> kernel = torch.eye(3, dtype=torch.float64)[None]           # one task, 3 items, K = I
    >>> labels = torch.tensor([[0, 2, 1]]); valid = torch.ones(1, 3, dtype=torch.bool)
    >>> pins = torch.tensor([[-0.5, 0.5]], dtype=torch.float64); sigma = torch.ones(1, dtype=torch.float64)
    >>> post = ep_ordinal(kernel, torch.zeros(1, 3, dtype=torch.float64), labels, valid, pins, sigma).posterior
    >>> [round(v, 3) for v in post.mean[0].tolist()]   # the label-0 item low, the label-2 item high
    [-0.732, 0.732, 0.0]
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from rankers.gp.kernels import NotPositiveDefiniteError, cholesky_jitter

log = logging.getLogger(__name__)

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
# a kernel whose smallest eigenvalue is below -KERNEL_TOLERANCE * (its largest) is refused; above
# that, a small negative eigenvalue is rounding (a float32 Gram matrix) and is lifted by jitter
KERNEL_TOLERANCE = 1e-3


# a kernel (covariance) matrix that is not positive semi-definite beyond rounding: the family's one
# numerical error type, under the name this module's callers know
IndefiniteKernelError = NotPositiveDefiniteError


# -- the ordinal likelihood ---------------------------------------------------------------------------


def log1mexp(x: Tensor) -> Tensor:
    """``log(1 - exp(x))`` for ``x <= 0``, accurate at both ends (Maechler 2012).

    Examples:
        >>> [f"{v:.6g}" for v in log1mexp(torch.tensor([-1e-10, -1.0, -50.0], dtype=torch.float64)).tolist()]
        ['-23.0259', '-0.458675', '-1.92875e-22']
    """
    return torch.where(x > -math.log(2.0), torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def log_ndtr_diff(upper: Tensor, lower: Tensor) -> Tensor:
    """``log(Phi(upper) - Phi(lower))`` for ``upper > lower`` (either may be infinite), any shape.

    Both in the right tail, ``Phi(u) - Phi(l) = Phi(-l) - Phi(-u)`` is computed instead, so neither
    tail cancels to 0 (a label far from the latent value still has a finite log-likelihood).

    Example:
        >>> x = torch.tensor([40.0, 39.0], dtype=torch.float64)   # log(Phi(40) - Phi(39)): scipy's logsf gives -765.08
        >>> round(log_ndtr_diff(x[0], x[1]).item(), 2)
        -765.08
    """
    flip = lower > 0
    high = torch.where(flip, -lower, upper)
    low = torch.where(flip, -upper, lower)
    log_high = torch.special.log_ndtr(high)
    # an infinite lower end: Phi(low) = 0; kept out of the other branch so that no inf * 0 reaches a gradient
    unbounded = torch.isinf(low)
    low = torch.where(unbounded, torch.zeros_like(low), low)
    return torch.where(unbounded, log_high, log_high + log1mexp(torch.special.log_ndtr(low) - log_high))


def _edges(thresholds: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """The pins around each label: ``thresholds [T, r-1]``, ``labels [T, p]`` -> ``(upper, lower) [T, p]``."""
    infinity = torch.full_like(thresholds[:, :1], math.inf)
    edges = torch.cat([-infinity, thresholds, infinity], dim=1)  # [T, r+1]: b_0 .. b_r
    labels = labels.clamp(0, thresholds.shape[1])  # a padded slot's label is never used, keep it in range
    return edges.gather(1, labels + 1), edges.gather(1, labels)


def _standardize(edge: Tensor, f: Tensor, scale: Tensor) -> Tensor:
    """``(edge - f) / scale``, with an infinite pin kept out of the arithmetic (no inf * 0 in a gradient)."""
    infinite = torch.isinf(edge)
    z = (torch.where(infinite, torch.zeros_like(edge), edge) - f) / scale
    return torch.where(infinite, edge, z)


def ordinal_log_likelihood(f: Tensor, labels: Tensor, thresholds: Tensor, sigma: Tensor) -> Tensor:
    """``log P(y | f)`` of the ordinal probit, elementwise.

    Args:
        f: latent values ``[T, p]``. labels: 0-based labels ``[T, p]`` (long, ``0..r-1``).
        thresholds: pins ``b_1..b_{r-1}`` ``[T, r-1]``, increasing. sigma: noise ``[T]`` (> 0).

    Returns:
        ``[T, p]``, finite for finite inputs.
    """
    upper, lower = _edges(thresholds, labels)
    scale = sigma[:, None]
    return log_ndtr_diff(_standardize(upper, f, scale), _standardize(lower, f, scale))


def ordinal_moments(
    mean: Tensor, var: Tensor, labels: Tensor, thresholds: Tensor, sigma: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``log Z``, ``d log Z / d mean`` and ``d^2 log Z / d mean^2`` of ``Z = int P(y | f) N(f; mean, var) df``.

    ``Z = Phi(z_1) - Phi(z_2)`` with ``z_k = (b - mean) / sqrt(sigma^2 + var)`` (Chu & Ghahramani
    2005, the EP moments). With ``var = 0`` these are the likelihood's own log and derivatives
    (Laplace). All ``[T, p]``; ``var`` ``[T, p]`` (>= 0), the rest as :func:`ordinal_log_likelihood`.
    The second derivative is < 0 (the likelihood is log-concave), never NaN at infinite pins.
    """
    upper, lower = _edges(thresholds, labels)
    scale = torch.sqrt(sigma[:, None] ** 2 + var)
    z_upper, z_lower = _standardize(upper, mean, scale), _standardize(lower, mean, scale)
    log_z = log_ndtr_diff(z_upper, z_lower)
    ratio_upper = torch.exp(-0.5 * z_upper**2 - LOG_SQRT_2PI - log_z)  # N(z) / Z, 0 at an infinite pin
    ratio_lower = torch.exp(-0.5 * z_lower**2 - LOG_SQRT_2PI - log_z)
    first = (ratio_lower - ratio_upper) / scale
    # z * N(z) / Z is 0 at an infinite pin (inf * 0 would be NaN)
    zr_upper = torch.where(torch.isfinite(z_upper), z_upper * ratio_upper, torch.zeros_like(z_upper))
    zr_lower = torch.where(torch.isfinite(z_lower), z_lower * ratio_lower, torch.zeros_like(z_lower))
    second = (zr_lower - zr_upper) / scale**2 - first**2
    return log_z, first, second


GAUSS_HERMITE_NODES = 20


def expected_log_likelihood(
    mean: Tensor, var: Tensor, labels: Tensor, valid: Tensor, thresholds: Tensor, sigma: Tensor,
    *, nodes: int = GAUSS_HERMITE_NODES,
) -> Tensor:  # fmt: skip
    """``sum_i E_{f_i ~ N(mean_i, var_i)} log P(y_i | f_i)`` per task ``[T]`` (Gauss-Hermite quadrature):
    the part of the EM bound (2) that the pins and ``sigma`` change. Padded slots count 0."""
    x, w = np.polynomial.hermite.hermgauss(nodes)
    x = torch.as_tensor(x, dtype=mean.dtype, device=mean.device)
    w = torch.as_tensor(w / math.sqrt(math.pi), dtype=mean.dtype, device=mean.device)
    f = mean[..., None] + torch.sqrt(2 * var.clamp_min(0))[..., None] * x  # [T, p, Q]
    T, p, Q = f.shape
    values = ordinal_log_likelihood(
        f.reshape(T, p * Q), labels[..., None].expand(T, p, Q).reshape(T, p * Q), thresholds, sigma
    ).reshape(T, p, Q)
    return torch.where(valid, (values * w).sum(-1), torch.zeros_like(mean)).sum(-1)


def initial_thresholds(labels: Tensor, valid: Tensor, n_ranks: int, scale: Tensor) -> Tensor:
    """Pins at the normal quantiles of each task's label frequencies (one pseudo-count per label),
    times ``scale [T]`` (the prior's and the noise's standard deviation): ``[T, n_ranks-1]``."""
    counts = torch.zeros(labels.shape[0], n_ranks, dtype=scale.dtype, device=labels.device)
    counts.scatter_add_(1, labels.clamp(0, n_ranks - 1), valid.to(scale.dtype))
    cumulative = torch.cumsum(counts + 1.0, 1)[:, :-1] / (counts.sum(1, keepdim=True) + n_ranks)
    return torch.special.ndtri(cumulative) * scale[:, None]


def fit_thresholds(
    mean: Tensor, var: Tensor, labels: Tensor, valid: Tensor, thresholds: Tensor, sigma: Tensor,
    *, steps: int = 25, fit_sigma: bool = True,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """The M-step for each task's pins and noise: maximize :func:`expected_log_likelihood` under the
    posterior marginals ``N(mean, var)`` (the paper's ``theta_j`` update), all tasks in one L-BFGS run
    (their objectives are separate, so the sum's optimum is each one's). Pins stay ordered: they
    are ``b_1`` and log-gaps. A task with no valid label keeps its pins (zero gradient).

    Returns ``(thresholds [T, r-1], sigma [T])``.
    """
    first = thresholds[:, :1].detach().clone().requires_grad_(True)
    gaps = torch.log(torch.diff(thresholds, dim=1).clamp_min(1e-6)).detach().clone().requires_grad_(True)
    log_sigma = torch.log(sigma).detach().clone().requires_grad_(fit_sigma)
    mean, var = mean.detach(), var.detach()
    parameters = [first, gaps] + ([log_sigma] if fit_sigma else [])
    optimizer = torch.optim.LBFGS(parameters, max_iter=steps, line_search_fn="strong_wolfe")

    def pins() -> Tensor:
        return torch.cat([first, first + torch.cumsum(torch.exp(gaps), 1)], 1)

    def closure() -> Tensor:
        optimizer.zero_grad()
        loss = -expected_log_likelihood(mean, var, labels, valid, pins(), torch.exp(log_sigma)).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        new_pins, new_sigma = pins(), torch.exp(log_sigma).clamp(1e-3, 1e3)
    good = torch.isfinite(new_pins).all(1) & torch.isfinite(new_sigma)  # never a NaN: keep the old ones
    return torch.where(good[:, None], new_pins, thresholds), torch.where(good, new_sigma, sigma)


# -- Gaussian sites and the posterior -----------------------------------------------------------------


def check_kernel(kernel: Tensor, *, what: str = "kernel") -> tuple[Tensor, float]:
    """A covariance matrix ``[n, n]`` made safe to use: float64, symmetrized, finite, and positive
    semi-definite up to rounding. A smallest eigenvalue in ``[-KERNEL_TOLERANCE * largest, 0]`` (a
    float32 Gram matrix, a low-rank one) is lifted by adding ``|smallest| + 1e-10 * largest`` to the
    diagonal (the documented jitter, returned); a more negative one is refused with
    :class:`IndefiniteKernelError`, naming it.

    Example:
        >>> k, jitter = check_kernel(torch.tensor([[1.0, 1.0], [1.0, 1.0]]))   # rank 1: lifted
        >>> bool(torch.linalg.eigvalsh(k).min() > 0), jitter > 0
        (True, True)
    """
    kernel = kernel.to(torch.float64)
    if kernel.ndim != 2 or kernel.shape[0] != kernel.shape[1]:
        raise IndefiniteKernelError(f"{what} must be a square matrix, got shape {tuple(kernel.shape)}")
    if not torch.isfinite(kernel).all():
        raise IndefiniteKernelError(f"{what} has NaN or infinite entries")
    kernel = 0.5 * (kernel + kernel.T)
    if kernel.shape[0] == 0:
        return kernel, 0.0
    eigenvalues = torch.linalg.eigvalsh(kernel)
    smallest, largest = eigenvalues[0].item(), max(eigenvalues[-1].item(), 0.0)
    if smallest < -KERNEL_TOLERANCE * max(largest, 1e-300):
        raise IndefiniteKernelError(
            f"{what} is not positive semi-definite: smallest eigenvalue {smallest:.3g} against largest "
            f"{largest:.3g} (more than rounding; tolerance {KERNEL_TOLERANCE:g} x largest)"
        )
    jitter = 0.0
    if smallest <= 1e-10 * largest:
        jitter = abs(min(smallest, 0.0)) + 1e-10 * max(largest, 1e-300)
        kernel = kernel + jitter * torch.eye(kernel.shape[0], dtype=kernel.dtype, device=kernel.device)
    return kernel, jitter


@dataclass
class TaskPosterior:
    """The Gaussian posterior of every task on its observed slots (all ``[T, p]`` / ``[T, p, p]``).

    ``mean``, ``var``: marginals; ``alpha``: ``mean = prior_mean + K alpha`` (and ``alpha`` is the
    weight vector for any other item: ``f(x) = h(x) + k(x)^T alpha``); ``chol``: Cholesky of
    ``B = I + S^1/2 K S^1/2``; ``root``: ``S^1/2`` (the square root of the site precisions).
    """

    mean: Tensor
    var: Tensor
    alpha: Tensor
    chol: Tensor
    root: Tensor

    def precision_correction(self) -> Tensor:
        """``W = S^1/2 B^-1 S^1/2`` ``[T, p, p]``: the posterior covariance is ``K - K W K``."""
        inverse = torch.cholesky_inverse(self.chol)
        return self.root[..., :, None] * inverse * self.root[..., None, :]

    def predict(self, cross: Tensor, prior_mean: Tensor, prior_var: Tensor) -> tuple[Tensor, Tensor]:
        """Latent mean and variance at other items: ``cross [T, q, p]`` = ``k(x*, x_obs)``,
        ``prior_mean [T, q]``, ``prior_var [T, q]`` = ``k(x*, x*)`` -> ``([T, q], [T, q])``."""
        mean = prior_mean + (cross @ self.alpha[..., None])[..., 0]
        v = torch.linalg.solve_triangular(self.chol, self.root[..., :, None] * cross.transpose(-1, -2), upper=False)
        return mean, (prior_var - (v**2).sum(-2)).clamp_min(0.0)


def site_posterior(kernel: Tensor, prior_mean: Tensor, tau: Tensor, nu: Tensor) -> TaskPosterior:
    """Posterior ``N(mu, C)`` of ``N(f; prior_mean, kernel)`` times Gaussian sites ``(tau, nu)``.

    Args:
        kernel: ``[T, p, p]`` prior covariance on each task's slots (padded slots: any PSD block,
            e.g. the identity). prior_mean: ``[T, p]``. tau: site precisions ``[T, p]`` (>= 0;
            0 for padded slots and unobserved items). nu: site natural means ``[T, p]`` (0 where tau is).
    """
    root = tau.clamp_min(0.0).sqrt()
    eye = torch.eye(kernel.shape[-1], dtype=kernel.dtype, device=kernel.device)
    chol, _ = cholesky_jitter(eye + root[..., :, None] * kernel * root[..., None, :], name="B = I + S^1/2 K S^1/2")
    b = nu - tau * prior_mean
    kb = (kernel @ b[..., None])[..., 0]
    alpha = b - root * torch.cholesky_solve((root * kb)[..., None], chol)[..., 0]
    mean = prior_mean + (kernel @ alpha[..., None])[..., 0]
    v = torch.linalg.solve_triangular(chol, root[..., :, None] * kernel, upper=False)
    var = (kernel.diagonal(dim1=-2, dim2=-1) - (v**2).sum(-2)).clamp_min(1e-12)
    return TaskPosterior(mean, var, alpha, chol, root)


def gaussian_sites(targets: Tensor, valid: Tensor, noise_var: Tensor) -> tuple[Tensor, Tensor]:
    """The exact sites of the Gaussian likelihood ``N(y; f, sigma^2)`` (GPR): ``tau = 1/sigma^2``,
    ``nu = y / sigma^2`` on valid slots, 0 elsewhere. ``targets [T, p]``, ``noise_var [T]``."""
    tau = torch.where(valid, 1.0 / noise_var[:, None], torch.zeros_like(targets))
    return tau, tau * torch.where(valid, targets, torch.zeros_like(targets))


# -- EP and Laplace for the ordinal likelihood --------------------------------------------------------


@dataclass
class OrdinalFit:
    """An approximate posterior and the sites that make it (reusable as a warm start)."""

    posterior: TaskPosterior
    tau: Tensor
    nu: Tensor
    iterations: int
    converged: bool


def ep_ordinal(
    kernel: Tensor, prior_mean: Tensor, labels: Tensor, valid: Tensor, thresholds: Tensor, sigma: Tensor,
    *, sites: tuple[Tensor, Tensor] | None = None, max_iter: int = 40, damping: float = 0.7,
    tol: float = 1e-4,
) -> OrdinalFit:  # fmt: skip
    """Expectation propagation for the ordinal probit (the paper's E-step, Appendix), all sites of
    all tasks updated in parallel each sweep, damped: ``site = damping * new + (1 - damping) * old``.

    Each sweep: the cavity ``N(mu_c, s_c^2)`` of every site from the current marginals, the tilted
    moments by :func:`ordinal_moments`, the new site ``tau = -g2 / (1 + g2 s_c^2)``, ``nu = (g1 -
    mu_c g2) / (1 + g2 s_c^2)`` (``g1, g2`` the derivatives of ``log Z``), then the posterior again.
    The probit's log-concavity keeps every ``tau >= 0``. Stops when no site moves more than ``tol``
    (relative) or after ``max_iter`` sweeps. ``sites`` warm-starts from an earlier fit's ``(tau, nu)``.

    Args: as :func:`site_posterior`, with ``labels [T, p]`` (long), ``valid [T, p]`` (bool),
    ``thresholds [T, r-1]``, ``sigma [T]``.
    """
    zeros = torch.zeros_like(prior_mean)
    tau, nu = (zeros, zeros) if sites is None else sites
    posterior = site_posterior(kernel, prior_mean, tau, nu)
    converged, sweep = False, 0
    for sweep in range(1, max_iter + 1):  # noqa: B007 (reported)
        cavity_tau = (1.0 / posterior.var - tau).clamp_min(1e-10)
        cavity_var = 1.0 / cavity_tau
        cavity_mean = (posterior.mean / posterior.var - nu) * cavity_var
        _, g1, g2 = ordinal_moments(cavity_mean, cavity_var, labels, thresholds, sigma)
        denominator = 1.0 + g2 * cavity_var  # in (0, 1]: the tilted variance over the cavity's
        new_tau = (-g2 / denominator).clamp_min(0.0)
        new_nu = (g1 - cavity_mean * g2) / denominator
        new_tau = torch.where(valid, new_tau, zeros)
        new_nu = torch.where(valid, new_nu, zeros)
        change = ((new_tau - tau).abs() / (tau.abs() + 1e-3)).amax().item()
        tau = damping * new_tau + (1 - damping) * tau
        nu = damping * new_nu + (1 - damping) * nu
        posterior = site_posterior(kernel, prior_mean, tau, nu)
        if change < tol:
            converged = True
            break
    return OrdinalFit(posterior, tau, nu, sweep, converged)


def laplace_objective(
    f: Tensor, alpha: Tensor, prior_mean: Tensor, labels: Tensor, valid: Tensor, thresholds: Tensor, sigma: Tensor
) -> Tensor:
    """``Psi(f) = sum_i log P(y_i | f_i) - 1/2 (f - h)^T K^-1 (f - h)`` per task ``[T]``, with
    ``K^-1 (f - h) = alpha`` (so no inverse is formed)."""
    loglik = torch.where(valid, ordinal_log_likelihood(f, labels, thresholds, sigma), torch.zeros_like(f))
    return loglik.sum(-1) - 0.5 * (alpha * (f - prior_mean)).sum(-1)


def laplace_ordinal(
    kernel: Tensor, prior_mean: Tensor, labels: Tensor, valid: Tensor, thresholds: Tensor, sigma: Tensor,
    *, max_iter: int = 50, tol: float = 1e-8,
) -> OrdinalFit:  # fmt: skip
    """Laplace's approximation for the ordinal probit: Newton's method for the posterior mode
    ``f_hat = argmax Psi(f)`` (Rasmussen & Williams, Algorithm 3.1, with a prior mean and a halving
    line search per task), then the Gaussian ``N(f_hat, (K^-1 + W)^-1)``, ``W = -d^2 log P / df^2``,
    expressed as sites ``tau = W``, ``nu = W f_hat + d log P / df``."""
    zeros = torch.zeros_like(prior_mean)
    alpha = zeros
    f = prior_mean.clone()
    value = laplace_objective(f, alpha, prior_mean, labels, valid, thresholds, sigma)
    converged, iteration = False, 0
    for iteration in range(1, max_iter + 1):  # noqa: B007 (reported)
        _, g, g2 = ordinal_moments(f, zeros, labels, thresholds, sigma)
        w = torch.where(valid, -g2, zeros)
        g = torch.where(valid, g, zeros)
        root = w.sqrt()
        eye = torch.eye(kernel.shape[-1], dtype=kernel.dtype, device=kernel.device)
        chol, _ = cholesky_jitter(eye + root[..., :, None] * kernel * root[..., None, :], name="B = I + W^1/2 K W^1/2")
        b = w * (f - prior_mean) + g
        kb = (kernel @ b[..., None])[..., 0]
        target = b - root * torch.cholesky_solve((root * kb)[..., None], chol)[..., 0]
        step = torch.ones_like(value)
        for _ in range(20):  # halve the step of each task whose objective went down
            candidate = alpha + step[:, None] * (target - alpha)
            f_new = prior_mean + (kernel @ candidate[..., None])[..., 0]
            new_value = laplace_objective(f_new, candidate, prior_mean, labels, valid, thresholds, sigma)
            worse = ~(new_value >= value - 1e-12 * value.abs())
            if not worse.any():
                break
            step = torch.where(worse, step / 2, step)
        gain = (new_value - value).abs().amax().item()
        moved = (f_new - f).abs().amax().item()
        alpha, f, value = candidate, f_new, new_value
        if gain < tol and moved < math.sqrt(tol):
            converged = True
            break
    _, g, g2 = ordinal_moments(f, zeros, labels, thresholds, sigma)
    tau = torch.where(valid, -g2, zeros)
    nu = torch.where(valid, tau * f + g, zeros)
    return OrdinalFit(site_posterior(kernel, prior_mean, tau, nu), tau, nu, iteration, converged)


def predict_ordinal(mean: Tensor, var: Tensor, thresholds: Tensor, sigma: Tensor) -> Tensor:
    """The most probable label under the predictive ``P(y) = Phi((b_{y+1} - mu) / s) - Phi((b_y - mu)
    / s)``, ``s^2 = sigma^2 + var`` (Chu & Ghahramani's prediction): ``mean, var [T, q]`` -> ``[T, q]`` long."""
    n_ranks = thresholds.shape[1] + 1
    T, q = mean.shape
    labels = torch.arange(n_ranks, device=mean.device).expand(T, q, n_ranks).reshape(T, q * n_ranks)
    expand = lambda x: x[..., None].expand(T, q, n_ranks).reshape(T, q * n_ranks)  # noqa: E731
    log_z, _, _ = ordinal_moments(expand(mean), expand(var), labels, thresholds, sigma)
    return log_z.reshape(T, q, n_ranks).argmax(-1)
