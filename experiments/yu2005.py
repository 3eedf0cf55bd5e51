"""Yu, Yu & Tresp (NIPS 2005), Tables 1 and 2: GPR, CGPR, GPOR and CGPOR on a ratings file.

    python train.py experiment=yu2005_cor data.path=ml-100k.inter

The models are the family's (``rankers.gp.collaborative``); this driver draws the item splits, fits
every model on each, and measures the mean absolute error and the zero-one error of each task on its
rated test items, averaged over the tasks (the paper's "averaged over all the users"). It writes
``results.json``, ``table.md`` and ``yu2005_cor.png`` through ``experiments.results``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from experiments.results import write_results
from rankers.gp.collaborative import MODELS, ModelOptions, Split, fit_predict
from rankers.outputs import save_figure, write_text
from rankers.threads import torch_threads

log = logging.getLogger(__name__)

# the paper's Tables 1 and 2 (EachMovie): {model: {n training items: (MAE, zero-one)}}
PAPER = {
    "GPR": {100: (1.1971, 0.7432), 200: (1.1283, 0.7224), 300: (1.1042, 0.7155), 400: (1.0970, 0.7125)},
    "CGPR": {100: (1.1763, 0.7372), 200: (1.1260, 0.7213), 300: (1.1005, 0.7142), 400: (1.0923, 0.7085)},
    "GPOR": {100: (1.2366, 0.6239), 200: (1.2126, 0.6087), 300: (1.0907, 0.5862), 400: (1.0454, 0.5760)},
    "CGPOR": {100: (1.2225, 0.6168), 200: (1.1711, 0.5999), 300: (1.0557, 0.5782), 400: (1.0203, 0.5723)},
}


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


def make_split(data, items: np.ndarray, n_train: int) -> Split:
    """The split whose training items are ``items[:n_train]`` and test items the rest (``data`` a
    :class:`datamodules.collaborative_ratings.CollaborativeRatings`)."""
    train = items[:n_train]
    cols = torch.from_numpy(data.kernel(items, train))
    diag = torch.from_numpy(np.asarray(data.unit[items].multiply(data.unit[items]).sum(1)).ravel())
    labels = torch.from_numpy(data.labels[:, items])
    return Split(cols, diag, labels[:, :n_train], labels[:, n_train:], data.n_ranks)


def table(cfg: DictConfig) -> dict[str, Any]:
    """``experiment=yu2005_cor``'s entry: :func:`tables` on the data group's ratings, options under ``yu2005``."""
    from hydra.utils import instantiate

    options = OmegaConf.to_container(cfg.yu2005, resolve=True)
    return tables(instantiate(cfg.data), **options, out_dir=cfg.paths.output_dir)


def tables(
    data: Any,
    *,
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
    first ``n`` for training). ``data``: a :class:`datamodules.collaborative_ratings.CollaborativeRatings`;
    ``threads``: torch's threads while it runs (restored after; None leaves them); ``model_options``:
    :class:`rankers.gp.collaborative.ModelOptions`. Writes ``results.json`` (``"table": {model: {n:
    {"mae", "zero_one", ...}}}``), ``table.md`` and ``yu2005_cor.png`` into ``out_dir`` (nothing when None)."""
    options = ModelOptions(**model_options)
    largest = max(train_sizes)
    if largest >= data.n_items:
        raise ValueError(f"training size {largest} needs more than the {data.n_items} items the data has")
    with torch_threads(int(threads) if threads else None):  # restored after: no global thread setting
        start = time.perf_counter()
        per_trial, histories, seconds = _measure(data, train_sizes, models, trials, seed, options)
        total = time.perf_counter() - start
    results_table = {
        model: {str(n): {**_cell(per_trial[model][n]), **_paper_cell(model, n)} for n in train_sizes}
        for model in models
    }
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
    write_results(
        out_dir,
        results,
        {
            "table.md": lambda path: write_text(path, text, "table"),
            "yu2005_cor.png": lambda path: plot_table(results_table, train_sizes, models, path),
        },
    )
    return results


def _measure(data, train_sizes, models, trials: int, seed: int, options: ModelOptions):
    """Every model on every split: ``(errors {model: {n: [(mae, zero_one) | None per trial]}},
    histories likewise, fit seconds per model)``."""
    per_trial: dict[str, dict[int, list]] = {m: {n: [] for n in train_sizes} for m in models}
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
    return per_trial, histories, seconds


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
