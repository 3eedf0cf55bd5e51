"""What ``train.py`` does, as a function the tests can call: fit, evaluate, write results, export."""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from pytorch_lightning.trainer.states import TrainerStatus
from pytorch_lightning.utilities.exceptions import SIGTERMException

from rankers import harness
from rankers.callbacks import RunIdentity
from rankers.epoch_selection import BY_CROSS_VALIDATION, EpochSelection, refuse_distributed, select_epochs
from rankers.learner import Learner
from rankers.list_metrics import RESULT_KEYS, name_evaluated, random_baseline  # noqa: F401  (re-exported)
from rankers.outputs import AtomicCheckpointIO, atomic_directory, moved, write_results
from rankers.report import write_report
from rankers.resolvers import first_given  # noqa: F401  (registers the config resolvers; re-exported)
from rankers.run_identity import refuse_foreign_checkpoint, refuse_reused_directory

log = logging.getLogger(__name__)


def _refuse_unused_variant(cfg: DictConfig) -> None:
    """``variant=...`` picks a pairwise perceptron variant; under any other model it would do nothing."""
    if cfg.get("variant") is not None and "variant" not in cfg.model:
        raise ValueError(
            f"variant={cfg.variant} applies to model=pairwise_perceptron or model=committee_perceptron, "
            f"not to {cfg.model.get('_target_')}"
        )


def _instantiate_group(group: DictConfig | dict | None) -> list[Any]:
    return [instantiate(item) for item in (group or {}).values() if item is not None and "_target_" in item]


def _without_validation(group: DictConfig | None) -> dict[str, Any]:
    """A callbacks group for a run that validates nothing: early stopping goes, checkpoints watch no
    metric (the last epoch's model is the one kept)."""
    kept = {}
    for name, item in (group or {}).items():
        if item is None or str(item.get("_target_", "")).endswith("EarlyStopping"):
            continue
        options = OmegaConf.to_container(item, resolve=True)
        if "monitor" in options:
            options["monitor"] = None
            options.pop("mode", None)
        kept[name] = options
    return kept


def _refuse_monitored_scheduler(cfg: DictConfig) -> None:
    """A scheduler that steps on a validation metric cannot run without a validation split."""
    scheduler = cfg.model.get("scheduler") if "model" in cfg else None
    if scheduler is not None and "ReduceLROnPlateau" in str(scheduler.get("_target_", "")):
        raise ValueError(
            "model.scheduler ReduceLROnPlateau steps on a validation metric, but data.val_fraction=0 "
            "leaves no validation split: give data.val=..., a data.val_fraction > 0, or another scheduler"
        )


def _flat_hparams(cfg: DictConfig) -> dict[str, Any]:
    """The whole resolved config as ``a/b/c: value`` for TensorBoard's hparams tab."""
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}/")
        else:
            flat[prefix.rstrip("/")] = node if isinstance(node, int | float | str | bool) else str(node)

    # `hydra` is present only in composed (test) configs; its sweep keys do not resolve in a single run
    walk(
        {
            key: OmegaConf.to_container(cfg[key], resolve=True) if OmegaConf.is_config(cfg[key]) else cfg[key]
            for key in cfg
            if key != "hydra"
        },
        "",
    )
    return flat


def _stage_metrics(results: list[dict[str, float]], stage: str) -> dict[str, float]:
    """``{"ndcg@10": .., "map": .., ...}`` from Lightning's ``[{"test/ndcg@10": ..}]``.

    The loss and running bests (``val/ndcg@10_best``) are left out: they describe the fit, not the stage.
    """
    merged = {key: value for result in results for key, value in result.items()}
    prefix = f"{stage}/"
    return {
        key.removeprefix(prefix): float(value)
        for key, value in merged.items()
        if key.startswith(prefix) and key != f"{prefix}loss" and not key.endswith("_best")
    }


ROOT = Path(__file__).resolve().parents[1]

# exit codes of an interrupted run (128 + the signal's number, as shells report them)
EXIT_SIGTERM, EXIT_SIGINT = 143, 130


def _fit_or_exit(trainer: pl.Trainer, model: pl.LightningModule, datamodule: Any, cfg: DictConfig, out: Path) -> float:
    """``trainer.fit``; the fit's seconds. An interrupted fit (SIGTERM from a scheduler, Ctrl-C) writes
    ``results.json`` marked interrupted, naming the checkpoint to resume from, and exits non-zero, so
    that no scheduler mistakes it for a finished run."""
    start = time.perf_counter()
    try:
        trainer.fit(model, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    except SystemExit as interruption:  # SIGTERMException; Lightning turns Ctrl-C into sys.exit(1)
        if trainer.state.status != TrainerStatus.INTERRUPTED:
            raise
        raise _interrupted(trainer, interruption, out, "fit", time.perf_counter() - start) from interruption
    return time.perf_counter() - start


def _interrupted(trainer: pl.Trainer, interruption: SystemExit, out: Path, during: str, seconds: float) -> SystemExit:
    """Write ``results.json`` marked interrupted (``during`` the fit, or the validation or test after
    it), naming the checkpoint to resume from, and the SystemExit with the signal's exit status."""
    signal_name, code = (
        ("SIGTERM", EXIT_SIGTERM) if isinstance(interruption, SIGTERMException) else ("SIGINT", EXIT_SIGINT)
    )
    saver = trainer.checkpoint_callback
    last = Path(saver.dirpath) / "last.ckpt" if saver is not None and saver.dirpath else None
    resume = str(last) if last is not None and last.exists() else None
    if trainer.is_global_zero:
        record = {
            "interrupted": signal_name,
            "during": during,
            "epochs": trainer.current_epoch,
            "fit_seconds": seconds,
            "resume": f"ckpt_path={resume}" if resume else "no checkpoint yet: start again",
        }
        write_results(out / "results.json", record)
    where = f"after {trainer.current_epoch} epochs" if during == "fit" else f"during {during}, after the fit"
    log.error("interrupted by %s %s; resume with %s", signal_name, where, resume)
    return SystemExit(code)


def _evaluate_or_exit(fitted: Fitted, datamodule: Any, ckpt: str | None, out: Path, stage: str) -> list[dict]:
    """``trainer.validate`` or ``trainer.test`` of a finished fit. A SIGTERM or Ctrl-C here ends the run
    as one during the fit does: Lightning's evaluation loop raises a bare ``SystemExit`` for SIGTERM,
    which would otherwise end the process with status 0 and no results."""
    run = fitted.trainer.validate if stage == "validation" else fitted.trainer.test
    try:
        return run(fitted.model, datamodule=datamodule, ckpt_path=ckpt, verbose=False)
    except SystemExit as interruption:
        if fitted.trainer.state.status != TrainerStatus.INTERRUPTED:
            raise
        raise _interrupted(fitted.trainer, interruption, out, stage, fitted.fit_seconds) from interruption


def compose_config(overrides: list[str], *, output_dir: str | Path, data_dir: str | Path | None = None) -> DictConfig:
    """The config ``train.py`` would run with these overrides, composed outside a Hydra app (tests,
    benchmarks, notebooks); the run writes to ``output_dir``, generated data and caches go under
    ``data_dir`` when given."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    with open_dict(cfg):
        cfg.paths.root_dir = str(ROOT)
        if data_dir is not None:
            cfg.paths.data_dir = str(data_dir)
            cfg.paths.cache_dir = str(Path(data_dir) / "parsed")
        cfg.paths.output_dir = str(output_dir)
    HydraConfig().set_config(cfg)
    return cfg


def _refuse_divergence(model: pl.LightningModule, results: dict[str, Any], out: Path | None) -> None:
    """A run whose weights or metrics are not finite (training diverged) must not end as a success
    or export a NaN scorer: ``results.json`` says what is not finite and the run fails."""
    bad = [
        f"{stage}/{name}"
        for stage in ("val", "test")
        for name, v in results.get(stage, {}).items()
        if not math.isfinite(v)
    ]
    bad += [f"parameter {name}" for name, value in model.named_parameters() if not torch.isfinite(value).all()]
    if not bad:
        return
    message = f"training diverged: not finite: {', '.join(bad[:8])}; try a lower model.optimizer.lr"
    if out is not None:
        write_results(out / "results.json", {**results, "error": message})
    raise RuntimeError(message)


def _select_epochs_if_asked(cfg: DictConfig, datamodule: Any) -> EpochSelection | None:
    """With ``model.epochs_without_validation: cv`` and no validation split, choose the epoch count by
    K-fold cross-validation on the training queries (``rankers.epoch_selection``) and write it into
    ``cfg.model`` (hence into the logged hyperparameters); then re-seed, so the final fit is the fit
    an integer setting of the chosen count would make."""
    if cfg.model.get("epochs_without_validation") != BY_CROSS_VALIDATION or getattr(datamodule, "has_validation", True):
        return None
    refuse_distributed(cfg)
    options = cfg.model.get("epoch_selection") or {}
    limit = min(int(options.get("max_epochs") or cfg.trainer.max_epochs), int(cfg.trainer.max_epochs))
    selection = select_epochs(cfg, datamodule, folds=int(options.get("folds", 5)), max_epochs=limit)
    log.info("epochs chosen by %d-fold CV: %d (curve %s)", selection.folds, selection.epochs, selection.curve)
    with open_dict(cfg):
        cfg.model.epochs_without_validation = selection.epochs
    pl.seed_everything(cfg.seed, workers=True)
    return selection


@dataclass
class Fitted:
    """A fitted ranker and what the rest of the run needs of its fit (``fit``)."""

    model: pl.LightningModule
    trainer: pl.Trainer
    fit_seconds: float  # the fit, with the epoch selection's cost when there was one
    validating: bool
    selection: EpochSelection | None
    selection_seconds: float

    @property
    def best_checkpoint(self) -> str:
        saver = self.trainer.checkpoint_callback
        return saver.best_model_path if saver is not None else ""


def fit(cfg: DictConfig, datamodule: Any, out: Path) -> Fitted:
    """Build ``cfg.model`` for a set-up ``datamodule`` and fit it as ``train.py`` does (epoch selection
    without validation when asked, early stopping and checkpoints with a validation split, the last
    epoch without one). ``train`` and ``rankers.selection`` (the fold fits of ``model=auto``) call it."""
    start = time.perf_counter()
    selection = _select_epochs_if_asked(cfg, datamodule)
    selection_seconds = time.perf_counter() - start  # part of the fit's cost: in fit_seconds
    model = instantiate(cfg.model, **datamodule.model_inputs())
    loggers = _instantiate_group(cfg.get("logger"))
    if isinstance(model, Learner):  # not trained by gradient steps: the learner harness runs it
        for logger in loggers:
            logger.log_hyperparams(_flat_hparams(cfg), {f"{model.monitor}_best": 0.0})
        return harness.fit(cfg, model, datamodule, out, loggers)
    validating = getattr(datamodule, "has_validation", True)
    # every checkpoint names its run and appears whole or not at all (rankers.run_identity, rankers.outputs)
    common = {"logger": loggers or False, "plugins": [AtomicCheckpointIO()]}
    identity = RunIdentity(cfg)
    if validating:
        callbacks = [*_instantiate_group(cfg.get("callbacks")), identity]
        trainer: pl.Trainer = instantiate(cfg.trainer, callbacks=callbacks, **common)
    else:
        _refuse_monitored_scheduler(cfg)
        callbacks = [*_instantiate_group(_without_validation(cfg.get("callbacks"))), identity]
        trainer = instantiate(cfg.trainer, callbacks=callbacks, limit_val_batches=0, **common)
        log.info("no validation split: every training query trains; the last epoch's model is kept")
    for logger in loggers:
        logger.log_hyperparams(_flat_hparams(cfg), {f"{model.monitor}_best": 0.0})
    fit_seconds = _fit_or_exit(trainer, model, datamodule, cfg, out)
    return Fitted(model, trainer, fit_seconds + selection_seconds, validating, selection, selection_seconds)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit the configured ranker, evaluate the best checkpoint, write ``results.json`` and the export."""
    _refuse_unused_variant(cfg)
    pl.seed_everything(cfg.seed, workers=True)
    out = Path(cfg.paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    refuse_other_runs(cfg)

    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    fitted = fit(cfg, datamodule, out)
    return report(cfg, fitted, datamodule, out)


def refuse_other_runs(cfg: DictConfig) -> None:
    """Before any data is read: refuse a resume from another run's checkpoint, and a run directory
    whose checkpoints belong to another run (``rankers.run_identity``; the callback checks again)."""
    saver = (cfg.get("callbacks") or {}).get("model_checkpoint") or {}
    if cfg.get("ckpt_path"):
        refuse_foreign_checkpoint(cfg.ckpt_path, cfg, saver.get("dirpath"))
    if saver.get("dirpath"):
        refuse_reused_directory(saver.dirpath, cfg.get("ckpt_path"))


def report(
    cfg: DictConfig, fitted: Fitted, datamodule: Any, out: Path, *, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Validate and test the best checkpoint of a fit, export it and write ``results.json`` (with
    ``extra``'s entries added: ``model=auto``'s selection table and bound)."""
    if isinstance(fitted.model, Learner):
        return harness.report(cfg, fitted, datamodule, out, extra=extra)
    model, trainer, validating, selection = fitted.model, fitted.trainer, fitted.validating, fitted.selection
    trained_on = _stage_metrics([trainer.callback_metrics], "train")  # before validate/test reset them
    selection_seconds = fitted.selection_seconds
    best = fitted.best_checkpoint
    ckpt = best or None
    results: dict[str, Any] = {
        "val": _stage_metrics(_evaluate_or_exit(fitted, datamodule, ckpt, out, "validation"), "val")
        if validating
        else {},
        "fit_seconds": fitted.fit_seconds,
        "epochs": trainer.current_epoch,
        "best_checkpoint": best,
        "seed": cfg.seed,
        "world_size": trainer.world_size,
        "num_nodes": trainer.num_nodes,
        **({"epoch_selection": {**selection.as_dict(), "seconds": selection_seconds}} if selection else {}),
        "data": datamodule.statistics,
        "conventions": {
            "gain": model.hparams.get("gain", "exp2"),
            "empty": model.hparams.get("empty", 0.0),
            "ties": "list position",
        },
    }
    if cfg.get("test", True) and getattr(datamodule, "has_test", True):
        results["test"] = _stage_metrics(_evaluate_or_exit(fitted, datamodule, ckpt, out, "test"), "test")
        baseline = random_baseline(datamodule, cfg.seed)
        if baseline:
            results["test_random_scores"] = baseline
    name_evaluated(results, datamodule, trained_on)
    _refuse_divergence(model, results, out if trainer.is_global_zero else None)
    if cfg.get("export", True) and trainer.is_global_zero:
        # trainer.validate/test with ckpt_path loaded the best weights into `model`
        with atomic_directory(out / "export", "export") as partial:  # whole or not at all
            results["export"] = moved(model.export_model(partial), partial, out / "export")
    # a model may add evaluations of its own (LinkLearn: an ad-hoc collection ranked by it, its start and BM25)
    extra_results = getattr(model, "extra_results", None)
    if extra_results is not None and trainer.is_global_zero:
        results.update(extra_results(out))
    results.update(extra or {})
    if trainer.is_global_zero:
        write_results(out / "results.json", results)
        _write_report(out, results, cfg)
        log.info("results: %s", json.dumps({k: results.get(k) for k in ("val", "test", "fit_seconds")}))
    return results


def _write_report(out: Path, results: dict[str, Any], cfg: DictConfig) -> None:
    """``report.png``; a plot that fails is a warning, never a failed run that trained."""
    try:
        path = write_report(out, results, title=f"{cfg.get('task_name', 'train')}: {cfg.model.get('_target_', '')}")
    except Exception as error:
        log.warning("no report.png: %s: %s", type(error).__name__, error)
        return
    if path is not None:
        log.info("report: %s", path)
