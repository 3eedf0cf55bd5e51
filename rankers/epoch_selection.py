"""How many epochs a run without a validation split trains: chosen by K-fold cross-validation on
its own training queries (``model.epochs_without_validation: cv``).

Why: a fixed epoch count is a different amount of training on every dataset. Four epochs on every
training query were best on letor_a (161 or 40 queries of 15 documents, features in [0, 1]) and
scored below this selection on a 43-query MSLR-WEB10K sample (lists of about 100 documents, raw web
features), where it chose 9-20 epochs: +0.029 and +0.006 ndcg@10 on two 5-fold draws (docs/neural.md,
"Measured figures").
Early stopping on a held-out tenth picks its epoch from four queries there; the folds below pool
the curve over every training query instead, and the final fit still trains on all of them.

The selection fits the configured model K times, each on K-1 folds of the training queries for
``max_epochs`` epochs, validating on the remaining fold after every epoch; the curves are pooled
(weighted by the folds' query counts) and the best epoch (the earliest of equals) is the count the
final fit trains for. Each fold's model is built from the fold's own training queries (its
normalizer and feature map too), so nothing of the held-out fold leaks into it. Cost: ``K *
max_epochs`` epochs on (K-1)/K of the data before the final fit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pytorch_lightning as pl
from hydra.utils import instantiate
from omegaconf import DictConfig

from datamodules.letor_io import LetorData
from metrics import monitor_mode
from rankers import budget, harness
from rankers.callbacks import EpochSeed

# the value of model.epochs_without_validation that asks for the selection
BY_CROSS_VALIDATION = "cv"


@dataclass(frozen=True)
class EpochSelection:
    """The chosen epoch count, and the pooled validation curve it was read from (``curve[e]`` after
    epoch ``e + 1``)."""

    epochs: int
    curve: list[float]
    folds: int
    monitor: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _ValidationCurve(pl.Callback):
    """Records the monitored metric after every validation epoch (not the sanity check)."""

    def __init__(self, monitor: str) -> None:
        self.monitor, self.values = monitor, []

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.values.append(float(trainer.callback_metrics[self.monitor]))


def query_folds(data: LetorData, folds: int, seed: int) -> list[tuple[LetorData, LetorData]]:
    """``folds`` (fit part, held-out fold) pairs over the queries of ``data``: a seeded permutation
    cut into near-equal folds, each held out once."""
    if folds < 2:
        raise ValueError(f"model.epoch_selection.folds must be >= 2, got {folds}")
    if data.num_queries < folds:
        raise ValueError(f"{data.path}: {data.num_queries} training queries, too few for {folds} folds")
    order = np.random.default_rng([seed, 11]).permutation(data.num_queries)
    parts = np.array_split(order, folds)
    pairs = []
    for f, held_out in enumerate(parts):
        rest = np.concatenate([part for g, part in enumerate(parts) if g != f])
        pairs.append((data.subset(np.sort(rest)), data.subset(np.sort(held_out))))
    return pairs


def best_epoch(curve: np.ndarray, monitor: str) -> int:
    """The 1-based epoch of the best value of ``curve`` (the earliest of equals) in the metric's direction."""
    return int(np.argmax(curve) if monitor_mode(monitor) == "max" else np.argmin(curve)) + 1


def select_epochs(cfg: DictConfig, datamodule: Any, *, folds: int, max_epochs: int) -> EpochSelection:
    """Cross-validate ``cfg.model`` over the training queries of ``datamodule`` (a set-up LETOR
    datamodule) for 1..``max_epochs`` epochs; the pooled best."""
    if not hasattr(datamodule, "use_splits"):
        raise ValueError(f"model.epochs_without_validation=cv needs a LETOR-style datamodule, not {type(datamodule)}")
    curves, weights, monitor = [], [], None
    for fit_part, held_out in query_folds(datamodule.splits["train"], folds, cfg.seed):
        budget.check("epoch selection")  # model=auto's deadline, between folds (rankers.budget)
        pl.seed_everything(cfg.seed, workers=True)
        fold_data = instantiate(cfg.data)
        fold_data.use_splits({"train": fit_part, "val": held_out})
        model = instantiate(cfg.model, **fold_data.model_inputs())
        monitor = model.monitor
        recorder = _ValidationCurve(monitor)
        trainer = instantiate(
            cfg.trainer,
            # reseeded per batch: validating between epochs draws no other dropout masks than not validating
            callbacks=[recorder, EpochSeed(cfg.seed), budget.BudgetCallback(raise_at_epoch_end=True)],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            num_sanity_val_steps=0,
            min_epochs=max_epochs,
            max_epochs=max_epochs,
        )
        trainer.fit(model, datamodule=fold_data)
        curves.append(recorder.values)
        weights.append(held_out.num_queries)
    pooled = np.average(np.array(curves, dtype=np.float64), axis=0, weights=weights)
    return EpochSelection(best_epoch(pooled, monitor), [round(float(v), 6) for v in pooled], folds, monitor)


def refuse_distributed(cfg: DictConfig) -> None:
    """The selection's fits run one after another in this process; a DDP trainer would relaunch them."""
    harness.refuse_distributed(
        cfg,
        "model.epochs_without_validation=cv chooses the epoch count with fits that",
        otherwise="; or give data.val=..., or set an integer model.epochs_without_validation",
    )
