"""Collaborative ordinal regression (Yu, Yu & Tresp, NIPS 2005): GPR, CGPR, GPOR and CGPOR.

    python train.py experiment=yu2005_cor data.path=/work/data/ml-100k/ml-100k.inter

Every task (user) ``j`` has a latent function ``f_j`` over the ``m`` items with the common prior
``N(h, Sigma)`` and labels on some training items. Learning is the paper's EM (section 3):

* E-step: each task's Gaussian posterior ``Q(f_j) = N(f_hat_j, Sigma_hat_j)``, exact for the
  Gaussian likelihood (GPR), by EP for the ordinal one (GPOR; :func:`rankers.gp.ordinal.ep_ordinal`,
  Laplace as an option); all tasks at once, each on its own observed items (``[T, p, p]``).
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
probable grade under the predictive distribution. Measures: mean absolute error and zero-one
error of each task on its rated test items, averaged over the tasks (the paper's "averaged over
all the users").

Our choices where the paper is silent (each in the docs): GPR/CGPR regress each task's labels
minus its mean training label (added back to predict; the prior mean 0 then means "the user's
average"); GPOR's pins start at the normal quantiles of the task's label frequencies; the number
of EM iterations is fixed (``em_iters``), the paper gives none, and EM on a free-form ``Sigma``
fits the training tasks ever more closely, so it is the regularizer here.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rankers.gp.ordinal import (
    TaskPosterior,
    check_kernel,
    ep_ordinal,
    fit_thresholds,
    gaussian_sites,
    initial_thresholds,
    laplace_ordinal,
    predict_ordinal,
    site_posterior,
)
from rankers.outputs import save_figure, write_results, write_text

log = logging.getLogger(__name__)

MODELS = ("GPR", "CGPR", "GPOR", "CGPOR")
# the paper's Tables 1 and 2 (EachMovie): {model: {n training items: (MAE, zero-one)}}
PAPER = {
    "GPR": {100: (1.1971, 0.7432), 200: (1.1283, 0.7224), 300: (1.1042, 0.7155), 400: (1.0970, 0.7125)},
    "CGPR": {100: (1.1763, 0.7372), 200: (1.1260, 0.7213), 300: (1.1005, 0.7142), 400: (1.0923, 0.7085)},
    "GPOR": {100: (1.2366, 0.6239), 200: (1.2126, 0.6087), 300: (1.0907, 0.5862), 400: (1.0454, 0.5760)},
    "CGPOR": {100: (1.2225, 0.6168), 200: (1.1711, 0.5999), 300: (1.0557, 0.5782), 400: (1.0203, 0.5723)},
}


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

    def update(self, posterior: TaskPosterior, index: Tensor, valid: Tensor) -> None:
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
            if options.approximation == "laplace":
                fit = laplace_ordinal(kernel, prior_mean, labels, valid, thresholds, sigma)
            else:
                fit = ep_ordinal(
                    kernel, prior_mean, labels, valid, thresholds, sigma, sites=sites, max_iter=options.ep_iters,
                    damping=options.ep_damping, tol=options.ep_tol,
                )  # fmt: skip
                sites = (fit.tau, fit.nu)
            ep_sweeps.append(fit.iterations)
            posterior = fit.posterior
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


def errors(predictions: Tensor, labels: Tensor) -> tuple[float, float] | None:
    """Mean absolute error and zero-one error of each task on its rated items, averaged over the
    tasks that have any: ``predictions, labels [T, q]`` (-1 = not rated); None when no task rated
    any of the ``q`` items (nothing to measure, where a mean would be NaN)."""
    rated = labels >= 0
    counts = rated.sum(1)
    has = counts > 0
    if not bool(has.any()):
        return None
    zero = torch.zeros((), dtype=torch.float64)
    difference = torch.where(rated, (predictions - labels).abs().to(torch.float64), zero)
    wrong = torch.where(rated, (predictions != labels).to(torch.float64), zero)
    mae = (difference.sum(1)[has] / counts[has]).mean().item()
    zero_one = (wrong.sum(1)[has] / counts[has]).mean().item()
    return mae, zero_one


# -- the experiment: Tables 1 and 2 ----------------------------------------------------------------


def make_split(data, items: np.ndarray, n_train: int) -> Split:
    """The split whose training items are ``items[:n_train]`` and test items the rest (``data`` a
    :class:`datamodules.collaborative_ratings.CollaborativeRatings`)."""
    train = items[:n_train]
    cols = torch.from_numpy(data.kernel(items, train))
    diag = torch.from_numpy(np.asarray(data.unit[items].multiply(data.unit[items]).sum(1)).ravel())
    labels = torch.from_numpy(data.labels[:, items])
    return Split(cols, diag, labels[:, :n_train], labels[:, n_train:], data.n_ranks)


def table(
    cfg: Any = None,
    *,
    data: Any = None,
    train_sizes: tuple[int, ...] = (100, 200, 300, 400),
    models: tuple[str, ...] = MODELS,
    trials: int = 3,
    seed: int = 0,
    threads: int | None = 1,
    out_dir: str | Path | None = None,
    **model_options: Any,
) -> dict[str, Any]:
    """Tables 1 and 2: MAE and zero-one error of each model at each training size, averaged over
    ``trials`` random item splits (trial ``t``'s items permuted by ``default_rng([seed, t])``, the
    first ``n`` for training). Writes ``results.json`` (``"table": {model: {n: {"mae", "zero_one",
    ...}}}``), ``table.md`` and ``yu2005_cor.png`` into ``out_dir``."""
    if cfg is not None:  # from train.py: the data group builds the ratings, options under `yu2005`
        from hydra.utils import instantiate
        from omegaconf import OmegaConf

        options = OmegaConf.to_container(cfg.yu2005, resolve=True)
        return table(data=instantiate(cfg.data), **options, out_dir=cfg.paths.output_dir)
    if threads:
        torch.set_num_threads(threads)
    options = ModelOptions(**model_options)
    start = time.perf_counter()
    largest = max(train_sizes)
    if largest >= data.n_items:
        raise ValueError(f"training size {largest} needs more than the {data.n_items} items the data has")
    per_trial: dict[str, dict[int, list[tuple[float, float]]]] = {m: {n: [] for n in train_sizes} for m in models}
    histories: dict[str, dict[int, list[dict]]] = {m: {n: [] for n in train_sizes} for m in models}
    seconds = {m: 0.0 for m in models}
    for trial in range(trials):
        items = np.random.default_rng([seed, trial]).permutation(data.n_items)
        for n in train_sizes:
            split = make_split(data, items, n)
            for model in models:
                begin = time.perf_counter()
                result = fit_predict(split, model, options)
                seconds[model] += time.perf_counter() - begin
                per_trial[model][n].append(errors(result.predictions, split.test_labels))
                histories[model][n].append(result.history)
                log.info("trial %d, %d items, %s: MAE, zero-one %s", trial, n, model, per_trial[model][n][-1])
    results_table = {
        model: {str(n): {**_cell(per_trial[model][n]), **_paper_cell(model, n)} for n in train_sizes}
        for model in models
    }
    total = time.perf_counter() - start
    results = {
        "table": results_table,
        "setting": {"trials": trials, "seed": seed, "train_sizes": list(train_sizes), **options.__dict__},
        "data": data.statistics,
        "seconds": total,
        "fit_seconds": seconds,
        "history": histories,
    }
    text = format_table(results_table, train_sizes, models, trials, total)
    print(text)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "table.md", text, "table")
        write_results(out / "results.json", results, default=str)
        plot_table(results_table, train_sizes, models, out / "yu2005_cor.png")
    return results


def _cell(trials: list[tuple[float, float] | None]) -> dict[str, Any]:
    """One cell of the tables: the means over the trials that had a rated test item (per trial None
    where none had); a cell no trial could measure holds None and says why under ``"absent"``."""
    measured = [v for v in trials if v is not None]
    cell: dict[str, Any] = {
        "mae": float(np.mean([v[0] for v in measured])) if measured else None,
        "zero_one": float(np.mean([v[1] for v in measured])) if measured else None,
        "mae_per_trial": [None if v is None else v[0] for v in trials],
        "zero_one_per_trial": [None if v is None else v[1] for v in trials],
        "trials_measured": len(measured),
    }
    if not measured:
        cell["absent"] = f"no task user rated a test item in any of the {len(trials)} trials"
    return cell


def _paper_cell(model: str, n: int) -> dict[str, Any]:
    if n not in PAPER[model]:
        return {}
    return {"paper": dict(zip(("mae", "zero_one"), PAPER[model][n], strict=True))}


def format_table(results_table: dict, train_sizes, models, trials: int, seconds: float) -> str:
    """Tables 1 and 2 as markdown (ours, the paper's EachMovie figure in brackets)."""
    lines = [f"Mean over {trials} trials; {seconds:.0f} s in all.", ""]
    for key, title in (("mae", "Mean absolute error"), ("zero_one", "Mean zero-one error")):
        lines += [f"{title} (paper, EachMovie, in brackets)", "", "| training items | " + " | ".join(models) + " |"]
        lines.append("|---" * (len(models) + 1) + "|")
        for n in train_sizes:
            cells = []
            for model in models:
                row = results_table[model][str(n)]
                paper = row.get("paper", {}).get(key)
                ours = "n/a" if row[key] is None else f"{row[key]:.4f}"
                cells.append(ours + (f" ({paper:.4f})" if paper is not None else ""))
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        lines.append("")
    absent = sorted({row["absent"] for rows in results_table.values() for row in rows.values() if "absent" in row})
    lines += [f"n/a: {reason}" for reason in absent] + ([""] if absent else [])
    return "\n".join(lines)


def plot_table(results_table: dict, train_sizes, models, path: Path) -> None:
    """MAE and zero-one error against the number of training items, one line per model."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in zip(axes, ("mae", "zero_one"), ("mean absolute error", "mean zero-one error"), strict=True):
        for model in models:
            values = [results_table[model][str(n)][key] for n in train_sizes]
            values = [np.nan if v is None else v for v in values]  # a gap in the line, not a point
            ax.plot(train_sizes, values, marker="o", linestyle="--" if model.startswith("C") else "-", label=model)
        ax.set_xlabel("training items")
        ax.set_title(title)
        ax.legend(fontsize=8)
    figure.suptitle("Collaborative ordinal regression (Yu, Yu & Tresp 2005, Tables 1-2)")
    figure.tight_layout()
    save_figure(figure, path, "plot", dpi=90)
    plt.close(figure)
