"""GP ordinal regression (GPOR; Chu & Ghahramani 2005, Yu, Yu & Tresp 2005): the pins' M-step,
the kernel check and the prediction, for many tasks at once.

One *task* (a user) has a latent function ``f`` over items with a Gaussian prior ``N(h, Sigma)`` and
labels on some of the items. Tasks are batched: a task's observed items are gathered into
``p`` padded slots, so that every tensor is ``[T, p]`` or ``[T, p, p]`` and the whole batch is one
tensor program. A padded slot has ``valid = False``: no likelihood, no influence.

The likelihood is ``rankers.gp.likelihoods.OrdinalLikelihood`` (pins ``b_0 = -inf < b_1 < ... <
b_{r-1} < b_r = +inf``, noise ``sigma``, labels 0-based); its posterior is the family's one EP or
Laplace (``rankers.gp.inference``); the Gaussian likelihood of GPR has exact sites
(``rankers.gp.likelihoods.gaussian_sites``).

Example:
    >>> import torch
    >>> from rankers.gp.inference import ep
    >>> from rankers.gp.likelihoods import OrdinalLikelihood
    >>> kernel = torch.eye(3, dtype=torch.float64)[None]           # one task, 3 items, K = I
    >>> labels = torch.tensor([[0, 2, 1]]); valid = torch.ones(1, 3, dtype=torch.bool)
    >>> pins = torch.tensor([[-0.5, 0.5]], dtype=torch.float64); sigma = torch.ones(1, dtype=torch.float64)
    >>> post = ep(kernel, OrdinalLikelihood(labels, pins, sigma), valid)
    >>> [round(v, 3) for v in post.mean[0].tolist()]   # the label-0 item low, the label-2 item high
    [-0.732, 0.732, 0.0]
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor

from rankers.gp.kernels import NotPositiveDefiniteError
from rankers.gp.likelihoods import OrdinalLikelihood

log = logging.getLogger(__name__)

# a kernel whose smallest eigenvalue is below -KERNEL_TOLERANCE * (its largest) is refused; above
# that, a small negative eigenvalue is rounding (a float32 Gram matrix) and is lifted by jitter
KERNEL_TOLERANCE = 1e-3


# a kernel (covariance) matrix that is not positive semi-definite beyond rounding: the family's one
# numerical error type, under the name this module's callers know
IndefiniteKernelError = NotPositiveDefiniteError


def expected_log_likelihood(
    mean: Tensor, var: Tensor, labels: Tensor, valid: Tensor, thresholds: Tensor, sigma: Tensor
) -> Tensor:
    """``sum_i E_{f_i ~ N(mean_i, var_i)} log P(y_i | f_i)`` per task ``[T]`` (Gauss-Hermite quadrature):
    the part of the EM bound (2) that the pins and ``sigma`` change. Padded slots count 0."""
    values = OrdinalLikelihood(labels, thresholds, sigma).expected_log_prob(mean, var)
    return torch.where(valid, values, torch.zeros_like(mean)).sum(-1)


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


# -- the kernel ------------------------------------------------------------------------------------------


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


def predict_ordinal(mean: Tensor, var: Tensor, thresholds: Tensor, sigma: Tensor) -> Tensor:
    """The most probable label under the predictive ``P(y) = Phi((b_{y+1} - mu) / s) - Phi((b_y - mu)
    / s)``, ``s^2 = sigma^2 + var`` (Chu & Ghahramani's prediction): ``mean, var [T, q]`` -> ``[T, q]`` long."""
    n_ranks = thresholds.shape[1] + 1
    T, q = mean.shape
    labels = torch.arange(n_ranks, device=mean.device).expand(T, q, n_ranks).reshape(T, q * n_ranks)
    expand = lambda x: x[..., None].expand(T, q, n_ranks).reshape(T, q * n_ranks)  # noqa: E731
    log_z, _, _ = OrdinalLikelihood(labels, thresholds, sigma).tilted_moments(expand(mean), expand(var))
    return log_z.reshape(T, q, n_ranks).argmax(-1)
