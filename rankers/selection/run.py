"""``model=auto``: choose a ranker by K-fold cross-validation on the training queries, refit the
winner on every training query, export it, and bound its ranking risk (Usunier et al.).

    python train.py model=auto data=letor data.train=train.txt data.test=test.txt
    python train.py model=auto ... 'model.candidates=[rankboost,lambdarank]' model.budget_minutes=5
    python train.py model=auto ... bound.unlabeled=unlabeled.txt bound.delta=0.05

How: the training queries are cut into ``model.folds`` folds by a seeded permutation
(``rankers.epoch_selection.query_folds``, the folds epoch selection uses); every candidate is fitted
on the same K-1 folds and scored on the held-out fold (a paired comparison), exactly as ``train.py
model=<candidate> data.train=<those queries>`` would fit it (its own defaults, its own validation
hold-out or epoch selection). The metric is trec_eval's ``ndcg_cut_10`` (linear gain) averaged over
the held-out queries. Every candidate's first fold runs first (the cheapest candidates first); its
time estimates the rest, and ``model.budget_minutes`` drops the slowest candidates until the
remaining folds and the refit fit in it (a first fold that alone runs past its share is stopped).
The best complete candidate is refit on every training query with the run's seed, evaluated and
exported as ``train.py model=<winner>`` does; ``results.json`` adds ``selection`` (the table) and
``bound``. This module is the Hydra/Lightning edge; the arithmetic is in ``cv`` and ``bound``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, open_dict
from tqdm import tqdm

from datamodules.letor_io import LetorData, read_letor
from metrics.functional import ndcg
from rankers.epoch_selection import query_folds
from rankers.pipeline import ROOT, fit, report
from rankers.selection.bound import (
    bipartite_risk,
    certified_bound,
    disagreement,
    permutation_ranks,
    worst_case_ranks,
)
from rankers.selection.cv import (
    Candidate,
    CandidateResult,
    choose,
    first_fold_allowance,
    format_table,
    parse_candidate,
    plan_budget,
)

log = logging.getLogger(__name__)

# loggers whose per-fit chatter (devices, split sizes, "no validation split") the CV silences
_QUIET = (
    "pytorch_lightning",
    "lightning",
    "lightning.pytorch",
    "rankers.pipeline",
    "datamodules",
    "rankers.epoch_selection",
    "lightning_fabric",
)
_METRIC_K = 10


class BudgetExceeded(Exception):
    """A fit ran past the time ``model.budget_minutes`` left it."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise ``BudgetExceeded`` in this (main) thread after ``seconds`` (SIGALRM; elsewhere no limit)."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable or math.isinf(seconds):
        yield
        return
    if seconds <= 0:
        raise BudgetExceeded("no time left")

    def expire(signum: int, frame: Any) -> None:
        raise BudgetExceeded(f"ran past {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in _QUIET]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


# the data options a model's config sets (conf/data_model/<data>/<model>.yaml) that follow the candidate
MODEL_DATA_KEYS = ("feature_map", "raw_columns", "val_fraction", "gain")


def _run_data_overrides() -> list[str]:
    """This run's data choice and ``data.*`` overrides, so a candidate composes the same data."""
    if not HydraConfig.initialized():
        return []
    hydra_cfg = HydraConfig.get()
    choice = hydra_cfg.runtime.choices.get("data")
    own = [o for o in hydra_cfg.overrides.task if o.lstrip("+~").startswith("data.")]
    return [*([f"data={choice}"] if choice else []), *own]


def compose_candidate(candidate: Candidate) -> tuple[DictConfig, dict[str, Any]]:
    """The ``model`` node ``train.py model=<name> <overrides>`` would compose, and the data options
    (``MODEL_DATA_KEYS``) that run would read its data with."""
    overrides = [*_run_data_overrides(), f"model={candidate.name}", *candidate.overrides]
    if GlobalHydra.instance().is_initialized():  # inside train.py's Hydra app
        composed = compose("config", overrides=overrides)
    else:  # tests and benchmarks (rankers.pipeline.compose_config leaves Hydra uninitialized)
        with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
            composed = compose("config", overrides=overrides)
    if "entry" in composed and composed.entry != "rankers.pipeline.train":
        raise ValueError(f"candidate {candidate.label!r} is not a model train.py fits directly ({composed.entry})")
    data = {key: composed.data[key] for key in MODEL_DATA_KEYS if key in composed.data}
    return composed.model, data


def candidate_config(
    cfg: DictConfig, model: DictConfig, output_dir: Path, *, quiet: bool, data: dict[str, Any] | None = None
) -> DictConfig:
    """The run's config with ``model`` in place of auto's and ``data`` (the candidate's data options:
    input map, validation share, gain) over the run's, as under ``train.py model=<candidate>``."""
    out = copy.deepcopy(cfg)
    with open_dict(out):
        out.model = copy.deepcopy(model)
        for key, value in (data or {}).items():
            if key in out.data:
                out.data[key] = value
        out.paths.output_dir = str(output_dir)
        out.entry = "rankers.pipeline.train"
        out.ckpt_path = None
        out.pop("bound", None)
        if quiet:
            out.logger = None
            if out.get("callbacks") and "progress_bar" in out.callbacks:
                out.callbacks.progress_bar.refresh_rate = 0
            out.trainer.enable_model_summary = False
    return out


def _padded(data: LetorData, queries: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Features ``[B, L, F]``, labels ``[B, L]`` and mask ``[B, L]`` of some queries of ``data``."""
    lengths = data.lengths[queries]
    width = int(lengths.max()) if len(queries) else 0
    features = np.zeros((len(queries), width, data.num_features), dtype=np.float32)
    labels = np.zeros((len(queries), width), dtype=np.float32)
    mask = np.zeros((len(queries), width), dtype=bool)
    for row, q in enumerate(queries):
        start, stop = data.offsets[q], data.offsets[q + 1]
        features[row, : stop - start] = data.features[start:stop]
        labels[row, : stop - start] = data.labels[start:stop]
        mask[row, : stop - start] = True
    return torch.from_numpy(features), torch.from_numpy(labels), torch.from_numpy(mask)


def _chunks(n: int, size: int) -> Iterator[np.ndarray]:
    for start in range(0, n, size):
        yield np.arange(start, min(n, start + size))


def score_queries(model: pl.LightningModule, data: LetorData, *, chunk: int = 64) -> np.ndarray:
    """A fitted ranker's scores ``[N]`` of every document of ``data`` (raw features in, file order)."""
    model.eval()
    scores = np.empty(len(data.labels), dtype=np.float32)
    with torch.no_grad():
        for queries in _chunks(data.num_queries, chunk):
            features, _, mask = _padded(data, queries)
            values = model(features.to(model.device), mask.to(model.device)).float().cpu().numpy()
            for row, q in enumerate(queries):
                start, stop = data.offsets[q], data.offsets[q + 1]
                scores[start:stop] = values[row, : stop - start]
    if not np.isfinite(scores).all():
        raise RuntimeError(f"a fitted model scored {data.path} with non-finite values")
    return scores


def _padded_values(values: np.ndarray, data: LetorData, queries: np.ndarray) -> torch.Tensor:
    width = int(data.lengths[queries].max())
    out = np.zeros((len(queries), width), dtype=np.float32)
    for row, q in enumerate(queries):
        start, stop = data.offsets[q], data.offsets[q + 1]
        out[row, : stop - start] = values[start:stop]
    return torch.from_numpy(out)


def query_metric(scores: np.ndarray, data: LetorData) -> np.ndarray:
    """trec_eval's ``ndcg_cut_10`` per query ``[Q]`` (linear gain, 0 without a relevant document)."""
    values = []
    for queries in _chunks(data.num_queries, 256):
        _, labels, mask = _padded(_labels_only(data), queries)
        values.append(ndcg(_padded_values(scores, data, queries), labels, mask, k=_METRIC_K, gain="linear").numpy())
    return np.concatenate(values) if values else np.zeros(0)


def _labels_only(data: LetorData) -> LetorData:
    """``data`` without its feature columns (padding labels and masks needs none)."""
    return LetorData(np.zeros((len(data.labels), 0), np.float32), data.labels, data.qids, data.offsets, data.path)


def held_out_risks(scores: np.ndarray, data: LetorData) -> tuple[torch.Tensor, torch.Tensor]:
    """The bipartite risk ``[Q]`` of the ranking of ``scores`` (ties by list position) on every
    query of ``data`` (0 without a pair), and which queries have a pair ``[Q]``."""
    risks, defined = [], []
    for queries in _chunks(data.num_queries, 128):
        _, labels, mask = _padded(_labels_only(data), queries)
        values = _padded_values(scores, data, queries)
        risk, has_pair = bipartite_risk(permutation_ranks(values, mask), labels, mask)
        risks.append(risk)
        defined.append(has_pair)
    return torch.cat(risks), torch.cat(defined)


def pessimistic_risks(scores: np.ndarray, data: LetorData) -> tuple[torch.Tensor, torch.Tensor]:
    """The bipartite risk ``[Q]`` of ``scores`` with every tied pair misordered (0 without a pair),
    and which queries have a pair ``[Q]``."""
    risks, defined = [], []
    for queries in _chunks(data.num_queries, 128):
        _, labels, mask = _padded(_labels_only(data), queries)
        values = _padded_values(scores, data, queries)
        risk, has_pair = bipartite_risk(permutation_ranks(values, mask), labels, mask, scores=values)
        risks.append(risk)
        defined.append(has_pair)
    return torch.cat(risks), torch.cat(defined)


def mean_disagreement(chosen: np.ndarray, fold_scores: list[np.ndarray], data: LetorData) -> torch.Tensor:
    """Per query of ``data`` ``[m]``: the mean over the fold models of eq. (1)'s ``d`` between the
    chosen model's ranking (its ties broken against each fold model) and the fold model's."""
    per_query = []
    for queries in _chunks(data.num_queries, 128):
        mask = _padded(_labels_only(data), queries)[2]
        mine = _padded_values(chosen, data, queries)
        total = torch.zeros(len(queries))
        for scores in fold_scores:
            theirs = permutation_ranks(_padded_values(scores, data, queries), mask)
            total += disagreement(worst_case_ranks(mine, theirs, mask), theirs, mask)
        per_query.append(total / len(fold_scores))
    return torch.cat(per_query)


def _pair_queries(data: LetorData) -> torch.Tensor:
    """``[Q]`` bool: which queries have both a relevant and an irrelevant document."""
    relevant = np.add.reduceat((data.labels > 0).astype(np.int64), data.offsets[:-1])
    return torch.from_numpy((relevant > 0) & (relevant < data.lengths))


def _unlabeled_sample(cfg: DictConfig, splits: dict[str, LetorData]) -> tuple[LetorData | None, str]:
    """The unlabeled queries of the bound (labels never read): ``bound.unlabeled``, else the test
    split's queries; at most ``bound.max_queries`` of them (a seeded sample)."""
    options = cfg.get("bound") or {}
    if options.get("unlabeled"):
        data = read_letor(options.unlabeled, zero_based=bool(cfg.data.get("zero_based", False)))
        source = str(options.unlabeled)
        width = splits["train"].num_features
        if data.num_features > width:
            raise ValueError(f"bound.unlabeled={source} has {data.num_features} features, the training file {width}")
        data = data.with_num_features(width)
    elif "test" in splits:
        data, source = splits["test"], f"{splits['test'].path} (test queries, labels unread)"
    else:
        return None, "none: give bound.unlabeled=FILE or data.test=FILE"
    limit = options.get("max_queries")
    if limit and data.num_queries > limit:
        keep = np.sort(np.random.default_rng([int(cfg.seed), 23]).choice(data.num_queries, int(limit), replace=False))
        data, source = data.subset(keep), f"{source}, {limit} of {data.num_queries} queries drawn"
    data = LetorData(data.features, np.zeros_like(data.labels), data.qids, data.offsets, data.path)
    return data, source


class _CandidateRun:
    """One candidate's cross-validation: its config, its folds' figures and fold scores."""

    def __init__(self, candidate: Candidate, model: DictConfig, data: dict[str, Any]) -> None:
        self.candidate, self.model, self.data = candidate, model, data
        self.result = CandidateResult(candidate.label)
        self.unlabeled_scores: list[np.ndarray] = []
        self.held_out_risks: list[torch.Tensor] = []
        self.held_out_defined: list[torch.Tensor] = []

    @property
    def label(self) -> str:
        return self.candidate.label


def _fit_fold(
    cfg: DictConfig,
    run: _CandidateRun,
    fold: int,
    parts: tuple[LetorData, LetorData],
    unlabeled: LetorData | None,
    workdir: Path,
) -> None:
    """Fit one candidate on one fold's training part and record its held-out figures."""
    fit_part, held_out = parts
    out = workdir / f"{run.label.split()[0]}-{len(run.result.fold_scores)}-fold{fold}"
    fold_cfg = candidate_config(cfg, run.model, out, quiet=True, data=run.data)
    start = time.perf_counter()
    with _quiet():
        pl.seed_everything(int(cfg.seed), workers=True)
        datamodule = instantiate(fold_cfg.data)
        datamodule.use_splits({"train": fit_part})
        fitted = fit(fold_cfg, datamodule, out)
        # the best epoch's weights, as train.py tests (a Learner's fit has already restored them)
        if fitted.validating and fitted.best_checkpoint and fitted.trainer is not None:
            fitted.trainer.validate(
                fitted.model, datamodule=datamodule, ckpt_path=fitted.best_checkpoint, verbose=False
            )
    seconds = time.perf_counter() - start
    scores = score_queries(fitted.model, held_out)
    result = run.result
    per_query = query_metric(scores, held_out)
    result.fold_scores.append(float(per_query.mean()))
    result.query_scores.extend(per_query.tolist())
    result.fold_queries.append(held_out.num_queries)
    result.fit_seconds.append(seconds)
    risks, defined = held_out_risks(scores, held_out)
    run.held_out_risks.append(risks)
    run.held_out_defined.append(defined)
    if unlabeled is not None:
        run.unlabeled_scores.append(score_queries(fitted.model, unlabeled))
    shutil.rmtree(out, ignore_errors=True)


def cross_validate(
    cfg: DictConfig, train: LetorData, unlabeled: LetorData | None, workdir: Path, deadline: float
) -> tuple[list[_CandidateRun], list[tuple[LetorData, LetorData]]]:
    """Every candidate on the same folds within the budget; the runs (complete or dropped)."""
    options = cfg.model
    folds = int(options.folds)
    parts = query_folds(train, folds, int(cfg.seed))
    candidates = [parse_candidate(text) for text in options.candidates]
    if len({c.label for c in candidates}) != len(candidates):
        raise ValueError(f"model.candidates repeats an entry: {list(options.candidates)}")
    runs = [_CandidateRun(c, *compose_candidate(c)) for c in candidates]
    progress = tqdm(total=folds * len(runs), desc="model=auto: folds x candidates", unit="fit", leave=True)

    def attempt(run: _CandidateRun, fold: int, limit: float) -> bool:
        progress.set_postfix_str(f"{run.label} fold {fold + 1}/{folds}")
        try:
            with time_limit(limit):
                _fit_fold(cfg, run, fold, parts[fold], unlabeled, workdir)
        except BudgetExceeded:
            run.result.status = f"dropped: fold {fold + 1} ran past the budget ({limit:.0f} s left it)"
            progress.update(folds - fold)
            return False
        progress.update(1)
        return True

    # the first candidate (the cheapest) always completes, without a time limit, so that there is a choice
    first = runs[0]
    for run in runs:  # first fold of every candidate: the time estimate
        limit = math.inf if run is first else first_fold_allowance(deadline - time.perf_counter(), folds)
        attempt(run, 0, limit)
    timed = {run.label: run.result.fit_seconds[0] for run in runs if run.result.complete}
    if timed:
        remaining = deadline - time.perf_counter()
        _, dropped = plan_budget(timed, folds=folds, remaining_seconds=remaining, always=first.label)
        for run in runs:
            if run.label in dropped:
                run.result.status = (
                    f"dropped: {folds} folds and a refit would pass model.budget_minutes "
                    f"(first fold {run.result.fit_seconds[0]:.0f} s)"
                )
                progress.update(folds - 1)
    for fold in range(1, folds):
        for run in runs:
            if run.result.complete:
                attempt(run, fold, math.inf if run is first else deadline - time.perf_counter())
    progress.close()
    return runs, parts


def _bound(
    cfg: DictConfig,
    runs: list[_CandidateRun],
    winner: _CandidateRun,
    model: pl.LightningModule,
    train: LetorData,
    unlabeled: LetorData | None,
    source: str,
    test: LetorData | None,
) -> dict[str, Any]:
    options = cfg.get("bound") or {}
    if not options.get("enabled", True):
        return {"skipped": "bound.enabled=false"}
    if unlabeled is None:
        return {"skipped": f"no unlabeled queries: {source}"}
    chosen = score_queries(model, unlabeled)
    compared = sum(run.result.complete for run in runs)
    try:
        parts = certified_bound(
            winner.held_out_risks,
            winner.held_out_defined,
            mean_disagreement(chosen, winner.unlabeled_scores, unlabeled),
            training_pairs=_pair_queries(train),
            delta=float(options.get("delta", 0.05)),
            selected_among=compared,
        )
    except ValueError as error:
        return {"skipped": str(error)}
    record: dict[str, Any] = {**parts.as_dict(), "unlabeled": source, "risk": "bipartite (label > 0), ties misordered"}
    if test is not None:  # what the bound is about, measured on the test labels (never used to choose)
        risks, defined = pessimistic_risks(score_queries(model, test), test)
        record["test_risk"] = float(risks[defined].mean()) if bool(defined.any()) else None
        record["test_risk_all_queries"] = float(risks.mean()) if len(risks) else None
        record["test_queries_with_pair"] = int(defined.sum())
    return record


def train_auto(cfg: DictConfig) -> dict[str, Any]:
    """``train.py model=auto``: cross-validate the candidates, refit and export the best, bound it."""
    started = time.perf_counter()
    options = cfg.model
    budget = float(options.get("budget_minutes") or math.inf) * 60.0
    deadline = started + budget
    if cfg.get("ckpt_path"):
        raise ValueError("model=auto does not resume: resume the chosen model (model=<name> ckpt_path=...)")
    pl.seed_everything(int(cfg.seed), workers=True)
    out = Path(cfg.paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    datamodule = instantiate(cfg.data)
    if not hasattr(datamodule, "use_splits"):
        raise ValueError(
            f"model=auto cross-validates LETOR-style query data (data=letor), not {type(datamodule).__name__}"
        )
    datamodule.prepare_data()
    datamodule.setup("fit")
    splits = datamodule.splits
    train = splits["train"]
    unlabeled, source = _unlabeled_sample(cfg, splits)
    workdir = out / "selection"
    runs, _ = cross_validate(cfg, train, unlabeled, workdir, deadline)
    shutil.rmtree(workdir, ignore_errors=True)
    cv_seconds = time.perf_counter() - started
    winner = next(run for run in runs if run.label == choose([run.result for run in runs]).label)
    metric = f"ndcg@{_METRIC_K}"
    table = format_table([run.result for run in runs], winner.label, metric)
    print(f"\nmodel=auto: {int(options.folds)}-fold CV on {train.num_queries} training queries\n{table}\n", flush=True)
    log.info("model=auto chose %s", winner.label)

    refit_cfg = candidate_config(cfg, winner.model, out, quiet=False, data=winner.data)
    pl.seed_everything(int(cfg.seed), workers=True)
    refit_data = instantiate(refit_cfg.data)
    refit_data.prepare_data()
    refit_data.setup("fit")
    refit_start = time.perf_counter()
    fitted = fit(refit_cfg, refit_data, out)
    refit_seconds = time.perf_counter() - refit_start
    selection = {
        "chosen": winner.label,
        "metric": f"{metric} (trec_eval ndcg_cut_10: linear gain) on held-out queries",
        "folds": int(options.folds),
        "seed": int(cfg.seed),
        "training_queries": train.num_queries,
        "budget_minutes": options.get("budget_minutes"),
        "cv_seconds": cv_seconds,
        "refit_seconds": refit_seconds,
        "candidates": {run.label: run.result.as_dict() for run in runs},
        "table": table,
    }
    results = report(refit_cfg, fitted, refit_data, out, extra={"model": "auto", "selection": selection})
    test = refit_data.splits.get("test") if refit_data.paths.get("test") else None
    results["bound"] = _bound(cfg, runs, winner, fitted.model, train, unlabeled, source, test)
    results["total_seconds"] = time.perf_counter() - started
    if "bound" in results and "bound" in results["bound"]:
        log.info(
            "certified bound on the bipartite risk: %.4f (delta %s)",
            results["bound"]["bound"],
            results["bound"]["delta"],
        )
    (out / "results.json").write_text(json.dumps(results, indent=2))
    return results
