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
from torch import Tensor, nn
from tqdm import tqdm

from datamodules.letor_io import LetorData, read_letor
from metrics import ranking_metrics
from metrics.functional import ndcg
from rankers import budget
from rankers.budget import BudgetExceeded
from rankers.epoch_selection import query_folds
from rankers.list_metrics import name_evaluated
from rankers.outputs import atomic_file, save_torchscript, write_results, write_text
from rankers.pipeline import ROOT, fit, refuse_other_runs, report
from rankers.selection.blend import METHODS, BlendScorer, blend_onnx, combine_flat
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
    tied_with_best,
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
        # model=auto's budget stops a gradient fit between steps (rankers.budget: a polled deadline)
        if out.get("callbacks") is None:
            out.callbacks = {}
        out.callbacks.budget = {"_target_": "rankers.budget.BudgetCallback"}
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
        self.held_out_scores: list[np.ndarray] = []  # fold by fold: the held-out documents' scores
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
        budget.check(f"{run.label} fold {fold + 1}")  # a fit the deadline stopped early is not scored
    seconds = time.perf_counter() - start
    scores = score_queries(fitted.model, held_out)
    run.held_out_scores.append(scores)
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
            if limit <= 0:
                raise BudgetExceeded("no time left")
            with budget.deadline(limit):  # polled by the fit at its safe points (never a signal)
                _fit_fold(cfg, run, fold, parts[fold], unlabeled, workdir)
        except BudgetExceeded:
            never = " (never started: no time left)" if limit <= 0 else ""
            run.result.status = f"dropped: fold {fold + 1} ran past the budget ({max(limit, 0):.0f} s left it){never}"
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
    # the remaining folds candidate by candidate, the fastest first fold first: when the machine is slower
    # than the first folds promised, the slowest candidates are the ones the deadline drops (fold-major
    # order let slow candidates spend the time the cheap ones needed for their last fold)
    for run in sorted(runs, key=lambda r: r.result.fit_seconds[0] if r.result.fit_seconds else math.inf):
        for fold in range(1, folds):
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


def budget_seconds(options: DictConfig) -> float:
    """``model.budget_minutes`` in seconds: null is no limit; 0 or less is refused (it would run nothing)."""
    minutes = options.get("budget_minutes")
    if minutes is None:
        return math.inf
    if float(minutes) <= 0:
        raise ValueError(
            f"model.budget_minutes={minutes}: a budget must be > 0 minutes (null: no limit); with no time "
            "nothing but the first candidate could run: choose a model (model=<name>) instead"
        )
    return float(minutes) * 60.0


def _refit(cfg: DictConfig, run: _CandidateRun, out: Path, quiet: bool) -> tuple[Any, Any, DictConfig, float]:
    """Fit ``run``'s candidate on every training query with the run's seed (as ``train.py model=<it>``)."""
    refit_cfg = candidate_config(cfg, run.model, out, quiet=quiet, data=run.data)
    pl.seed_everything(int(cfg.seed), workers=True)
    data = instantiate(refit_cfg.data)
    data.prepare_data()
    data.setup("fit")
    start = time.perf_counter()
    fitted = fit(refit_cfg, data, out)
    return fitted, data, refit_cfg, time.perf_counter() - start


def _blend_cv(members: list[_CandidateRun], parts: list[tuple[LetorData, LetorData]]) -> dict[str, dict]:
    """Each blend method's held-out figures on the candidates' own folds: per-query ndcg@10, risks."""
    out = {}
    for method in METHODS:
        query_scores, fold_scores, risks, defined = [], [], [], []
        for fold, (_, held_out) in enumerate(parts):
            scores = combine_flat([m.held_out_scores[fold] for m in members], held_out.offsets, method)
            per_query = query_metric(scores, held_out)
            query_scores.extend(per_query.tolist())
            fold_scores.append(float(per_query.mean()))
            r, d = held_out_risks(scores, held_out)
            risks.append(r)
            defined.append(d)
        out[method] = {"query_scores": query_scores, "fold_scores": fold_scores, "risks": risks, "defined": defined}
    return out


def plan_blend(runs: list[_CandidateRun], parts: list[tuple[LetorData, LetorData]]) -> tuple[list[str], str, dict]:
    """What the refit makes: ``(members, method, record)``; one member and method ``single`` unless the
    top candidates are within noise (``cv.tied_with_best``) and a blend's CV mean beats the best's."""
    results = [run.result for run in runs]
    best = choose(results)
    tied = tied_with_best(results)
    record: dict[str, Any] = {"tied_with_best": tied}
    if len(tied) < 2:
        others = sum(result.complete for result in results) - 1
        record["why"] = (
            "the best candidate is ahead of every other complete one by more than one standard error (paired)"
            if others
            else "the only candidate that completed every fold within the budget"
        )
        return [best.label], "single", record
    members = [run for label in tied for run in runs if run.label == label]
    cv = _blend_cv(members, parts)
    n = len(best.query_scores)
    means = {method: sum(cv[method]["query_scores"]) / n for method in METHODS}
    record["cv_mean"] = {"best alone": best.mean, **{f"blend {m}": v for m, v in means.items()}}
    method = max(METHODS, key=lambda m: (means[m], -METHODS.index(m)))
    if means[method] < best.mean:
        record["why"] = (
            f"{', '.join(tied)} are within one standard error, but neither blend beat {best.label} alone in "
            f"the CV ({means[method]:.4f} against {best.mean:.4f})"
        )
        return [best.label], "single", record
    gaps = [a - b for a, b in zip(cv[method]["query_scores"], best.query_scores, strict=True)]
    se = float(np.std(gaps, ddof=1) / math.sqrt(len(gaps))) if len(gaps) > 1 else 0.0
    record["why"] = (
        f"{', '.join(tied)} are within one standard error of each other (paired, on the same held-out "
        f"queries): blended by {method}, whose CV mean {means[method]:.4f} is the higher of the two methods "
        f"({', '.join(f'{m} {v:.4f}' for m, v in means.items())}) and {np.mean(gaps):+.4f} ± {se:.4f} "
        f"against {best.label} alone"
    )
    record["cv"] = {m: {"fold_scores": cv[m]["fold_scores"]} for m in METHODS}
    record["_risks"] = (cv[method]["risks"], cv[method]["defined"])
    return [run.label for run in members], method, record


class _BlendRanker(nn.Module):
    """A blend as the framework scores: padded ``[B, L, F]`` (mask ``[B, L]``) -> ``[B, L]``, one query
    at a time through the exported ``BlendScorer`` (the blend is per query)."""

    def __init__(self, scorer: nn.Module) -> None:
        super().__init__()
        self.scorer = scorer
        self.device = torch.device("cpu")

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        out = torch.zeros(features.shape[:2])
        lengths = mask.sum(1).tolist() if mask is not None else [features.shape[1]] * features.shape[0]
        for row, length in enumerate(lengths):
            if length:
                out[row, :length] = self.scorer(features[row, :length].float().cpu())
        return out


def _export_blend(member_exports: list[dict], method: str, out: Path) -> tuple[nn.Module, dict[str, str]]:
    """``out/export/scorer.pt`` and ``scorer.onnx`` of the blend of the members' exports (one file each)."""
    export = out / "export"
    export.mkdir(parents=True, exist_ok=True)
    members = [torch.jit.load(paths["torchscript"]) for paths in member_exports]
    scripted = torch.jit.script(BlendScorer(members, method).eval())
    paths = {
        "torchscript": str(export / "scorer.pt"),
        "onnx": str(export / "scorer.onnx"),
        "meta": str(export / "meta.json"),
    }
    # written beside, then moved in (rankers.outputs): no half file is ever loaded, a full disk is one line
    save_torchscript(scripted, paths["torchscript"], "export")
    with atomic_file(paths["onnx"], "export") as partial:
        blend_onnx([p["onnx"] for p in member_exports], method, partial)
    first = json.loads(Path(member_exports[0]["meta"]).read_text())
    meta = {
        "n_features": first["n_features"],
        "input": "float32 [L, F] raw features (one query)",
        "output": "float32 [L] scores",
        "model": "auto blend",
        "blend": method,
        "members": [json.loads(Path(p["meta"]).read_text()).get("model", "?") for p in member_exports],
    }
    write_text(paths["meta"], json.dumps(meta, indent=1), "export")
    return scripted, paths


def _blend_metrics(ranker: _BlendRanker, data: LetorData, gain: str, empty: float) -> dict[str, float]:
    metrics = ranking_metrics(gain=gain, empty=empty)
    with torch.no_grad():
        for queries in _chunks(data.num_queries, 64):
            features, labels, mask = _padded(data, queries)
            scores = ranker(features, mask)
            for metric in metrics.values():
                metric.update(scores, labels, mask)
    return {name: float(metric.compute()) for name, metric in metrics.items()}


def train_auto(cfg: DictConfig) -> dict[str, Any]:
    """``train.py model=auto``: cross-validate the candidates, refit the best (or blend the top ones when
    the CV cannot tell them apart), export it, bound it."""
    started = time.perf_counter()
    options = cfg.model
    deadline = started + budget_seconds(options)
    if cfg.get("ckpt_path"):
        raise ValueError("model=auto does not resume: resume the chosen model (model=<name> ckpt_path=...)")
    pl.seed_everything(int(cfg.seed), workers=True)
    out = Path(cfg.paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    refuse_other_runs(cfg)  # before the CV: a run directory that holds another run is refused now, not at the refit
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
    runs, parts = cross_validate(cfg, train, unlabeled, workdir, deadline)
    shutil.rmtree(workdir, ignore_errors=True)
    cv_seconds = time.perf_counter() - started
    winner = next(run for run in runs if run.label == choose([run.result for run in runs]).label)
    blend_labels, method, blend_record = (
        plan_blend(runs, parts)
        if bool(options.get("blend", True))
        else ([winner.label], "single", {"why": "model.blend=false"})
    )
    metric = f"ndcg@{_METRIC_K}"
    table = format_table([run.result for run in runs], winner.label, metric)
    print(f"\nmodel=auto: {int(options.folds)}-fold CV on {train.num_queries} training queries\n{table}\n", flush=True)
    selection = {
        "chosen": winner.label if method == "single" else f"blend ({method}) of {' + '.join(blend_labels)}",
        "blend": {
            "members": blend_labels,
            "method": method,
            **{k: v for k, v in blend_record.items() if k != "_risks"},
        },
        "metric": f"{metric} (trec_eval ndcg_cut_10: linear gain) on held-out queries",
        "folds": int(options.folds),
        "seed": int(cfg.seed),
        "training_queries": train.num_queries,
        "budget_minutes": options.get("budget_minutes"),
        "cv_seconds": cv_seconds,
        "candidates": {run.label: run.result.as_dict() for run in runs},
        "table": table,
    }
    log.info("model=auto chose %s: %s", selection["chosen"], blend_record.get("why", ""))
    if method == "single":
        fitted, refit_data, refit_cfg, refit_seconds = _refit(cfg, winner, out, quiet=False)
        selection["refit_seconds"] = refit_seconds
        results = report(refit_cfg, fitted, refit_data, out, extra={"model": "auto", "selection": selection})
        test = refit_data.splits.get("test") if refit_data.paths.get("test") else None
        results["bound"] = _bound(cfg, runs, winner, fitted.model, train, unlabeled, source, test)
    else:
        results = _refit_blend(cfg, runs, blend_labels, method, blend_record, selection, out, train, unlabeled, source)
    results["total_seconds"] = time.perf_counter() - started
    if "bound" in results and "bound" in results["bound"]:
        log.info(
            "certified bound on the bipartite risk: %.4f (delta %s)",
            results["bound"]["bound"],
            results["bound"]["delta"],
        )
    write_results(out / "results.json", results)  # atomic; a value that is not finite is null with its reason
    return results


def _refit_blend(
    cfg: DictConfig,
    runs: list[_CandidateRun],
    labels: list[str],
    method: str,
    record: dict[str, Any],
    selection: dict[str, Any],
    out: Path,
    train: LetorData,
    unlabeled: LetorData | None,
    source: str,
) -> dict[str, Any]:
    """Refit every member on every training query (each exported into ``out/members/<i>``), export the
    blend as one scorer and evaluate it as the framework evaluates any model."""
    members = [run for label in labels for run in runs if run.label == label]
    exports, member_results, seconds = [], {}, 0.0
    for i, run in enumerate(members):
        member_out = out / "members" / f"{i}-{run.label.split()[0]}"
        fitted, data, refit_cfg, refit_seconds = _refit(cfg, run, member_out, quiet=True)
        seconds += refit_seconds
        result = report(refit_cfg, fitted, data, member_out)
        exports.append(result["export"])
        member_results[run.label] = {k: result.get(k) for k in ("val", "test", "fit_seconds")}
    selection["refit_seconds"] = seconds
    selection["members"] = member_results
    scripted, paths = _export_blend(exports, method, out)
    ranker = _BlendRanker(scripted)
    gain, empty = str(cfg.model.get("gain", "exp2")), 0.0
    splits = data.splits
    results: dict[str, Any] = {
        # a validation file only: the members' held-out shares (their own val_fraction) differ
        "val": _blend_metrics(ranker, splits["val"], gain, empty) if data.paths.get("val") else {},
        "fit_seconds": seconds,
        "seed": cfg.seed,
        "data": getattr(data, "statistics", {}),
        "conventions": {"gain": gain, "empty": empty, "ties": "list position"},
    }
    test = splits.get("test") if data.paths.get("test") else None
    if test is not None:
        results["test"] = _blend_metrics(ranker, test, gain, empty)
    name_evaluated(results, data)
    results["export"] = paths
    results.update(model="auto", selection=selection)
    blended = _CandidateRun(Candidate(selection["chosen"], "blend"), DictConfig({}), {})
    blended.held_out_risks, blended.held_out_defined = record["_risks"]
    if unlabeled is not None:
        for fold in range(int(cfg.model.folds)):
            fold_members = [m.unlabeled_scores[fold] for m in members]
            blended.unlabeled_scores.append(combine_flat(fold_members, unlabeled.offsets, method))
    results["bound"] = _bound(cfg, runs, blended, ranker, train, unlabeled, source, test)
    return results
