"""The GP family's one Laplace approximation and one expectation propagation, for any likelihood.

A batch of ``T`` tasks, each a latent ``f [n]`` with the Gaussian prior ``N(m, K)`` (``kernel [T|1, n, n]``,
``prior_mean [T, n]`` or None for 0) and a factorizing likelihood (``rankers.gp.likelihoods``) on
the sites where ``mask [T, n]`` is True (a padded site has no likelihood: its site precision is 0,
so it influences nothing and whatever it holds never reaches a value).

Both approximations end as Gaussian *sites* ``t_i(f_i) ~ exp(-tau_i f_i^2 / 2 + nu_i f_i)`` and the
posterior ``N(mu, C)``, ``C = (K^-1 + diag(tau))^-1``, computed stably from ``B = I + S^1/2 K S^1/2``
(``S = diag(tau)``, eigenvalues >= 1; Rasmussen & Williams 2006, eqs. 3.26-3.29 and 3.67): no ``K^-1``
is ever formed, so a singular prior (a pair Gram of dependent pairs) is fine.

- :func:`laplace`: Newton's method for the mode of ``Psi(f) = sum log p(y | f) - 1/2 (f - m)^T K^-1 (f - m)``
  (R&W Algorithm 3.1, with a prior mean and a per-task halving line search), then the sites
  ``tau = W = -d^2 log p / df^2`` and ``nu = W f_hat + d log p / df`` (whose posterior mean is the mode);
  ``log_evidence`` is ``Psi(f_hat) - 1/2 log |B|``. :func:`laplace_log_evidence` is the same number,
  differentiable in the kernel and the likelihood's parameters.
- :func:`ep`: expectation propagation (R&W Algorithm 3.5): each site's cavity, the tilted moments of
  cavity times likelihood, the site that matches them. ``schedule="sequential"`` updates one site at
  a time (all tasks together) with a rank-one update of the posterior; ``"parallel"`` updates every
  site from the same posterior, damped (``site = damping * new + (1 - damping) * old``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rankers.gp.kernels import cholesky_jitter
from rankers.gp.likelihoods import Likelihood

SCHEDULES = ("sequential", "parallel")


@dataclass
class GaussianPosterior:
    """A Gaussian posterior of ``T`` tasks on their ``n`` sites, from sites ``(tau, nu)``.

    ``mean``, ``var`` ``[T, n]``: marginals; ``alpha [T, n]``: ``mean = m + K alpha`` (and for any other
    point ``f(x) = m(x) + k(x, X) alpha``); ``tau``, ``nu`` ``[T, n]``: the site parameters (Laplace: ``tau = W``);
    ``chol [T, n, n]``: Cholesky of ``B = I + S^1/2 K S^1/2``; ``iterations``: Newton steps or EP sweeps;
    ``converged``; ``psi [T]`` and ``log_evidence [T]``: the log joint at the mode and the Laplace
    evidence (None under EP).
    """

    mean: Tensor
    var: Tensor
    alpha: Tensor
    tau: Tensor
    nu: Tensor
    chol: Tensor
    iterations: int = 0
    converged: bool = True
    psi: Tensor | None = None
    log_evidence: Tensor | None = None

    @property
    def root(self) -> Tensor:
        """``S^1/2`` ``[T, n]``."""
        return self.tau.clamp_min(0.0).sqrt()

    @property
    def sites(self) -> tuple[Tensor, Tensor]:
        """``(tau, nu)``: a warm start for :func:`ep`."""
        return self.tau, self.nu

    def precision_correction(self) -> Tensor:
        """``W = S^1/2 B^-1 S^1/2`` ``[T, n, n]``: the posterior covariance is ``K - K W K``."""
        inverse = torch.cholesky_inverse(self.chol)
        return self.root[..., :, None] * inverse * self.root[..., None, :]

    def predict(self, cross: Tensor, prior_mean: Tensor, prior_var: Tensor) -> tuple[Tensor, Tensor]:
        """Latent mean and variance at other points: ``cross [T, q, n]`` = ``k(x*, X)``,
        ``prior_mean [T, q]``, ``prior_var [T, q]`` = ``k(x*, x*)`` -> ``([T, q], [T, q])``."""
        mean = prior_mean + (cross @ self.alpha[..., None])[..., 0]
        v = torch.linalg.solve_triangular(self.chol, self.root[..., :, None] * cross.transpose(-1, -2), upper=False)
        return mean, (prior_var - (v**2).sum(-2)).clamp_min(0.0)


def _b_factor(kernel: Tensor, root: Tensor) -> Tensor:
    """Cholesky factor of ``B = I + S^1/2 K S^1/2`` ``[T, n, n]`` (the family's jittered Cholesky)."""
    eye = torch.eye(kernel.shape[-1], dtype=kernel.dtype, device=kernel.device)
    chol, _ = cholesky_jitter(eye + root[..., :, None] * kernel * root[..., None, :], name="B = I + S^1/2 K S^1/2")
    return chol


def _solve_alpha(kernel: Tensor, chol: Tensor, root: Tensor, b: Tensor) -> Tensor:
    """``(I + S K)^-1 b = b - S^1/2 B^-1 S^1/2 K b`` ``[T, n]`` (Woodbury; R&W Algorithm 3.1, lines 6-7)."""
    kb = (kernel @ b[..., None])[..., 0]
    return b - root * torch.cholesky_solve((root * kb)[..., None], chol)[..., 0]


def site_posterior(kernel: Tensor, prior_mean: Tensor | None, tau: Tensor, nu: Tensor) -> GaussianPosterior:
    """Posterior ``N(mu, C)`` of the prior ``N(prior_mean, kernel)`` times Gaussian sites ``(tau, nu)``.

    Args:
        kernel: ``[T|1, n, n]`` (padded sites: any PSD block, e.g. the identity). prior_mean: ``[T, n]``
            or None (0). tau: site precisions ``[T, n]`` (>= 0; 0 at padded sites). nu: ``[T, n]``.
    """
    prior_mean = torch.zeros_like(nu) if prior_mean is None else prior_mean
    root = tau.clamp_min(0.0).sqrt()
    chol = _b_factor(kernel, root)
    alpha = _solve_alpha(kernel, chol, root, nu - tau * prior_mean)
    mean = prior_mean + (kernel @ alpha[..., None])[..., 0]
    v = torch.linalg.solve_triangular(chol, root[..., :, None] * kernel, upper=False)
    var = (kernel.diagonal(dim1=-2, dim2=-1) - (v**2).sum(-2)).clamp_min(torch.finfo(kernel.dtype).tiny)
    return GaussianPosterior(mean, var, alpha, tau, nu, chol)


# -- Laplace -----------------------------------------------------------------------------------------------
def _psi(likelihood: Likelihood, f: Tensor, alpha: Tensor, prior_mean: Tensor, mask: Tensor) -> Tensor:
    """``Psi(f) = sum log p(y | f) - 1/2 alpha . (f - m)`` ``[T]`` with ``K^-1 (f - m) = alpha``."""
    log_p = torch.where(mask, likelihood.log_prob(f), torch.zeros_like(f))
    return log_p.sum(-1) - 0.5 * (alpha * (f - prior_mean)).sum(-1)


def _newton_target(kernel: Tensor, likelihood: Likelihood, f: Tensor, prior_mean: Tensor, mask: Tensor):
    """R&W Algorithm 3.1, lines 4-7 from ``f``: the full Newton step's ``alpha``; ``W``, ``d log p``, ``chol(B)``."""
    _, grad, second = likelihood.derivatives(f)
    w = torch.where(mask, -second, torch.zeros_like(f)).clamp_min(0.0)  # log-concave: -d2 >= 0 up to rounding
    grad = torch.where(mask, grad, torch.zeros_like(f))
    root = w.sqrt()
    chol = _b_factor(kernel, root)
    return _solve_alpha(kernel, chol, root, w * (f - prior_mean) + grad), w, grad, chol


def laplace(
    kernel: Tensor,
    likelihood: Likelihood,
    mask: Tensor,
    prior_mean: Tensor | None = None,
    *,
    alpha0: Tensor | None = None,
    max_iter: int = 100,
    tol: float = 1e-9,
) -> GaussianPosterior:
    """Laplace's approximation of every task's posterior (see the module docstring).

    Args:
        kernel: ``[T|1, n, n]``; likelihood: any ``rankers.gp.likelihoods.Likelihood`` on ``[T, n]``;
        mask: ``[T, n]`` bool, the observed sites; prior_mean: ``[T, n]`` or None (0).
        alpha0: a warm start ``[T, n]`` (``f = m + K alpha0``; e.g. a previous fit with a site appended as 0).
        max_iter, tol: stop when every task's ``Psi`` changes by at most ``tol * (1 + |Psi|)`` and no latent
            value by more than ``sqrt(tol) * (1 + |f|)``.

    ``Psi`` is concave for a log-concave likelihood (both here), so Newton converges; a step that
    lowers a task's ``Psi`` is halved (per task, up to 30 times) until it does not.
    """
    mask = mask.bool()
    prior_mean = torch.zeros(mask.shape, dtype=kernel.dtype, device=kernel.device) if prior_mean is None else prior_mean
    alpha = torch.zeros_like(prior_mean) if alpha0 is None else torch.where(mask, alpha0, torch.zeros_like(alpha0))
    f = prior_mean + (kernel @ alpha[..., None])[..., 0]
    value = _psi(likelihood, f, alpha, prior_mean, mask)
    converged, iteration = False, 0
    for iteration in range(1, max_iter + 1):  # noqa: B007 (reported)
        target = _newton_target(kernel, likelihood, f, prior_mean, mask)[0]
        step = torch.ones_like(value)
        for _ in range(30):  # per-task step halving; a Newton step on a concave Psi rarely needs it
            candidate = alpha + step[..., None] * (target - alpha)
            f_new = prior_mean + (kernel @ candidate[..., None])[..., 0]
            new_value = _psi(likelihood, f_new, candidate, prior_mean, mask)
            worse = ~(new_value >= value - 1e-12 * value.abs())  # NaN counts as worse
            if not bool(worse.any()):
                break
            step = torch.where(worse, 0.5 * step, step)
        small_gain = (new_value - value).abs() <= tol * (1.0 + new_value.abs())
        small_move = ((f_new - f).abs() <= tol**0.5 * (1.0 + f.abs())).all(-1)
        alpha, f, value = candidate, f_new, new_value
        if bool((small_gain & small_move).all()):
            converged = True
            break
    _, w, grad, chol = _newton_target(kernel, likelihood, f, prior_mean, mask)
    posterior = site_posterior(kernel, prior_mean, w, w * f + grad)
    posterior.iterations, posterior.converged, posterior.psi = iteration, converged, value
    posterior.log_evidence = value - chol.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    return posterior


def laplace_log_evidence(
    kernel: Tensor, likelihood: Likelihood, mask: Tensor, prior_mean: Tensor | None = None, **options
) -> Tensor:
    """The Laplace evidence ``log p(y | theta)`` ``[T]``, differentiable in ``kernel`` and the likelihood's tensors.

    The mode is found under ``no_grad``; one Newton step from it is then taken *with* autograd (a
    parameter that should get a gradient, such as the likelihood's ``sigma``, is a tensor that
    requires it). At the mode the Newton map's derivative in ``theta`` is exactly the implicit
    derivative of the mode (``-H^-1 d grad / d theta``), so the gradient of the returned value is the
    total gradient of the Laplace evidence (the mode's dependence through ``W`` in ``log |B|`` included).
    """
    mask = mask.bool()
    prior_mean = torch.zeros(mask.shape, dtype=kernel.dtype, device=kernel.device) if prior_mean is None else prior_mean
    with torch.no_grad():
        mode = laplace(kernel.detach(), likelihood, mask, prior_mean.detach(), **options)
    f0 = prior_mean.detach() + (kernel.detach() @ mode.alpha[..., None])[..., 0]
    alpha = _newton_target(kernel, likelihood, f0, prior_mean, mask)[0]
    f = prior_mean + (kernel @ alpha[..., None])[..., 0]
    psi = _psi(likelihood, f, alpha, prior_mean, mask)
    _, second = likelihood.derivatives(f)[1:]
    root = torch.where(mask, -second, torch.zeros_like(f)).clamp_min(0.0).sqrt()
    return psi - _b_factor(kernel, root).diagonal(dim1=-2, dim2=-1).log().sum(-1)


# -- expectation propagation ------------------------------------------------------------------------------
def _site_update(likelihood: Likelihood, cavity_mean: Tensor, cavity_var: Tensor, cavity_tau: Tensor, cavity_nu):
    """The site ``(tau, nu)`` whose product with the cavity has the tilted distribution's mean and variance."""
    tiny = torch.finfo(cavity_mean.dtype).tiny
    _, d1, d2 = likelihood.tilted_moments(cavity_mean, cavity_var)
    hat_mean = cavity_mean + cavity_var * d1
    # the tilted variance is below the cavity's (log-concave likelihood); the clamp guards rounding
    hat_var = torch.minimum(cavity_var + cavity_var * cavity_var * d2, cavity_var).clamp_min(tiny)
    return (1.0 / hat_var - cavity_tau).clamp_min(0.0), hat_mean / hat_var - cavity_nu


def _cavity(mean: Tensor, var: Tensor, tau: Tensor, nu: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The cavity of each site, ``(mean, var, tau, nu)``: the posterior marginal without its site.
    Its precision is held at >= eps x the marginal's (rounding only: a site never holds all of it)."""
    precision = 1.0 / var
    cavity_tau = torch.maximum(precision - tau, precision * torch.finfo(var.dtype).eps)
    cavity_nu = mean * precision - nu
    return cavity_nu / cavity_tau, 1.0 / cavity_tau, cavity_tau, cavity_nu


def ep(
    kernel: Tensor,
    likelihood: Likelihood,
    mask: Tensor,
    prior_mean: Tensor | None = None,
    *,
    sites: tuple[Tensor, Tensor] | None = None,
    schedule: str = "sequential",
    damping: float = 1.0,
    max_sweeps: int = 50,
    tol: float = 1e-8,
) -> GaussianPosterior:
    """Expectation propagation of every task's posterior (see the module docstring).

    Args:
        kernel, likelihood, mask, prior_mean: as :func:`laplace`.
        sites: a warm start ``(tau [T, n], nu [T, n])`` (e.g. a previous fit's with a site appended as 0, 0).
        schedule: ``sequential`` (one site at a time, rank-one posterior updates, the posterior recomputed
            after each sweep) or ``parallel`` (all sites from one posterior, then the posterior).
        damping: in (0, 1]; ``site = damping * new + (1 - damping) * old`` (both schedules).
        max_sweeps, tol: stop when no site's ``tau`` or ``nu`` moved by more than ``tol * (1 + max |tau|)``
            (per task) in a sweep.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"EP schedule must be one of {SCHEDULES}, got {schedule!r}")
    if not 0.0 < damping <= 1.0:
        raise ValueError(f"EP damping must be in (0, 1], got {damping}")
    mask = mask.bool()
    prior_mean = torch.zeros(mask.shape, dtype=kernel.dtype, device=kernel.device) if prior_mean is None else prior_mean
    zeros = torch.zeros_like(prior_mean)
    tau, nu = (zeros, zeros) if sites is None else (torch.where(mask, s, zeros) for s in sites)
    posterior = site_posterior(kernel, prior_mean, tau, nu)
    converged, sweep = False, 0
    for sweep in range(1, max_sweeps + 1):  # noqa: B007 (reported)
        old_tau, old_nu = tau, nu
        if schedule == "parallel":
            new_tau, new_nu = _site_update(likelihood, *_cavity(posterior.mean, posterior.var, tau, nu))
            tau = torch.where(mask, damping * new_tau + (1 - damping) * tau, zeros)
            nu = torch.where(mask, damping * new_nu + (1 - damping) * nu, zeros)
        else:
            tau, nu = _sequential_sweep(kernel, likelihood, mask, posterior, tau.clone(), nu.clone(), damping)
        posterior = site_posterior(kernel, prior_mean, tau, nu)  # recomputed stably after each sweep
        change = torch.maximum((tau - old_tau).abs().amax(-1), (nu - old_nu).abs().amax(-1))
        if bool((change <= tol * (1.0 + tau.abs().amax(-1))).all()):
            converged = True
            break
    posterior.iterations, posterior.converged = sweep, converged
    return posterior


def _sequential_sweep(
    kernel: Tensor, likelihood: Likelihood, mask: Tensor, posterior: GaussianPosterior, tau: Tensor, nu: Tensor,
    damping: float,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """One sweep over the sites in order, each from the posterior its predecessors left (R&W 3.5,
    lines 4-9): ``Sigma`` and ``mu`` move by rank-one updates, ``O(n^2)`` per site."""
    n = kernel.shape[-1]
    covariance = _covariance(kernel, posterior)
    mean = posterior.mean.clone()
    m = mask.to(kernel.dtype)
    for k in range(n):
        var_k = covariance[..., k, k]
        cavity = _cavity(mean[..., k : k + 1], var_k[..., None], tau[..., k : k + 1], nu[..., k : k + 1])
        new_tau, new_nu = _site_update(likelihood.site(k), *cavity)
        new_tau = (damping * new_tau[..., 0] + (1 - damping) * tau[..., k]) * m[..., k]
        new_nu = (damping * new_nu[..., 0] + (1 - damping) * nu[..., k]) * m[..., k]
        delta_tau, delta_nu = new_tau - tau[..., k], new_nu - nu[..., k]
        tau[..., k], nu[..., k] = new_tau, new_nu
        column = covariance[..., :, k]
        denominator = 1.0 + delta_tau * var_k
        # Sigma_new = Sigma - d/(1 + d Sigma_kk) s s^T; mu_new = mu + s (d_nu - d mu_k) / (1 + d Sigma_kk)
        mean = mean + column * ((delta_nu - delta_tau * mean[..., k]) / denominator)[..., None]
        outer = column[..., :, None] * column[..., None, :]
        covariance = covariance - (delta_tau / denominator)[..., None, None] * outer
    return tau, nu


def _covariance(kernel: Tensor, posterior: GaussianPosterior) -> Tensor:
    """The posterior covariance ``K - K S^1/2 B^-1 S^1/2 K`` ``[T, n, n]``."""
    v = torch.linalg.solve_triangular(posterior.chol, posterior.root[..., :, None] * kernel, upper=False)
    return (kernel - v.transpose(-1, -2) @ v).expand(*posterior.mean.shape[:-1], *kernel.shape[-2:])
