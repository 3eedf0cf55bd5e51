"""Likelihood objects of the GP family: what ``rankers.gp.inference.laplace`` and ``.ep`` consume.

As in GPyTorch, the approximation is written once and a likelihood supplies the per-site terms. A
likelihood here is bound to its observations (the labels or the pairs' orientation) and factorizes
over *sites*, one latent value each, batched ``[T, n]`` (``T`` tasks, ``n`` sites). It supplies

- ``log_prob(f)``: ``log p(y_i | f_i)`` ``[T, n]``;
- ``derivatives(f)``: ``(log p, d log p / df, d^2 log p / df^2)``, the Laplace approximation's
  gradient and (diagonal) Hessian;
- ``tilted_moments(mean, var)``: ``(log Z, d log Z / d mean, d^2 log Z / d mean^2)`` of
  ``Z = int p(y | f) N(f; mean, var) df``, EP's moment matching (the tilted distribution's mean is
  ``mean + var * d1`` and its variance ``var + var^2 * d2``);
- ``expected_log_prob(mean, var)``: ``E_{N(mean, var)} log p(y | f)`` (Gauss-Hermite), an EM bound's term.

Both likelihoods here are probit (a Gaussian CDF of the latent value), for which ``Z`` has a closed
form and the Laplace terms are its ``var = 0`` case:

- :class:`ProbitPreference`: ``P(v > u | g) = Phi(g / (sqrt(2) sigma))`` on the latent difference
  ``g = f(v) - f(u)`` (Chu & Ghahramani 2005, preference learning, eq. 6);
- :class:`OrdinalLikelihood`: ``P(y | f) = Phi((b_{y+1} - f) / sigma) - Phi((b_y - f) / sigma)``
  (Chu & Ghahramani 2005, GP ordinal regression; Yu, Yu & Tresp 2005), labels 0-based.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
SQRT2 = math.sqrt(2.0)
GAUSS_HERMITE_NODES = 20


def inverse_mills(z: Tensor) -> Tensor:
    """``N(z) / Phi(z)`` computed in log space (finite and positive for every finite ``z``)."""
    return torch.exp(-0.5 * z * z - LOG_SQRT_2PI - torch.special.log_ndtr(z))


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


def _per_task(value: Tensor | float, like: Tensor) -> Tensor:
    """A scalar or a ``[T]`` parameter as a tensor broadcasting over the sites: ``[]`` or ``[T, 1]``."""
    value = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    return value[..., None] if value.dim() > 0 else value


class Likelihood:
    """A factorizing likelihood bound to its observations (see the module docstring)."""

    def tilted_moments(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(log Z, d log Z / d mean, d^2 log Z / d mean^2)``, each ``[T, n]``, for cavities ``N(mean, var)``."""
        raise NotImplementedError

    def site(self, k: int) -> Likelihood:
        """Site ``k`` alone, a likelihood on ``[T, 1]`` (EP's sequential schedule)."""
        raise NotImplementedError

    def derivatives(self, f: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(log p, d log p / df, d^2 log p / df^2)`` at ``f [T, n]``: for a probit likelihood the
        tilted moments of a point mass (``var = 0``)."""
        return self.tilted_moments(f, torch.zeros_like(f))

    def log_prob(self, f: Tensor) -> Tensor:
        """``log p(y_i | f_i)`` ``[T, n]``."""
        return self.derivatives(f)[0]

    def expected_log_prob(self, mean: Tensor, var: Tensor, *, nodes: int = GAUSS_HERMITE_NODES) -> Tensor:
        """``E_{f ~ N(mean, var)} log p(y | f)`` per site ``[T, n]``, by ``nodes``-point Gauss-Hermite quadrature."""
        x, w = np.polynomial.hermite.hermgauss(nodes)
        x = torch.as_tensor(x, dtype=mean.dtype, device=mean.device)
        w = torch.as_tensor(w / math.sqrt(math.pi), dtype=mean.dtype, device=mean.device)
        f = mean[..., None] + torch.sqrt(2 * var.clamp_min(0))[..., None] * x  # [T, n, Q]
        values = torch.stack([self.log_prob(f[..., q]) for q in range(nodes)], -1)
        return (values * w).sum(-1)


class ProbitPreference(Likelihood):
    """``P(v_k > u_k | g_k) = Phi(g_k / s)``, ``s = sqrt(2) sigma``, on the latent differences ``g``.

    Args:
        sigma: the noise of eq. (6), a float or ``[T]`` (one per task).
    """

    def __init__(self, sigma: Tensor | float) -> None:
        self.sigma = sigma

    def site(self, k: int) -> ProbitPreference:
        return self  # every site has the same form

    def tilted_moments(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        s = _per_task(self.sigma, mean) * SQRT2
        scale2 = s * s + var
        scale = scale2.sqrt()
        z = mean / scale
        r = inverse_mills(z)
        return torch.special.log_ndtr(z), r / scale, -r * (r + z) / scale2


class OrdinalLikelihood(Likelihood):
    """The ordinal probit ``P(y | f) = Phi((b_{y+1} - f) / sigma) - Phi((b_y - f) / sigma)``.

    Args:
        labels: 0-based labels ``[T, n]`` (long, ``0..r-1``; a padded site's label is never used).
        thresholds: the pins ``b_1 < ... < b_{r-1}`` ``[T, r-1]`` (``b_0 = -inf``, ``b_r = +inf``).
        sigma: noise ``[T]`` (> 0).

    ``Z = Phi(z_1) - Phi(z_2)``, ``z_k = (b - mean) / sqrt(sigma^2 + var)``; its second derivative is
    < 0 (log-concave), and never NaN at an infinite pin.
    """

    def __init__(self, labels: Tensor, thresholds: Tensor, sigma: Tensor) -> None:
        self.labels, self.thresholds, self.sigma = labels, thresholds, sigma

    def site(self, k: int) -> OrdinalLikelihood:
        return OrdinalLikelihood(self.labels[:, k : k + 1], self.thresholds, self.sigma)

    def edges(self) -> tuple[Tensor, Tensor]:
        """The pins around each label: ``(upper, lower)`` ``[T, n]``."""
        infinity = torch.full_like(self.thresholds[:, :1], math.inf)
        edges = torch.cat([-infinity, self.thresholds, infinity], dim=1)  # [T, r+1]: b_0 .. b_r
        labels = self.labels.clamp(0, self.thresholds.shape[1])  # a padded slot's label: keep it in range
        return edges.gather(1, labels + 1), edges.gather(1, labels)

    def log_prob(self, f: Tensor) -> Tensor:
        upper, lower = self.edges()
        scale = self.sigma[:, None]
        return log_ndtr_diff(_standardize(upper, f, scale), _standardize(lower, f, scale))

    def tilted_moments(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        upper, lower = self.edges()
        scale = torch.sqrt(self.sigma[:, None] ** 2 + var)
        z_upper, z_lower = _standardize(upper, mean, scale), _standardize(lower, mean, scale)
        log_z = log_ndtr_diff(z_upper, z_lower)
        zr_upper, ratio_upper = _density_ratio(z_upper, log_z)
        zr_lower, ratio_lower = _density_ratio(z_lower, log_z)
        first = (ratio_lower - ratio_upper) / scale
        second = (zr_lower - zr_upper) / scale**2 - first**2
        return log_z, first, second

    def expected_log_prob(self, mean: Tensor, var: Tensor, *, nodes: int = GAUSS_HERMITE_NODES) -> Tensor:
        # the labels and pins gathered once for all nodes (one [T, n * Q] call instead of Q)
        x, w = np.polynomial.hermite.hermgauss(nodes)
        x = torch.as_tensor(x, dtype=mean.dtype, device=mean.device)
        w = torch.as_tensor(w / math.sqrt(math.pi), dtype=mean.dtype, device=mean.device)
        f = mean[..., None] + torch.sqrt(2 * var.clamp_min(0))[..., None] * x  # [T, n, Q]
        T, n, Q = f.shape
        wide = OrdinalLikelihood(self.labels[..., None].expand(T, n, Q).reshape(T, n * Q), self.thresholds, self.sigma)
        return (wide.log_prob(f.reshape(T, n * Q)).reshape(T, n, Q) * w).sum(-1)


def _density_ratio(z: Tensor, log_z: Tensor) -> tuple[Tensor, Tensor]:
    """``(z N(z) / Z, N(z) / Z)``, both 0 at an infinite pin, with no inf reaching a value or a gradient."""
    finite = torch.isfinite(z)
    z = torch.where(finite, z, torch.zeros_like(z))
    ratio = torch.where(finite, torch.exp(-0.5 * z * z - LOG_SQRT_2PI - log_z), torch.zeros_like(z))
    return z * ratio, ratio


def _standardize(edge: Tensor, f: Tensor, scale: Tensor) -> Tensor:
    """``(edge - f) / scale``, with an infinite pin kept out of the arithmetic (no inf * 0 in a gradient)."""
    infinite = torch.isinf(edge)
    z = (torch.where(infinite, torch.zeros_like(edge), edge) - f) / scale
    return torch.where(infinite, edge, z)


def gaussian_sites(targets: Tensor, valid: Tensor, noise_var: Tensor) -> tuple[Tensor, Tensor]:
    """The exact sites of the Gaussian likelihood ``N(y; f, sigma^2)`` (GPR): ``tau = 1/sigma^2``,
    ``nu = y / sigma^2`` on valid slots, 0 elsewhere. ``targets [T, p]``, ``noise_var [T]``."""
    tau = torch.where(valid, 1.0 / noise_var[:, None], torch.zeros_like(targets))
    return tau, tau * torch.where(valid, targets, torch.zeros_like(targets))
