"""Chu & Ghahramani's demonstrations (NIPS'05 LTR workshop, section 4), as experiments.

    python train.py experiment=chu2005_spiral     # Figure 1: supervised vs semi-supervised, error bars
    python train.py experiment=chu2005_boston     # Figure 2: active learning, entropy vs random

Both write ``results.json`` and a PNG into the run directory. The paper's settings are the
defaults (conf/experiment/chu2005_*.yaml). Figure 1's posterior is the Laplace approximation, Figure 2's
the paper's EP (``inference=laplace`` there is the option); both are ``rankers.gp.inference``'s.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from datamodules.tabular import TableFormatError, read_numeric_table
from experiments.results import write_results
from rankers.gp import active
from rankers.gp.kernels import SemiSupervisedKernel, gaussian_kernel
from rankers.gp.preference import fit, posterior_latent
from rankers.outputs import save_figure
from rankers.threads import torch_threads

log = logging.getLogger(__name__)

PRIORS = ("supervised", "semi_supervised")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    return plt


# -- Figure 1: the spiral ---------------------------------------------------------------------------
def spiral_points(n: int = 35, turns: float = 1.5, r0: float = 0.5, r1: float = 2.5) -> torch.Tensor:
    """``n`` points evenly spaced in arc length along an Archimedean spiral, ``[n, 2]`` float64,
    from the centre (point 0) outwards.

    The paper shows the picture, not the formula: 1.5 turns from radius 0.5 to 2.5 put neighbours
    0.42 apart along the spiral and the arms 1.33 apart, so each point's 3 nearest neighbours lie
    along the spiral, not across it, and the kernel's length-scale (``kappa = 4``: 0.5) links
    neighbours but not arms.
    """
    theta = torch.linspace(0.0, 2 * math.pi * turns, 20001, dtype=torch.float64)
    radius = r0 + (r1 - r0) * theta / theta[-1]
    curve = torch.stack([radius * torch.cos(theta), radius * torch.sin(theta)], 1)
    length = torch.cat([curve.new_zeros(1), curve.diff(dim=0).norm(dim=1).cumsum(0)])
    at = torch.linspace(0.0, float(length[-1]), n, dtype=torch.float64)
    return curve[torch.searchsorted(length, at).clamp(max=len(length) - 1)]


def _spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a.numpy(), b.numpy()).statistic)


def spiral(cfg: DictConfig) -> dict[str, Any]:
    """``experiment=chu2005_spiral``'s entry: ``spiral_figure`` with the config's options.

    Figure 1: the ranking function (posterior mean) and its error bars on the 35-point spiral,
    with the GP prior of eq. (2) (supervised) and the graph-deformed prior of eq. (5).

    results.json: for each prior, the latent mean and std at the 35 points, the Spearman correlation
    of the mean with the position along the spiral (the semi-supervised prior should follow it), and
    the mean posterior std on the points and on the grid.
    """
    options = OmegaConf.to_container(cfg.chu2005_spiral, resolve=True)
    return spiral_figure(**options, out_dir=cfg.paths.output_dir)


def spiral_figure(
    *,
    n_points: int = 35,
    kappa0: float = 0.25,
    kappa: float = 4.0,
    sigma2: float = 0.01,
    neighbours: int = 3,
    pair: tuple[int, int] = (34, 0),
    grid: int = 61,
    out_dir: str | Path | None = None,
) -> dict[str, Any]:
    start = time.perf_counter()
    x = spiral_points(n_points)
    v, u = torch.tensor([int(pair[0])]), torch.tensor([int(pair[1])])
    sigma = math.sqrt(sigma2)

    base = gaussian_kernel(kappa0, kappa)
    kernels = {"supervised": base, "semi_supervised": SemiSupervisedKernel(base, x, neighbours=neighbours)}
    lim = float(x.abs().max()) + 0.4
    axis = torch.linspace(-lim, lim, grid, dtype=torch.float64)
    gx, gy = torch.meshgrid(axis, axis, indexing="xy")
    grid_points = torch.stack([gx.reshape(-1), gy.reshape(-1)], 1)
    position = torch.arange(n_points, dtype=torch.float64)
    results: dict[str, Any] = {}
    surfaces = {}
    for name, kernel in kernels.items():
        prior = kernel(x, x)
        state = fit(prior, v, u, sigma)
        mean, var, _ = posterior_latent(state, prior, prior.diagonal(), v[None], u[None])
        cross = kernel(x, grid_points)
        prior_diag = kernel(grid_points[:, None, :], grid_points[:, None, :])[:, 0, 0]  # each point a batch
        g_mean, g_var, _ = posterior_latent(state, cross, prior_diag, v[None], u[None])
        surfaces[name] = (g_mean[0].reshape(grid, grid), g_var[0].sqrt().reshape(grid, grid))
        results[name] = {
            "spearman_along_spiral": _spearman(mean[0], position),
            "mean_std_points": float(var[0].sqrt().mean()),
            "mean_std_grid": float(g_var[0].sqrt().mean()),
            "latent": [round(float(f), 6) for f in mean[0]],
            "std": [round(float(s), 6) for s in var[0].sqrt()],
            "log_evidence": float(state.log_evidence[0]),
        }
        log.info(
            "%s: Spearman(latent, position along the spiral) = %.3f, mean posterior std on the points %.4f",
            name,
            results[name]["spearman_along_spiral"],
            results[name]["mean_std_points"],
        )
    summary = {
        "experiment": "chu2005_spiral",
        "setting": {
            "n_points": n_points,
            "kappa0": kappa0,
            "kappa": kappa,
            "sigma2": sigma2,
            "neighbours": neighbours,
            "pair": f"{pair[0]} > {pair[1]}",
        },
        **results,
        "seconds": time.perf_counter() - start,
    }
    write_results(out_dir, summary, {"spiral.png": lambda path: _plot_spiral(path, x, axis, surfaces, results, pair)})
    return summary


def _plot_spiral(path: Path, x, axis, surfaces, results, pair) -> None:
    plt = _plt()
    figure, axes = plt.subplots(1, 4, figsize=(19, 4.4))
    extent = (float(axis[0]), float(axis[-1]), float(axis[0]), float(axis[-1]))
    panels = [
        ("(a) supervised: posterior mean", surfaces["supervised"][0]),
        ("(b) semi-supervised: posterior mean", surfaces["semi_supervised"][0]),
        ("(c) semi-supervised: posterior std", surfaces["semi_supervised"][1]),
    ]
    for ax, (title, surface) in zip(axes, panels):
        shown = ax.contourf(surface.numpy(), levels=20, extent=extent, origin="lower", cmap="viridis")
        figure.colorbar(shown, ax=ax, shrink=0.8)
        ax.scatter(x[:, 0], x[:, 1], s=18, facecolors="none", edgecolors="tab:blue")
        ax.scatter(x[list(pair), 0], x[list(pair), 1], marker="^", s=80, c=["tab:red", "white"], edgecolors="k")
        ax.set_title(title)
        ax.set_aspect("equal")
    ax = axes[3]
    position = np.arange(len(x))
    for name, color in (("supervised", "tab:gray"), ("semi_supervised", "tab:green")):
        mean, std = np.array(results[name]["latent"]), np.array(results[name]["std"])
        ax.errorbar(position, mean, yerr=std, color=color, capsize=2, marker="o", ms=3, label=name.replace("_", "-"))
    ax.set_xlabel("position along the spiral (0 = centre)")
    ax.set_ylabel("latent f (mean ± 1 std)")
    ax.set_title(f"(d) the 35 points; labelled pair {pair[0]} > {pair[1]}")
    ax.legend()
    figure.tight_layout()
    save_figure(figure, path, "plot", dpi=110)
    plt.close(figure)


# -- Figure 2: active learning on Boston Housing ----------------------------------------------------
def default_boston_path() -> Path:
    """The shared copy next to the repository, ``../shared/data/boston/boston_house_prices.csv``."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "data" / "boston" / "boston_house_prices.csv"


SCALINGS = ("zscore", "minmax")


def load_table(path: str | Path | None, scaling: str = "zscore") -> tuple[torch.Tensor, torch.Tensor, str]:
    """``(scaled features [n, d], target [n], path)``; refuses a missing file clearly.

    ``scaling``: ``zscore`` (mean 0, std 1 per column) or ``minmax`` (each column onto [0, 1]); the
    paper does not say which scale its ``kappa`` refers to."""
    path = Path(path) if path else default_boston_path()
    if not path.is_file():
        raise TableFormatError(
            f"{path}: no such file. experiment=chu2005_boston needs Boston Housing in scikit-learn's CSV "
            "form (see ../shared/data/boston/README.md): give it with data.path=FILE.csv"
        )
    if scaling not in SCALINGS:
        raise ValueError(f"scaling must be one of {SCALINGS}, got {scaling!r}")
    features, target, _ = read_numeric_table(path)
    if scaling == "zscore":
        centre, spread = features.mean(0), features.std(0)
    else:
        centre, spread = features.min(0), features.max(0) - features.min(0)
    constant = spread == 0
    if constant.any():  # a constant column carries nothing; dividing by its 0 spread would make NaN
        log.warning("%s: %d constant feature column(s) kept as zeros", path, int(constant.sum()))
    features = (features - centre) / np.where(constant, 1.0, spread)
    return torch.from_numpy(features), torch.from_numpy(target), str(path)


def sample_pairs(target: torch.Tensor, count: int, trials: int, generator: torch.Generator) -> torch.Tensor:
    """``[trials, count, 2]`` distinct item pairs with different targets, uniformly at random."""
    n = len(target)
    i, j = torch.triu_indices(n, n, 1)
    usable = target[i] != target[j]
    i, j = i[usable], j[usable]
    if count > len(i):
        raise ValueError(f"asked for {count} pairs, the data has {len(i)} with different targets")
    picks = torch.stack([torch.randperm(len(i), generator=generator)[:count] for _ in range(trials)])
    return torch.stack([i[picks], j[picks]], -1)


def boston(cfg: DictConfig) -> dict[str, Any]:
    """``experiment=chu2005_boston``'s entry: ``boston_curves`` with the config's options.

    Figure 2: error on all item pairs against the number of actively chosen pairs, for each
    selection strategy and prior, ``trials`` trials as one batch.

    results.json: ``"curve": {strategy: [mean error after query 1, 2, ...]}`` (the first prior's),
    ``"curve_std"`` likewise, ``"initial_error"``, and ``"curves": {prior: {strategy: {"mean",
    "std"}}}`` for every prior run, with the time each took.
    """
    options = OmegaConf.to_container(cfg.chu2005_boston, resolve=True)
    return boston_curves(**options, path=cfg.data.get("path"), out_dir=cfg.paths.output_dir)


def boston_curves(
    *,
    path: str | None = None,
    trials: int = 20,
    queries: int = 50,
    pool: int = 1000,
    initial_pairs: int = 1,
    kappa0: float = 0.0625,
    kappa: float = 0.0625,
    sigma2: float = 0.001,
    neighbours: int = 3,
    priors: tuple[str, ...] = PRIORS,
    strategies: tuple[str, ...] = ("entropy", "random"),
    seed: int = 0,
    dtype: str = "float64",
    device: str | None = None,
    threads: int | None = None,
    inference: str = "ep",
    scaling: str = "zscore",
    out_dir: str | Path | None = None,
) -> dict[str, Any]:
    with torch_threads(int(threads) if threads else None):  # restored after: no global thread setting
        start = time.perf_counter()
        for prior_name in priors:
            if prior_name not in PRIORS:
                raise ValueError(f"chu2005_boston.priors: each must be one of {PRIORS}, got {prior_name!r}")
        for strategy in strategies:
            if strategy not in active.STRATEGIES:
                raise ValueError(
                    f"chu2005_boston.strategies: each must be one of {active.STRATEGIES}, got {strategy!r}"
                )
        features, target, used = load_table(path, scaling)
        dev = torch.device(device or "cpu")
        kind = getattr(torch, dtype)
        features, target = features.to(dev, kind), target.to(dev, kind)
        n = len(target)
        generator = torch.Generator().manual_seed(seed)
        pairs = sample_pairs(target.cpu(), pool + initial_pairs, trials, generator).to(dev)
        init, candidates = pairs[:, :initial_pairs], pairs[:, initial_pairs:]
        sigma = math.sqrt(sigma2)
        base = gaussian_kernel(kappa0, kappa)
        curves: dict[str, dict[str, dict[str, Any]]] = {}
        seconds: dict[str, float] = {}
        for prior_name in priors:
            # eq. (2), or eq. (5): the graph-deformed kernel over the houses (its unlabelled points)
            kernel = base if prior_name == "supervised" else SemiSupervisedKernel(base, features, neighbours=neighbours)
            prior = kernel(features, features)
            prior = 0.5 * (prior + prior.T)
            curves[prior_name] = {}
            for strategy in strategies:
                tick = time.perf_counter()
                run = active.run(
                    prior,
                    target,
                    candidates[..., 0],
                    candidates[..., 1],
                    init[..., 0],
                    init[..., 1],
                    queries=queries,
                    strategy=strategy,
                    sigma=sigma,
                    generator=torch.Generator().manual_seed(seed + 1),
                    inference=inference,
                )
                errors = run.errors.double().cpu()
                after = errors[:, 1:]  # after query 1, 2, ...
                curves[prior_name][strategy] = {
                    "mean": [round(float(e), 5) for e in after.mean(0)],
                    "std": [round(float(e), 5) for e in after.std(0)],
                    "initial": round(float(errors[:, 0].mean()), 5),
                    "newton_steps_mean": float(np.mean(run.newton_steps)),
                }
                seconds[f"{prior_name}/{strategy}"] = time.perf_counter() - tick
                log.info(
                    "%s prior, %s: error after %d queries %.4f ± %.4f (%.1f s)",
                    prior_name,
                    strategy,
                    queries,
                    after[:, -1].mean(),
                    after[:, -1].std(),
                    seconds[f"{prior_name}/{strategy}"],
                )
        first = curves[priors[0]]
        n_eval = int((target[:, None] > target[None, :]).sum())
        summary: dict[str, Any] = {
            "experiment": "chu2005_boston",
            "data": used,
            "prior": priors[0],
            "curve": {s: first[s]["mean"] for s in strategies},
            "curve_std": {s: first[s]["std"] for s in strategies},
            "initial_error": {s: first[s]["initial"] for s in strategies},
            "curves": curves,
            "setting": {
                "trials": trials,
                "queries": queries,
                "pool": pool,
                "initial_pairs": initial_pairs,
                "kappa0": kappa0,
                "kappa": kappa,
                "sigma2": sigma2,
                "neighbours": neighbours,
                "items": n,
                "evaluated_pairs": n_eval,
                "tied_pairs_excluded": n * (n - 1) // 2 - n_eval,
                "dtype": dtype,
                "device": str(dev),
                "inference": inference,
                "scaling": scaling,
            },
            "seconds": {**seconds, "total": time.perf_counter() - start},
        }
        if "entropy" in strategies and "random" in strategies:
            summary["entropy_below_random_after_10"] = {
                p: all(e < r for e, r in zip(c["entropy"]["mean"][10:], c["random"]["mean"][10:]))
                for p, c in curves.items()
            }
        write_results(out_dir, summary, {"boston.png": lambda path: _plot_boston(path, curves, summary["setting"])})
        return summary


def _plot_boston(path: Path, curves: dict, setting: dict) -> None:
    plt = _plt()
    figure, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4.2), squeeze=False)
    colors = {"entropy": "tab:blue", "entropy_all": "tab:purple", "random": "tab:orange"}
    for ax, (prior, by_strategy) in zip(axes[0], curves.items()):
        for strategy, curve in by_strategy.items():
            mean, std = np.array(curve["mean"]), np.array(curve["std"])
            steps = np.arange(1, len(mean) + 1)
            ax.plot(steps, 100 * mean, color=colors.get(strategy), label=strategy)
            ax.fill_between(steps, 100 * (mean - std), 100 * (mean + std), color=colors.get(strategy), alpha=0.2)
        ax.set_xlabel("number of selected pairs")
        ax.set_ylabel(f"error rate on {setting['evaluated_pairs']} pairs (%)")
        ax.set_title(f"{prior.replace('_', '-')} GP, {setting['trials']} trials (mean ± std)")
        ax.legend()
        ax.grid(alpha=0.3)
    figure.tight_layout()
    save_figure(figure, path, "plot", dpi=110)
    plt.close(figure)
