"""The harness that runs every ``rankers.learner.Learner`` under ``train.py``.

It owns what each family used to re-implement inside a LightningModule with a no-op optimizer:
whole-split collection from the datamodule (once, here), the single-process check, the fit (or one
``partial_fit`` per epoch for a stream), TensorBoard scalars through the configured loggers, atomic
checkpoints carrying the run's identity, resume from ``ckpt_path=`` (refusing another run's
checkpoint), val/test list metrics (``metrics.ranking_metrics``), and the export (``rankers.export``).

``rankers.pipeline.fit`` / ``report`` route an instantiated ``Learner`` here; results.json has the
keys the Lightning path writes.
"""

from __future__ import annotations

import io
import json
import logging
import math
import signal
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from torch import Tensor

from metrics import monitor_mode, ranking_metrics
from rankers import budget
from rankers.learner import LabelSplit, Learner, QuerySplit, Split
from rankers.list_metrics import name_evaluated, random_baseline
from rankers.outputs import atomic_directory, atomic_file, moved, write_results
from rankers.report import write_report
from rankers.run_identity import KEY, refuse_foreign, run_config, run_identity
from rankers.threads import torch_threads

log = logging.getLogger(__name__)

# exit codes of an interrupted run (128 + the signal's number, as shells report them; as rankers.pipeline)
EXIT_SIGTERM, EXIT_SIGINT = 143, 130
EVAL_CHUNK = 256  # queries scored at once in evaluation: bounded padded memory


# -- splits ------------------------------------------------------------------------------------
def _from_batches(batches: Iterable[dict]) -> Split | None:
    """A split from iterated batches: padded query batches (``mask``), ordinal stream slices
    (``features [B, d]``, ``labels [B]``: the whole stream is one query, in stream order, marked
    ``stream``), or multilabel batches (``labels [B, K]`` without a mask: a ``LabelSplit``)."""
    features, labels, lengths = [], [], []
    kinds = set()
    for batch in batches:
        x, y = batch["features"].cpu(), batch["labels"].cpu()
        if "mask" in batch:
            kinds.add("queries")
            mask = batch["mask"].cpu()
            features.append(x[mask])
            labels.append(y[mask].float())
            lengths.extend(mask.sum(1).tolist())
        else:
            kinds.add("multilabel" if y.ndim == 2 else "stream")
            features.append(x)
            labels.append(y)
    if len(kinds) > 1:
        raise ValueError(f"a loader mixes batch kinds {sorted(kinds)}")
    if not features:
        return None
    if kinds == {"multilabel"}:
        return LabelSplit(torch.cat(features).float(), torch.cat(labels).float())
    if kinds == {"stream"}:
        lengths = [sum(len(y) for y in labels)]
    offsets = torch.zeros(len(lengths) + 1, dtype=torch.long)
    offsets[1:] = torch.tensor(lengths, dtype=torch.long).cumsum(0)
    return QuerySplit(torch.cat(features).float(), torch.cat(labels).float(), offsets, stream=kinds == {"stream"})


def collect_split(loader: Any) -> Split | None:
    """The whole split behind a loader, every document of every query (never list-sampled batches).

    The one place that knows the loaders' insides: a ``QueryDataset`` (``features``, ``labels``,
    ``offsets``), ``DeviceBatches`` (``starts``, ``lengths``), anything else iterated once.
    """
    if loader is None:
        return None
    dataset = getattr(loader, "dataset", None)
    if all(hasattr(dataset, name) for name in ("features", "labels", "offsets")):  # QueryDataset
        parts = dataset.features, dataset.labels, dataset.offsets
    elif all(hasattr(loader, name) for name in ("features", "labels", "starts", "lengths")):  # DeviceBatches
        offsets = torch.cat([loader.starts, loader.starts[-1:] + loader.lengths[-1:]])
        parts = loader.features, loader.labels, offsets
    else:
        return _from_batches(loader)
    features, labels, offsets = (torch.as_tensor(t).cpu() for t in parts)
    return QuerySplit(features.float(), labels.float(), offsets.long())


def collect_splits(datamodule: Any, *, test: bool) -> dict[str, Split]:
    """``train`` and, when the datamodule has them, ``val`` and ``test``."""
    splits = {"train": collect_split(datamodule.train_dataloader())}
    if getattr(datamodule, "has_validation", True):
        val = collect_split(datamodule.val_dataloader())
        if val is not None:
            splits["val"] = val
    if test and getattr(datamodule, "has_test", True):
        datamodule.setup("test")
        held_out = collect_split(datamodule.test_dataloader())
        if held_out is not None:
            splits["test"] = held_out
    if splits["train"] is None:
        raise ValueError("the training loader is empty: nothing to fit")
    return splits


def split_is_stream(split: Split) -> bool:
    """An ordinal stream collected as one query (the data has no query structure)."""
    return isinstance(split, QuerySplit) and split.stream


# -- the single-process check ------------------------------------------------------------------
def refuse_distributed(cfg: DictConfig, what: str, *, otherwise: str = "") -> None:
    """The one refusal of a distributed trainer for work that runs in this process (every learner,
    and ``model.epochs_without_validation=cv``'s fold fits): a DDP trainer would relaunch it on
    every rank. ``what`` names the work; ``otherwise`` adds the user's other ways out."""
    trainer = cfg.get("trainer") or {}
    devices, strategy = trainer.get("devices", 1), str(trainer.get("strategy", "") or "")
    nodes = trainer.get("num_nodes", 1)
    if "ddp" in strategy.lower() or devices not in (1, "1", None, "auto") or nodes not in (1, "1"):
        raise ValueError(
            f"{what} fits in one process: run it with trainer.devices=1 and no DDP strategy "
            f"(got devices={devices}, strategy={strategy!r}, num_nodes={nodes}){otherwise}"
        )


def trainer_device(cfg: DictConfig) -> torch.device:
    """The device ``trainer.accelerator`` asks for (``gpu``/``cuda`` when CUDA is there, else CPU)."""
    accelerator = str((cfg.get("trainer") or {}).get("accelerator", "cpu"))
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ValueError(f"trainer.accelerator={accelerator} but CUDA is not available")
        return torch.device("cuda")
    return torch.device("cpu")


# -- run identity and checkpoints --------------------------------------------------------------
def save_checkpoint(path: Path, learner: Learner, identity: dict[str, str], epoch: int, **extra: Any) -> None:
    """``extra`` holds ``run_config`` (``rankers.run_identity``: what a refusal compares). Write atomically
    (``rankers.outputs.atomic_file``): a crash or a full disk never leaves half a
    checkpoint that a resume would load; a failed write is one line naming the file."""
    checkpoint = {
        "state_dict": learner.state_dict(),
        "hyper_parameters": dict(learner.hparams),
        KEY: identity,
        "epoch": epoch,
        **extra,
    }
    buffer = io.BytesIO()  # serialized in memory: Python's write then reports ENOSPC (torch's C++ stream cannot)
    torch.save(checkpoint, buffer)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path, "checkpoint") as partial:
        partial.write_bytes(buffer.getbuffer())


def load_checkpoint(path: str | Path, learner: Learner, cfg: DictConfig) -> dict[str, Any]:
    """Load a checkpoint into ``learner``; refuse one written by another run (``RunConflict``), naming
    both and the settings that differ."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    refuse_foreign(checkpoint, run_identity(cfg), path, run_config(cfg))
    learner.load_state_dict(checkpoint["state_dict"])
    return checkpoint


# -- logging and stopping ----------------------------------------------------------------------
@dataclass
class HarnessLog:
    """``FitLog`` over the configured Lightning loggers; ``should_stop`` after SIGTERM/SIGINT."""

    loggers: list[Any]
    signal_name: str | None = None
    # each scalar's last value: a fit with nothing held out reports its ``train/...`` figures under "train"
    last: dict[str, float] = field(default_factory=dict)

    def scalar(self, name: str, value: float, step: int) -> None:
        self.last[name] = float(value)
        for logger in self.loggers:
            logger.log_metrics({name: float(value)}, step=int(step))

    def should_stop(self) -> bool:
        # a signal, or model=auto's budget (rankers.budget: a deadline, polled here at the learner's safe points)
        return self.signal_name is not None or budget.expired()

    @contextmanager
    def catching_signals(self) -> Iterator[None]:
        """While fitting, SIGTERM and SIGINT ask the learner to stop at its next safe point."""
        names = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}

        def handler(signum: int, frame: Any) -> None:
            self.signal_name = names[signum]

        try:
            previous = {s: signal.signal(s, handler) for s in names}
        except ValueError:  # not the main thread: signals stay as they are
            yield
            return
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)


# -- evaluation --------------------------------------------------------------------------------
def scores_of(learner: Learner, split: QuerySplit) -> Tensor:
    """The learner's scores ``[N]`` of every document of ``split`` (flat, in split order)."""
    device = learner.device
    parts = []
    with torch.no_grad():
        for first in range(0, split.n_queries, EVAL_CHUNK):
            batch = split.padded(slice(first, first + EVAL_CHUNK))
            mask = batch["mask"].to(device)
            parts.append(learner(batch["features"].to(device), mask)[mask].float().cpu())
    return torch.cat(parts) if parts else torch.zeros(0)


def evaluate(learner: Learner, split: Split, stage: str) -> dict[str, float]:
    """``ndcg@k``, ``map``, ``mrr`` of the learner's scores on a query split, plus the family's own
    metrics (``Learner.evaluate``)."""
    learner.eval()
    if isinstance(split, LabelSplit):
        return learner.evaluate(split, None, stage=stage)
    scores = scores_of(learner, split)
    results: dict[str, float] = {}
    if not split_is_stream(split) or learner.ranks_streams:
        metrics = ranking_metrics(learner.ks, gain=learner.gain, empty=learner.empty)
        padded_scores = QuerySplit(scores[:, None], split.labels, split.offsets).padded()["features"][..., 0]
        for first in range(0, split.n_queries, EVAL_CHUNK):
            part = slice(first, first + EVAL_CHUNK)
            batch = split.padded(part)
            for metric in metrics.values():
                metric.update(padded_scores[part], batch["labels"], batch["mask"])
        results = {name: float(metric.compute()) for name, metric in metrics.items()}
    return {**results, **learner.evaluate(split, scores, stage=stage)}


# -- fit ---------------------------------------------------------------------------------------
@dataclass
class LearnerFit:
    """A fitted learner; the attributes ``rankers.pipeline.Fitted`` has, so that ``model=auto``'s
    fold fits read either alike."""

    model: Learner
    splits: dict[str, Split]
    fit_seconds: float
    epochs: int
    validating: bool
    trainer: None = None
    selection: Any = None
    selection_seconds: float = 0.0
    best_checkpoint: str = ""
    val_metrics: dict[str, float] | None = None  # of the model evaluated and exported
    train_metrics: dict[str, float] = field(default_factory=dict)  # the fit's last ``train/...`` scalars


def _better(value: float, best: float | None, mode: str) -> bool:
    return best is None or (value < best if mode == "min" else value > best)


def fit(cfg: DictConfig, learner: Learner, datamodule: Any, out: Path, loggers: list[Any]) -> LearnerFit:
    """Collect the splits, place the learner, fit it (resuming from ``cfg.ckpt_path``), checkpoint."""
    name = type(learner).__name__
    refuse_distributed(cfg, name)
    splits = collect_splits(datamodule, test=False)
    device = learner.device_policy(trainer_device(cfg))
    learner.to(device)
    identity = run_identity(cfg)
    last = out / "checkpoints" / "last.ckpt"
    resumed: dict[str, Any] = {}
    if cfg.get("ckpt_path"):
        resumed = load_checkpoint(cfg.ckpt_path, learner, cfg)
        learner.to(device)
        log.info("resumed %s from %s at epoch %d", name, cfg.ckpt_path, int(resumed.get("epoch", 0)))
    train, val = splits["train"].to(device), splits.get("val")
    fit_log = HarnessLog(loggers)
    threads = getattr(learner, "cpu_threads", None) if device.type == "cpu" else None
    started = time.perf_counter()
    with torch_threads(threads), fit_log.catching_signals():
        if learner.streaming:  # last.ckpt after every epoch
            epochs, best_path = _stream(cfg, learner, train, val, fit_log, identity, out, resumed)
        else:
            # resumed or not: a learner continues from its state (RankBoost's rounds so far)
            learner.fit(train, None if val is None else val.to(device), log=fit_log)
            epochs, best_path = 1, ""
            save_checkpoint(last, learner, identity, epochs, run_config=run_config(cfg))
    fit_seconds = time.perf_counter() - started
    if fit_log.signal_name is not None:  # a budget's stop is not an interruption: model=auto drops the fit
        _exit_interrupted(fit_log.signal_name, epochs, fit_seconds, last, out)
    if best_path:  # the streams' best validated epoch is what is evaluated and exported (as Lightning's)
        learner.load_state_dict(torch.load(best_path, map_location="cpu", weights_only=False)["state_dict"])
        learner.to(device)
    val_metrics = None
    if val is not None:  # the fitted (or best) model's validation metrics, logged as Lightning's
        with torch_threads(threads):
            val_metrics = evaluate(learner, val, "val")
        for key, value in val_metrics.items():
            fit_log.scalar(f"val/{key}", value, epochs)
    best = best_path or str(last)
    trained_on = {key.removeprefix("train/"): value for key, value in fit_log.last.items() if key.startswith("train/")}
    return LearnerFit(
        learner,
        splits,
        fit_seconds,
        epochs,
        val is not None,
        best_checkpoint=best,
        val_metrics=val_metrics,
        train_metrics=trained_on,
    )


def _stream(
    cfg: DictConfig,
    learner: Learner,
    train: Split,
    val: Split | None,
    fit_log: HarnessLog,
    identity: dict[str, str],
    out: Path,
    resumed: dict[str, Any],
) -> tuple[int, str]:
    """One ``partial_fit`` per epoch; validation after each, the best epoch checkpointed, and
    ``last.ckpt`` after every epoch (with the best so far, so that a resumed run compares with it)."""
    total = int(getattr(learner, "epochs", None) or cfg.trainer.max_epochs)
    mode = monitor_mode(learner.monitor)
    done = int(resumed.get("epoch", 0))
    best, best_path = resumed.get("best_value"), resumed.get("best_path", "")
    checkpoints = out / "checkpoints"
    for epoch in range(done, total):
        learner.train()
        learner.partial_fit(train, epoch=epoch, log=fit_log)
        learner.select_on(val)
        done = epoch + 1
        if val is not None:
            values = evaluate(learner, val, "val")
            for key, value in values.items():
                fit_log.scalar(f"val/{key}", value, done)
            key = learner.monitor.removeprefix("val/")
            if key in values and _better(values[key], best, mode):
                best, best_path = values[key], str(checkpoints / "best.ckpt")
                save_checkpoint(
                    Path(best_path),
                    learner,
                    identity,
                    done,
                    monitor={learner.monitor: best},
                    run_config=run_config(cfg),
                )
        save_checkpoint(
            checkpoints / "last.ckpt",
            learner,
            identity,
            done,
            best_value=best,
            best_path=best_path,
            run_config=run_config(cfg),
        )
        if fit_log.should_stop():
            return done, ""
    return done, best_path


def _exit_interrupted(signal_name: str | None, epochs: int, seconds: float, last: Path, out: Path) -> None:
    record = {"interrupted": signal_name, "epochs": epochs, "fit_seconds": seconds, "resume": f"ckpt_path={last}"}
    write_results(out / "results.json", record)
    log.error("interrupted by %s after %d epochs; resume with ckpt_path=%s", signal_name, epochs, last)
    raise SystemExit(EXIT_SIGTERM if signal_name == "SIGTERM" else EXIT_SIGINT)


# -- report ------------------------------------------------------------------------------------
def report(
    cfg: DictConfig, fitted: LearnerFit, datamodule: Any, out: Path, *, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Validate and test the fitted learner, export its scorer, write ``results.json`` and ``report.png``."""
    learner = fitted.model
    threads = getattr(learner, "cpu_threads", None) if learner.device.type == "cpu" else None
    with torch_threads(threads):
        results: dict[str, Any] = {
            "val": fitted.val_metrics if fitted.val_metrics is not None else {},
            "fit_seconds": fitted.fit_seconds,
            "epochs": fitted.epochs,
            "best_checkpoint": fitted.best_checkpoint,
            "seed": cfg.seed,
            "world_size": 1,
            "num_nodes": 1,
            "data": getattr(datamodule, "statistics", {}),
            "conventions": {"gain": learner.gain, "empty": learner.empty, "ties": "list position"},
            **learner.fit_results(),
        }
        if cfg.get("test", True):
            test = collect_splits(datamodule, test=True).get("test")
            if test is not None:
                results["test"] = evaluate(learner, test, "test")
                baseline = random_baseline(datamodule, int(cfg.seed))
                if baseline:
                    results["test_random_scores"] = baseline
    _refuse_divergence(learner, results, out)
    name_evaluated(results, datamodule, fitted.train_metrics)
    if cfg.get("export", True):
        with atomic_directory(out / "export", "export") as partial:  # whole or not at all
            results["export"] = moved(learner.export_model(partial), partial, out / "export")
    results.update(extra or {})
    write_results(out / "results.json", results)
    try:
        write_report(out, results, title=f"{cfg.get('task_name', 'train')}: {cfg.model.get('_target_', '')}")
    except Exception as error:  # a plot that fails is a warning, never a failed run that trained
        log.warning("no report.png: %s: %s", type(error).__name__, error)
    log.info("results: %s", json.dumps({k: results.get(k) for k in ("val", "test", "fit_seconds")}))
    return results


def _refuse_divergence(learner: Learner, results: dict[str, Any], out: Path) -> None:
    bad = [f"{s}/{k}" for s in ("val", "test") for k, v in results.get(s, {}).items() if not math.isfinite(v)]
    # buffers may hold infinities by design (a leaf's +inf threshold); NaN is never a fitted state
    state = learner.state_dict().items()
    bad += [f"state {k}" for k, v in state if isinstance(v, Tensor) and v.is_floating_point() and v.isnan().any()]
    if bad:
        message = f"the fit is not finite: {', '.join(bad[:8])}"
        write_results(out / "results.json", {**results, "error": message})
        raise RuntimeError(message)
