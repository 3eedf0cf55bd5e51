"""Crammer & Singer (2001), "Pranking with ranking", section 5: the EachMovie run on any ratings file.

    python train.py experiment=crammer_singer2001_cf data.path=ratings.dat

Per trial a random target user (``datamodules.ratings.CrammerSingerRatings``), its first ratings in
time order fed online; PRank and Widrow-Hoff predict each rating before they update on it. The
measure is the time-averaged online rank loss ``1/t sum_s |y_hat_s - y_s|`` over all trials at once,
written to ``online.md`` and ``results.json``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from datamodules.ratings import RatingsProtocol
from experiments.results import write_results
from experiments.tables import interval_row, mean_and_interval
from metrics.functional import rank_loss
from rankers.outputs import write_text
from rankers.perceptron.ensemble import PRankEnsemble, WidrowHoff


@dataclass(frozen=True)
class OnlineOptions:
    """The run's learners; ``crammer_singer_cf:`` of conf/experiment/crammer_singer2001_cf.yaml states
    the same values (tests/experiments/test_options.py holds them equal). The trials are the data
    group's (``data=ratings_crammer_singer``)."""

    etas: Sequence[float] = (1.0, 0.1, 0.01)
    seed: int = 0
    device: str | None = None


def main(cfg: DictConfig) -> dict[str, Any]:
    """``experiment=crammer_singer2001_cf``'s entry: :func:`online_table` on the data group's protocol
    with ``cfg.crammer_singer_cf``, written to the run directory."""
    options = OmegaConf.to_container(cfg.crammer_singer_cf, resolve=True)
    return online_table(instantiate(cfg.data), OnlineOptions(**options), out_dir=cfg.paths.output_dir)


def online_table(
    datamodule: RatingsProtocol, options: OnlineOptions = OnlineOptions(), *, out_dir: str | Path | None = None
) -> dict[str, Any]:
    """The time-averaged online rank loss of PRank and Widrow-Hoff (predictions made before each
    update), over all trials at once.

    Returns ``{"table": {row: {"mean", "ci95", "per_trial"}}, "test": ..., "curves": {row: [mean at
    round t]}, ...}``; the table is the loss after the last round (with ``n_test`` > 0 also ``"test"``:
    the last hypothesis on the held-out ratings, the paper's batch setting).
    """
    start = time.perf_counter()
    etas = list(options.etas)
    target = torch.device(options.device or "cpu")
    trials = datamodule.trials()
    labels = trials.train_y.to(target)
    rounds = torch.arange(1, labels.shape[1] + 1, device=target)
    online: dict[str, torch.Tensor] = {}  # row -> [R, T] time-averaged loss after each round
    test: dict[str, torch.Tensor] = {}
    prank = PRankEnsemble(trials.n_features, trials.n_ranks, n_runs=trials.n_trials, seed=options.seed, device=target)
    predicted = prank.partial_fit(trials.train_x, trials.train_y)[:, 0]
    online["PRank"] = (predicted - labels).abs().cumsum(-1) / rounds
    wh = WidrowHoff(trials.n_features, trials.n_ranks + 1, eta=etas, n_runs=trials.n_trials, device=target)
    predicted_wh = wh.partial_fit(trials.train_x, trials.train_y + 1).clamp(1, trials.n_ranks) - 1  # [R, E, T]
    for e, eta in enumerate(etas):
        online[f"WH eta={eta:g}"] = (predicted_wh[:, e] - labels).abs().cumsum(-1) / rounds
    if trials.test_y.shape[1]:
        test_y = trials.test_y.to(target)
        test["PRank"] = rank_loss(prank.predict(trials.test_x, "bpm"), test_y)
        wh_test = wh.predict(trials.test_x).clamp(1, trials.n_ranks) - 1
        for e, eta in enumerate(etas):
            test[f"WH eta={eta:g}"] = rank_loss(wh_test[:, e], test_y)
    table = {name: interval_row(curve[:, -1]) for name, curve in online.items()}
    results = {
        "table": table,
        "test": {name: interval_row(values) for name, values in test.items()},
        "curves": {name: curve.mean(0).cpu().tolist() for name, curve in online.items()},
        "data": trials.statistics,
        "targets": trials.targets,
        "seconds": time.perf_counter() - start,
    }
    text = format_online(results, labels.shape[1], trials.n_trials, trials.n_features, target)
    print(text)
    write_results(out_dir, results, {"online.md": lambda path: write_text(path, text, "table")})
    return results


def format_online(results: dict[str, Any], rounds: int, n_trials: int, features: int, device: torch.device) -> str:
    """The online table as Markdown: each row's loss after the last round, and on the test ratings."""
    lines = [
        f"Time-averaged online rank loss after {rounds} rounds, mean ± 95% Student-t interval over "
        f"{n_trials} trials (a random target user each, {features} feature users); "
        f"{results['seconds']:.1f} s on {device}.",
        "",
        "| algorithm | online | test |",
        "|---|---|---|",
    ]
    for name, row in results["table"].items():
        held_out = results["test"].get(name)
        shown = mean_and_interval(held_out) if held_out else "-"
        lines.append(f"| {name} | {mean_and_interval(row)} | {shown} |")
    return "\n".join(lines) + "\n"
