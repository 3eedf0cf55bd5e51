"""Collaborative ordinal regression (Yu, Yu & Tresp, NIPS 2005): GPR, CGPR, GPOR and CGPOR.

The paper's Tables 1 and 2 are ``experiments.yu2005`` (``python train.py experiment=yu2005_cor data.path=FILE``).

Every task (user) ``j`` has a latent function ``f_j`` over the ``m`` items with the common prior
``N(h, Sigma)`` and labels on some training items. Learning is the paper's EM (section 3):

* E-step: each task's Gaussian posterior ``Q(f_j) = N(f_hat_j, Sigma_hat_j)``, exact for the
  Gaussian likelihood (GPR), by EP for the ordinal one (GPOR; ``rankers.gp.inference.ep``, parallel
  and damped, on ``rankers.gp.likelihoods.OrdinalLikelihood``; Laplace as an option); all tasks at
  once, each on its own observed items (``[T, p, p]``).
* M-step for ``theta_j``: GPR's noise ``sigma^2 = sum_j (|y_j - f_hat_j|^2 + tr Sigma_hat_j) /
  sum_j n_j`` (pooled as in the paper's section 3.1 for CGPR; per task for GPR, a separate model
  each); GPOR's pins and ``sigma`` per task, maximizing the expected log-likelihood
  (:func:`rankers.gp.ordinal.fit_thresholds`).
* M-step for ``phi = (h, Sigma)`` (collaborative models only), eq. (3):
  ``h = 1/n sum_j f_hat_j``, ``Sigma = 1/n sum_j [(f_hat_j - h)(f_hat_j - h)^T + Sigma_hat_j]``.

Only training items carry labels, so with ``J`` the training items, ``f_hat_j = h + Sigma[:, J]
alpha_j`` and ``Sigma_hat_j = Sigma - Sigma[:, J] W_j Sigma[J, :]`` (``alpha_j``, ``W_j`` from the
E-step, zero outside task ``j``'s labelled items), and eq. (3) becomes exactly::

    h     <- h + Sigma[:, J] mean_j(alpha_j)
    Sigma <- Sigma + Sigma[:, J] M Sigma[J, :],   M = mean_j[(alpha_j - a)(alpha_j - a)^T - W_j]

so only the ``[m, n]`` columns ``Sigma[:, J]`` and the diagonal are ever held: the update is on
*all* items (test items included, transductively, as the paper's Appendix says), at ``O(m n^2)``.
The individual models keep ``h = 0`` and ``Sigma`` = the correlation kernel.

Predictions are labels: GPR rounds the predictive mean to the nearest grade; GPOR takes the most
probable grade under the predictive distribution.

Our choices where the paper is silent (each in the docs): GPR/CGPR regress each task's labels
minus its mean training label (added back to predict; the prior mean 0 then means "the user's
average"); GPOR's pins start at the normal quantiles of the task's label frequencies; the number
of EM iterations is fixed (``em_iters``), the paper gives none, and EM on a free-form ``Sigma``
fits the training tasks ever more closely, so it is the regularizer here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from rankers.gp.inference import GaussianPosterior, ep, laplace, site_posterior
from rankers.gp.likelihoods import OrdinalLikelihood, gaussian_sites
from rankers.gp.ordinal import check_kernel, fit_thresholds, initial_thresholds, predict_ordinal

MODELS = ("GPR", "CGPR", "GPOR", "CGPOR")
APPROXIMATIONS = ("ep", "laplace")


@dataclass
class Split:
    """One training/test split of the items, tasks' labels and the prior on it.

    Items are ordered training first: ``0..n-1`` are the training items ``J``, ``n..m-1`` the test
    items. ``cols [m, n]`` = ``Sigma[:, J]``, ``diag [m]`` = ``diag(Sigma)`` (float64);
    ``train_labels [T, n]``, ``test_labels [T, m - n]``: 0-based ranks, -1 = not rated.
    """

    cols: Tensor
    diag: Tensor
    train_labels: Tensor
    test_labels: Tensor
    n_ranks: int

    @property
    def n_train(self) -> int:
        return self.cols.shape[1]


@dataclass
class ModelOptions:
    """EM and approximation settings shared by the four models (see the module docstring)."""

    em_iters: int = 1
    approximation: str = "ep"  # ep | laplace
    sigma_gaussian: float = 1.0  # initial sigma for GPR models (the paper: 0.1)
    sigma_ordinal: float = 1.0  # ... and for GPOR models (the paper's)
    ep_iters: int = 20
    ep_damping: float = 0.7
    ep_tol: float = 1e-3
    threshold_steps: int = 10
    fit_sigma: bool = True
    center_labels: bool = True
    refit_pins: bool = True  # GPOR: one more pin/sigma M-step after the last E-step
    prior_strength: float = 0.0  # kappa of the inverse-Wishart prior on Sigma (0 = the paper's eq. 3)


@dataclass
class FitResult:
    """Test predictions ``[T, m - n]`` (long, -1 where not rated) and what EM did."""

    predictions: Tensor
    history: dict = field(default_factory=dict)


def observed(labels: Tensor) -> tuple[Tensor, Tensor]:
    """Each task's rated items packed to the front: ``labels [T, n]`` (-1 = not rated) ->
    ``(index [T, p], valid [T, p])`` with ``p`` the largest count (at least 1); padded slots point
    at item 0 with ``valid = False``."""
    rated = labels >= 0
    p = max(int(rated.sum(1).max().item()) if labels.numel() else 0, 1)
    order = torch.argsort((~rated).to(torch.int8), dim=1, stable=True)[:, :p]
    valid = rated.gather(1, order)
    return torch.where(valid, order, torch.zeros_like(order)), valid


def gather_kernel(square: Tensor, index: Tensor, valid: Tensor) -> Tensor:
    """``square [n, n]`` restricted to each task's slots -> ``[T, p, p]``; padded slots get the
    identity block (independent, no influence: their site precision is 0)."""
    block = square[index[:, :, None], index[:, None, :]]
    both = valid[:, :, None] & valid[:, None, :]
    eye = torch.eye(index.shape[1], dtype=square.dtype, device=square.device).expand_as(block)
    return torch.where(both, block, eye)


class PriorState:
    """The shared prior ``(h, Sigma)`` as ``h [m]``, ``Sigma[:, J] [m, n]`` and ``diag(Sigma) [m]``."""

    def __init__(self, cols: Tensor, diag: Tensor, *, strength: float = 0.0) -> None:
        self.cols, self.diag = cols.clone(), diag.clone()
        self.mean = torch.zeros_like(diag)
        self.base_cols, self.base_diag, self.strength = cols, diag, strength

    @property
    def n(self) -> int:
        return self.cols.shape[1]

    def update(self, posterior: GaussianPosterior, index: Tensor, valid: Tensor) -> None:
        """Eq. (3) through the E-step's ``alpha_j``, ``W_j`` (see the module docstring)."""
        T, n = index.shape[0], self.n
        zeros = torch.zeros_like(posterior.alpha)
        alpha = torch.zeros(T, n, dtype=self.cols.dtype, device=self.cols.device)
        alpha.scatter_add_(1, index, torch.where(valid, posterior.alpha, zeros))
        centre = alpha.mean(0)
        spread = alpha - centre
        both = valid[:, :, None] & valid[:, None, :]
        w = torch.where(both, posterior.precision_correction(), torch.zeros((), dtype=alpha.dtype))
        linear = (index[:, :, None] * n + index[:, None, :]).reshape(-1)
        w_sum = torch.zeros(n * n, dtype=alpha.dtype, device=alpha.device).index_add_(0, linear, w.reshape(-1))
        m_matrix = (spread.T @ spread - w_sum.view(n, n)) / T
        m_matrix = 0.5 * (m_matrix + m_matrix.T)
        left = self.cols @ m_matrix  # [m, n]
        self.mean = self.mean + self.cols @ centre
        diag = self.diag + (left * self.cols).sum(1)
        cols = self.cols + left @ self.cols[:n]
        # the MAP update under an inverse-Wishart prior centred on the kernel (the paper's section 2.2
        # option): Sigma = (T Sigma_EM + kappa K) / (T + kappa); kappa = 0 is eq. (3)
        weight = T / (T + self.strength)
        self.diag = weight * diag + (1 - weight) * self.base_diag
        self.cols = weight * cols + (1 - weight) * self.base_cols
        self.cols[:n] = 0.5 * (self.cols[:n] + self.cols[:n].T)


def _task_means(labels: Tensor, valid: Tensor) -> Tensor:
    """Mean label of each task's valid slots ``[T]``; a task with none gets the mean of all."""
    values = torch.where(valid, labels.to(torch.float64), torch.zeros((), dtype=torch.float64))
    counts = valid.sum(1)
    overall = values.sum() / counts.sum().clamp_min(1)
    return torch.where(counts > 0, values.sum(1) / counts.clamp_min(1), overall)


def fit_predict(split: Split, model: str, options: ModelOptions | None = None) -> FitResult:
    """Fit ``model`` (GPR, CGPR, GPOR or CGPOR) on the split's training labels by EM and predict
    every task's rated test items."""
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    options = options or ModelOptions()
    if options.approximation not in APPROXIMATIONS:
        raise ValueError(f"approximation must be one of {APPROXIMATIONS}, got {options.approximation!r}")
    collaborative, ordinal = model.startswith("C"), model.endswith("OR")
    n, r = split.n_train, split.n_ranks
    square, jitter = check_kernel(split.cols[:n], what="the prior kernel on the training items")
    cols = split.cols.clone()
    cols[:n] = square
    diag = split.diag.clone()
    diag[:n] = square.diagonal()
    prior = PriorState(cols, diag, strength=options.prior_strength)
    index, valid = observed(split.train_labels)
    labels = split.train_labels.gather(1, index).clamp_min(0)
    T = labels.shape[0]
    dtype = torch.float64
    history: dict[str, Any] = {"kernel_jitter": jitter, "tasks_without_labels": int((~valid.any(1)).sum())}
    if ordinal:
        sigma = torch.full((T,), options.sigma_ordinal, dtype=dtype)
        thresholds = initial_thresholds(labels, valid, r, torch.sqrt(1.0 + sigma**2))
        sites = None
    else:
        offset = _task_means(labels, valid) if options.center_labels else torch.zeros(T, dtype=dtype)
        targets = labels.to(dtype) - offset[:, None]
        noise_var = torch.full((T,), options.sigma_gaussian**2, dtype=dtype)
    ep_sweeps = []
    for iteration in range(options.em_iters + 1):
        kernel = gather_kernel(prior.cols[:n], index, valid)
        prior_mean = torch.where(valid, prior.mean[index], torch.zeros((), dtype=dtype))
        if ordinal:  # E-step
            likelihood = OrdinalLikelihood(labels, thresholds, sigma)
            if options.approximation == "laplace":
                posterior = laplace(kernel, likelihood, valid, prior_mean, max_iter=50, tol=1e-8)
            else:
                posterior = ep(
                    kernel, likelihood, valid, prior_mean, sites=sites, schedule="parallel",
                    damping=options.ep_damping, max_sweeps=options.ep_iters, tol=options.ep_tol,
                )  # fmt: skip
                sites = posterior.sites
            ep_sweeps.append(posterior.iterations)
        else:
            posterior = site_posterior(kernel, prior_mean, *gaussian_sites(targets, valid, noise_var))
        if iteration == options.em_iters:
            if ordinal and options.refit_pins:  # the pins for the final posterior (the prior moved since their M-step)
                thresholds, sigma = fit_thresholds(
                    posterior.mean, posterior.var, labels, valid, thresholds, sigma, steps=options.threshold_steps,
                    fit_sigma=options.fit_sigma,
                )  # fmt: skip
            break  # the last E-step gives the posterior used to predict
        if ordinal:  # M-step: theta
            thresholds, sigma = fit_thresholds(
                posterior.mean, posterior.var, labels, valid, thresholds, sigma, steps=options.threshold_steps,
                fit_sigma=options.fit_sigma,
            )  # fmt: skip
        else:
            residual = torch.where(valid, (targets - posterior.mean) ** 2 + posterior.var, torch.zeros((), dtype=dtype))
            counts = valid.sum(1).to(dtype)
            if collaborative:  # pooled, section 3.1
                noise_var = (residual.sum() / counts.sum().clamp_min(1)).expand(T).clone()
            else:
                noise_var = torch.where(counts > 0, residual.sum(1) / counts.clamp_min(1), noise_var)
            noise_var = noise_var.clamp_min(1e-6)
        if collaborative:  # M-step: phi
            prior.update(posterior, index, valid)
    history["ep_sweeps"] = ep_sweeps
    history["sigma"] = (sigma if ordinal else noise_var.sqrt()).mean().item()
    # predict every task's rated test items
    test_index, test_valid = observed(split.test_labels)
    rows = n + test_index
    cross = prior.cols[rows[:, :, None], index[:, None, :]]
    cross = torch.where(valid[:, None, :], cross, torch.zeros((), dtype=dtype))
    mean, var = posterior.predict(cross, prior.mean[rows], prior.diag[rows])
    if ordinal:
        predicted = predict_ordinal(mean, var, thresholds, sigma)
    else:
        predicted = torch.round(mean + offset[:, None]).clamp(0, r - 1).long()
    # padded slots write into an extra last column, dropped after
    T_, q = split.test_labels.shape
    out = torch.full((T_, q + 1), -1, dtype=torch.long)
    out.scatter_(1, torch.where(test_valid, test_index, torch.full_like(test_index, q)), predicted)
    out = out[:, :q]
    return FitResult(out, history)
