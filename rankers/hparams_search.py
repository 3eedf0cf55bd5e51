"""Hyperparameter search (``python train.py -m hparams_search=optuna model=...``): what ``train.py``
returns to the sweeper, and the Hydra callback that guards and records a sweep.

Hydra's Optuna sweeper (hydra-optuna-sweeper) runs each trial as an ordinary run and writes
``optimization_results.yaml``. :class:`SearchRecord` adds what it lacks: a search space that names an
option the composed config does not have is refused before any trial runs, every trial (failed ones
with their error) is appended to ``trials.jsonl`` in the sweep directory, and ``trials.png`` plots them.
This module is imported by ``train.py`` at start: it imports nothing heavy at module level.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf

log = logging.getLogger(__name__)

TRIALS_FILE = "trials.jsonl"
PLOT_FILE = "trials.png"


class SearchSpaceError(ValueError):
    """A search that cannot run as asked (refused at the sweep's start, before any trial)."""


def in_search(cfg: DictConfig) -> bool:
    """True inside a trial of ``-m hparams_search=...`` (a multirun with an ``optimized_metric``)."""
    if cfg.get("optimized_metric") is None or not HydraConfig.initialized():
        return False
    return HydraConfig.get().mode == RunMode.MULTIRUN


def objective(cfg: DictConfig, results: Any) -> float | None:
    """The value a sweeper optimizes: ``results["val"][name]`` for ``optimized_metric: val/<name>``, the
    very float ``results.json`` holds. Without ``optimized_metric``: val ndcg@10, else val rank_loss
    (None when the run validated neither)."""
    val = results.get("val", {}) if isinstance(results, dict) else {}
    metric = cfg.get("optimized_metric")
    if metric is None:
        return val.get("ndcg@10", val.get("rank_loss"))
    name = str(metric).removeprefix("val/")
    if name not in val:
        raise KeyError(
            f"optimized_metric={metric}: results.json's val has no {name!r} (it has {sorted(val)}); "
            "a search needs a validation split (data.val=... or a data.val_fraction above 0)"
        )
    return val[name]


def searched_keys(config: DictConfig) -> list[tuple[str, str]]:
    """``(key, where)`` for every option a sweep varies: ``hydra.sweeper.params`` (the search space file)
    and the sweep expressions of the command line (``key=interval(...)``, ``key=choice(...)``)."""
    params = config.hydra.sweeper.get("params") or {}
    keys = [(str(key), "hydra.sweeper.params") for key in params]
    parsed = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
    keys += [(override.get_key_element(), "the command line") for override in parsed if override.is_sweep_override()]
    return keys


def _has_key(config: DictConfig, dotted: str) -> bool:
    """Whether ``a.b.c`` (list items by index: ``model.loss.0.sigma``) names an option of ``config``."""
    node: Any = config
    for part in dotted.split("."):
        if isinstance(node, DictConfig) and part in node:
            node = node._get_node(part)
        elif isinstance(node, ListConfig) and part.isdigit() and int(part) < len(node):
            node = node._get_node(int(part))
        else:
            return False
    return True


def check_search(config: DictConfig) -> None:
    """Refuse, before any trial, a searched option the composed config does not have (``+key=`` adds
    one on purpose; a config group such as ``model=choice(...)`` is a choice, not an option), and a
    search without a validation split (every trial would fail to return its metric)."""
    choices = config.hydra.runtime.get("choices") or {}
    model = choices.get("model", "?")
    unknown = []
    for key, where in searched_keys(config):
        name = key.lstrip("+~")
        if key.startswith(("+", "~")) or name in choices or _has_key(config, name):
            continue
        unknown.append(f"{name} (from {where})")
    if unknown:
        raise SearchSpaceError(
            f"the search space names options model={model} does not have: {', '.join(unknown)}; "
            f"`python train.py model={model} --cfg job` lists its options (conf/hparams_search/space/{model}.yaml)"
        )
    data = config.get("data") or {}
    if "val" in data and "val_fraction" in data and data.get("val") is None and not data.get("val_fraction"):
        raise SearchSpaceError(
            f"model={model} holds out no validation queries (data.val is null, data.val_fraction is 0): "
            "the trials would have no validation metric to compare; give data.val=... or data.val_fraction=0.2"
        )


def trial_record(config: DictConfig, job_return: JobReturn) -> dict[str, Any]:
    """One line of ``trials.jsonl``: the trial's number, its overrides, ``complete`` with the value it
    returned, or ``fail`` with the error (an exception, or a value Optuna cannot take)."""
    record: dict[str, Any] = {
        "trial": int(config.hydra.job.num),
        "overrides": list(job_return.overrides or []),
        "dir": str(config.hydra.runtime.output_dir),
    }
    if job_return.status != JobStatus.COMPLETED:
        error = job_return._return_value  # the exception; .return_value would raise it
        return {**record, "state": "fail", "value": None, "error": f"{type(error).__name__}: {error}"}
    value = job_return._return_value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return {**record, "state": "fail", "value": None, "error": f"returned {value!r}, not a number"}
    if not math.isfinite(number):
        return {**record, "state": "fail", "value": None, "error": f"returned {number}"}
    return {**record, "state": "complete", "value": number}


def read_trials(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """The records :class:`SearchRecord` appended, in trial order."""
    path = Path(sweep_dir) / TRIALS_FILE
    if not path.exists():
        return []
    return sorted(
        (json.loads(line) for line in path.read_text().splitlines() if line.strip()), key=lambda r: r["trial"]
    )


def _params(record: dict[str, Any]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in record["overrides"] if "=" in item)


def _as_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def plot_trials(trials: list[dict[str, Any]], path: str | Path, *, maximize: bool, metric: str) -> Path | None:
    """``trials.png``: the value of every trial in order with the running best (failed trials as red
    crosses on the axis' floor), then the value against each option that varied across trials."""
    if not trials:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    params = [_params(t) for t in trials]
    varied = [key for key in params[0] if len({p.get(key) for p in params}) > 1][:8]
    columns = min(4, 1 + len(varied))
    rows = -(-(1 + len(varied)) // columns)
    fig, grid = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), squeeze=False)
    axes = list(grid.flat)
    for unused in axes[1 + len(varied) :]:
        unused.set_visible(False)
    done = [(t["trial"], t["value"], p) for t, p in zip(trials, params) if t["state"] == "complete"]
    failed = [t["trial"] for t in trials if t["state"] != "complete"]
    ax = axes[0]
    if done:
        xs, ys = [d[0] for d in done], [d[1] for d in done]
        best = [max(ys[: i + 1]) if maximize else min(ys[: i + 1]) for i in range(len(ys))]
        ax.plot(xs, ys, "o", color="C0", label="trial")
        ax.step(xs, best, where="post", color="C1", label="best so far")
    if failed:
        floor = ax.get_ylim()[0] if done else 0.0
        ax.plot(failed, [floor] * len(failed), "x", color="red", markersize=9, label=f"failed ({len(failed)})")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set(xlabel="trial", ylabel=metric, title=f"{len(done)} trials, {'max' if maximize else 'min'}imized")
    ax.legend(fontsize=8)
    for ax, key in zip(axes[1:], varied):
        texts = [d[2].get(key, "") for d in done]
        numbers = [_as_number(t) for t in texts]
        xs = numbers if all(n is not None for n in numbers) else texts
        ax.plot(xs, [d[1] for d in done], "o", color="C0")
        if xs is numbers and numbers and min(numbers) > 0 and max(numbers) / min(numbers) > 20:
            ax.set_xscale("log")
        ax.set(xlabel=key, ylabel=metric)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


class SearchRecord(Callback):
    """Hydra callback of ``hparams_search``: checks the search space at the sweep's start, appends each
    trial to ``trials.jsonl`` as it ends, and draws ``trials.png`` when the sweep ends."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_search(config)
        directory = Path(config.hydra.sweep.dir)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / TRIALS_FILE).unlink(missing_ok=True)  # this sweep's trials only

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if config.hydra.mode != RunMode.MULTIRUN:
            return
        record = trial_record(config, job_return)
        if record["state"] == "fail":
            log.warning("trial %d failed: %s", record["trial"], record["error"])
        with open(Path(config.hydra.sweep.dir) / TRIALS_FILE, "a") as out:
            out.write(json.dumps(record) + "\n")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        directory = Path(config.hydra.sweep.dir)
        trials = read_trials(directory)
        failed = sum(t["state"] != "complete" for t in trials)
        log.info("%d trials, %d failed: %s", len(trials), failed, directory / TRIALS_FILE)
        maximize = OmegaConf.select(config, "hydra.sweeper.direction") != "minimize"
        metric = str(OmegaConf.select(config, "optimized_metric", default="value"))
        try:
            path = plot_trials(trials, directory / PLOT_FILE, maximize=maximize, metric=metric)
        except Exception as error:  # a plot never fails a sweep that ran
            log.warning("no %s: %s: %s", PLOT_FILE, type(error).__name__, error)
            return
        if path is not None:
            log.info("trials plot: %s", path)
