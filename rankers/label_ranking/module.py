"""The label ranking family: the online calibrated ranker (Algorithm 1) and binary relevance, both
``rankers.learner.Learner``s run by the harness on whole ``LabelSplit``s, and the neural version (an
MLP with d outputs on the calibrated constraint loss), a LightningModule trained by gradient steps.

All three read ``{"features": [N, F] raw, "labels": [N, d]}`` from ``datamodules.multilabel``,
scale features with the datamodule's ``AffineScaler``, report the label ranking metrics of
``metrics.label_ranking`` (``val/...``, ``test/...``) and export a
:class:`~rankers.label_ranking.export.LabelScorer`: raw features ``[N, F]`` in, ``[N, d]`` label
scores out, the calibrated cut at 0.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric

from datamodules.multilabel import AffineScaler
from losses.calibrated import calibrated_ranking_loss
from metrics.label_ranking import LABEL_RANKING_METRICS, TOP_LABEL_METRICS
from rankers.label_ranking.baselines import fit_binary_relevance
from rankers.label_ranking.blend import blend, choose_blend
from rankers.label_ranking.export import LabelScorer, LinearLabelScorer, MLPLabelScorer, export_label_scorer
from rankers.label_ranking.logistic import fit_logistic
from rankers.label_ranking.online import CalibratedPerceptron
from rankers.learner import FitLog, LabelSplit, Learner
from rankers.neural.module import PassLimit

Batch = dict[str, Tensor]
# what C="cv" and share="cv" choose from (docs/label_ranking.md: nested CV on seven MULAN sets)
DEFAULT_CS = (0.1, 0.3, 1.0, 3.0, 10.0)
DEFAULT_SHARES = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)


class LabelScoring:
    """What the three label rankers share: scaling, the label ranking metrics, the export.

    Subclasses set ``self.core`` (an ``nn.Module`` mapping scaled ``[N, F]`` to ``[N, d]``)."""

    def init_labels(
        self, n_features: int, n_labels: int, scaler: AffineScaler | None, label_names: list[str] | None, ranked: bool
    ) -> None:
        self.scaler = scaler if scaler is not None else AffineScaler(torch.zeros(n_features), torch.ones(n_features))
        self.label_names = list(label_names or [str(i) for i in range(n_labels)])
        self.metric_fns = {**LABEL_RANKING_METRICS, **TOP_LABEL_METRICS}
        self.metric_names = list(LABEL_RANKING_METRICS) + (list(TOP_LABEL_METRICS) if ranked else [])
        self.n_features = n_features

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        """Raw features ``[N, F]`` -> label scores ``[N, d]`` (relevant when > 0)."""
        return self.core(self.scaler(features.float()))

    def label_metrics(self, scores: Tensor, labels: Tensor) -> dict[str, Tensor]:
        """Each metric's per-instance values ``[N]``."""
        return {name: self.metric_fns[name](scores, labels) for name in self.metric_names}

    def export_model(self, out_dir: str | Path) -> dict[str, str]:
        """``scorer.pt`` (TorchScript), ``scorer.onnx`` and ``meta.json`` (label names, the cut)."""
        return export_label_scorer(self.scaler, self.core, out_dir, self.n_features, self.label_names)


class LabelRankerModule(LabelScoring, PassLimit, pl.LightningModule):
    """The gradient-trained label ranker's LightningModule side: passes, val/test metrics."""

    def __init__(
        self,
        *,
        n_features: int,
        n_labels: int,
        scaler: AffineScaler | None = None,
        label_names: list[str] | None = None,
        ranked: bool = False,
        epochs: int = 1,
        monitor: str = "val/ranking_loss",
    ) -> None:
        super().__init__()
        self.init_labels(n_features, n_labels, scaler, label_names, ranked)
        self.monitor, self.passes = monitor, epochs
        self.val_metrics = nn.ModuleDict({name: MeanMetric() for name in self.metric_names})
        self.test_metrics = nn.ModuleDict({name: MeanMetric() for name in self.metric_names})

    def on_fit_start(self) -> None:
        self.refuse_ddp("the label rankers fit")
        self.check_passes(self.passes)

    def on_train_epoch_end(self) -> None:
        self.stop_after(self.passes)

    def _evaluate(self, batch: Batch, stage: str) -> None:
        metrics = self.val_metrics if stage == "val" else self.test_metrics
        for name, values in self.label_metrics(self(batch["features"]), batch["labels"]).items():
            metrics[name].update(values)
            self.log(f"{stage}/{name}", metrics[name], on_epoch=True, prog_bar=name == "ranking_loss")

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, "test")


class LabelLearner(LabelScoring, Learner):
    """The label rankers that are not trained by gradient steps, run by ``rankers.harness`` on whole
    ``LabelSplit``s. Device: the trainer's (GPU unmeasured here)."""

    def __init__(
        self,
        *,
        n_features: int,
        n_labels: int,
        scaler: AffineScaler | None,
        label_names: list[str] | None,
        ranked: bool,
        monitor: str,
    ) -> None:
        super().__init__(monitor=monitor)
        self.init_labels(n_features, n_labels, scaler, label_names, ranked)

    def scaled(self, split: LabelSplit) -> Tensor:
        """The split's scaled features ``[N, F]`` on the learner's device."""
        return self.scaler(split.features.float().to(self.device))

    def evaluate(self, split: LabelSplit, scores: Tensor | None, *, stage: str) -> dict[str, float]:
        """The label ranking metrics, each averaged over the split's instances."""
        with torch.no_grad():
            scores = self(split.features.to(self.device))
            values = self.label_metrics(scores, split.labels.to(self.device))
        return {name: float(value.float().mean()) for name, value in values.items()}

    def scorer(self) -> nn.Module:
        return LabelScorer(self.scaler, self.core)


class CalibratedLabelRanker(LabelLearner):
    """``model=calibrated_label_ranking``: the calibrated linear sorting function learned online by
    Algorithm 1 (``rankers.label_ranking.online.CalibratedPerceptron``), ``n_runs`` runs in one tensor.

    Each pass (``partial_fit``) streams the whole training split, every run in its own seeded random
    order (as ``blend.fit_online``, which the cross-validation fits), so the runs differ while one
    tensor program updates all of them. Prediction uses the runs' averaged weights, averaged.

    On multilabel data the hypothesis is then blended with the calibration constraints' logistic
    solution (``rankers.label_ranking.blend``): ``share`` of Algorithm 1, the rest the L2-regularized
    logistic regression of the calibration constraints (binary relevance at ``C``), both calibrated
    linear sorting functions, so the blend is one too. ``share="cv"`` and ``C="cv"`` pick them from
    ``shares`` and ``Cs`` by cross-validation on the training split: the pair whose worse ratio to
    binary relevance at ``C=1`` over ranking and Hamming loss is lowest (``blend.choose_blend``).
    Top-label data uses Algorithm 1 alone (the logistic part cannot see the order of the relevant labels).

    Args:
        epochs: passes over the training data.
        n_runs: runs averaged into the hypothesis.
        loss: ``auto`` (``hamming`` for multilabel data, ``kendall`` for top-label data), ``hamming``,
            ``kendall``, ``footrule`` or ``constraints``.
        pairs: ``all`` or ``adjacent`` constraints (``losses.calibrated.preference_pairs``).
        average: averaged-perceptron hypothesis (else the last weights).
        bias: append a constant feature (each label its own offset against the zero point).
        seed: the runs' orders.
        share: Algorithm 1's share of the blend (1: Algorithm 1 alone), or ``"cv"`` (one of ``shares``).
        C: the logistic part's inverse regularization (as scikit-learn's ``LogisticRegression``'s),
            or ``"cv"`` (one of ``Cs``).
        cv_folds: folds of the cross-validation that chooses them.
    """

    streaming = True
    name = "calibrated_label_ranking"

    def __init__(
        self,
        *,
        n_features: int,
        n_labels: int,
        scaler: AffineScaler | None = None,
        label_names: list[str] | None = None,
        ranked: bool = False,
        epochs: int = 7,
        n_runs: int = 8,
        loss: str = "auto",
        pairs: str = "all",
        average: bool = True,
        bias: bool = True,
        seed: int = 0,
        share: float | str = "cv",
        shares: tuple[float, ...] = DEFAULT_SHARES,
        C: float | str = "cv",
        Cs: tuple[float, ...] = DEFAULT_CS,
        cv_folds: int = 3,
        monitor: str = "val/ranking_loss",
    ) -> None:
        super().__init__(
            n_features=n_features,
            n_labels=n_labels,
            scaler=scaler,
            label_names=label_names,
            ranked=ranked,
            monitor=monitor,
        )
        self.save_hyperparameters(ignore=["scaler"])
        if share != "cv" and not 0.0 <= float(share) <= 1.0:
            raise ValueError(f"model.share must be 'cv' or in [0, 1], got {share!r}")
        if C != "cv" and not float(C) > 0.0:
            raise ValueError(f"model.C must be 'cv' or > 0, got {C!r}")
        self.epochs = epochs
        # top-label data: the logistic part sees relevance only, not the order Algorithm 1 learns
        self.blends = not ranked and share != 1
        self.logistic: tuple[np.ndarray, np.ndarray] | None = None
        self.chosen_share: float | None = None if share == "cv" else float(share)
        self.chosen_C: float | None = None if C == "cv" else float(C)
        self.cv_table: dict[tuple[float, float], list[float]] = {}
        online_loss = ("kendall" if ranked else "hamming") if loss == "auto" else loss
        width = n_features + int(bias)
        self.learner = CalibratedPerceptron(
            width, n_labels, n_runs=n_runs, loss=online_loss, pairs=pairs, average=average
        )
        self.core = LinearLabelScorer(torch.zeros(n_labels, n_features), torch.zeros(n_labels))
        self.generator = torch.Generator().manual_seed(seed)
        self.online_loss_sum, self.online_count = 0.0, 0

    def _design(self, split: LabelSplit) -> Tensor:
        x = self.scaled(split)
        return torch.cat([x, torch.ones_like(x[:, :1])], 1) if self.hparams.bias else x

    def partial_fit(self, train: LabelSplit, *, epoch: int, log: FitLog, chunk: int = 2048) -> None:
        """One pass of every run over the whole split, each in its own seeded order; then the
        hypothesis (blended when it is) is what scores."""
        x, y = self._design(train), train.labels.float().to(self.device)
        n = len(y)
        order = torch.stack([torch.randperm(n, generator=self.generator) for _ in range(self.hparams.n_runs)])
        order = order.to(x.device)
        for first in range(0, n, chunk):  # bounded [R, chunk, F] copies; the stream goes on across chunks
            part = order[:, first : first + chunk]
            online = self.learner.partial_fit(x[part], y[part])
            self.online_loss_sum += float(online.mean(0).sum())
        self.online_count += n
        log.scalar("train/online_loss", self.online_loss_sum / max(1, self.online_count), self.online_count)
        self._adopt_hypothesis(train, log)

    def _adopt_hypothesis(self, train: LabelSplit, log: FitLog) -> None:
        """Copy the learner's combined hypothesis, blended when it is, into ``core`` (what evaluation,
        checkpoints and export use)."""
        weights = self.learner.hypothesis().to(self.core.weight.device)
        f = self.hparams.n_features
        weight = weights[:, :f]
        bias = weights[:, f] if self.hparams.bias else torch.zeros_like(self.core.bias)
        if self.blends:
            weight, bias = self._blended(weight, bias, train, log)
        self.core.weight.copy_(weight)
        self.core.bias.copy_(bias)

    def _blended(self, weight: Tensor, bias: Tensor, train: LabelSplit, log: FitLog) -> tuple[Tensor, Tensor]:
        x = self.scaled(train).cpu().numpy().astype(np.float64)  # as scikit-learn fits them
        y = train.labels.cpu().numpy()
        if self.chosen_share is None or self.chosen_C is None:
            self._choose_blend(x, y)
        if self.logistic is None:
            self.logistic = fit_logistic(x, y > 0, C=self.chosen_C)
        online = (weight.double().cpu().numpy(), bias.double().cpu().numpy())
        mixed_weight, mixed_bias = blend(self.logistic, online, x, self.chosen_share)
        log.scalar("train/share", self.chosen_share, self.online_count)
        log.scalar("train/C", self.chosen_C, self.online_count)
        as_tensor = partial(torch.as_tensor, dtype=torch.float32, device=self.core.weight.device)
        return as_tensor(mixed_weight), as_tensor(mixed_bias)

    def _choose_blend(self, x: np.ndarray, y: np.ndarray) -> None:
        """Cross-validate the (C, share) pairs the settings leave open on the training split."""
        Cs = [self.chosen_C] if self.chosen_C is not None else list(self.hparams.Cs or DEFAULT_CS)
        shares = [self.chosen_share] if self.chosen_share is not None else list(self.hparams.shares or DEFAULT_SHARES)
        online = {"epochs": self.epochs, "n_runs": self.hparams.n_runs, "loss": self.learner.loss}
        candidates = [(C, share) for C in Cs for share in shares]
        (self.chosen_C, self.chosen_share), self.cv_table = choose_blend(
            x, y, candidates, folds=self.hparams.cv_folds, seed=self.hparams.seed, online=online
        )

    def fit_results(self) -> dict[str, Any]:
        """results.json's ``blend``: the logistic part's ``C``, Algorithm 1's share and, when chosen by
        CV, each candidate's mean ``[ranking loss, Hamming loss]`` over the folds (``"C/share"`` keys)."""
        if not self.blends:
            return {"blend": {"share": 1.0}}
        table = {f"{C:g}/{share:g}": losses for (C, share), losses in self.cv_table.items()}
        return {"blend": {"C": self.chosen_C, "share": self.chosen_share, "cv": table}}

    # the blend and the runs' orders are no tensors of a submodule: they travel as extra state
    # (tensors and numbers only, so that checkpoints load with torch.load(weights_only=True))
    def get_extra_state(self) -> dict[str, Any]:
        return {
            "generator": self.generator.get_state(),
            "logistic": None if self.logistic is None else [torch.from_numpy(part) for part in self.logistic],
            "share": self.chosen_share,
            "C": self.chosen_C,
            "cv": [[C, share, list(losses)] for (C, share), losses in self.cv_table.items()],
            "online_loss": [self.online_loss_sum, self.online_count],
        }

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])
        self.logistic = None if state["logistic"] is None else tuple(part.numpy() for part in state["logistic"])
        self.chosen_share, self.chosen_C = state["share"], state["C"]
        self.cv_table = {(C, share): losses for C, share, losses in state["cv"]}
        self.online_loss_sum, self.online_count = state["online_loss"]


class NeuralLabelRanker(LabelRankerModule):
    """``model=calibrated_label_ranking_mlp``: an MLP with d outputs trained on the calibrated
    constraint loss (``losses.calibrated_ranking_loss``) with AdamW; ``hidden=[]`` is the linear
    calibrated sorting function trained by gradient.

    Args:
        hidden: hidden layer widths. dropout: on hidden layers. lr, weight_decay: AdamW's.
        epochs: passes (without a validation split the last is kept; with one, early stopping on ``monitor``).
        surrogate, margin, pairs, calibration: the loss's options.
    """

    def __init__(
        self,
        *,
        n_features: int,
        n_labels: int,
        scaler: AffineScaler | None = None,
        label_names: list[str] | None = None,
        ranked: bool = False,
        hidden: list[int] | tuple[int, ...] = (256,),
        dropout: float = 0.5,
        lr: float = 0.003,
        weight_decay: float = 0.1,
        epochs: int = 25,
        surrogate: str = "logistic",
        margin: float = 0.0,
        pairs: str = "all",
        calibration: float = 1.0,
        monitor: str = "val/ranking_loss",
    ) -> None:
        super().__init__(
            n_features=n_features,
            n_labels=n_labels,
            scaler=scaler,
            label_names=label_names,
            ranked=ranked,
            epochs=epochs,
            monitor=monitor,
        )
        self.save_hyperparameters(ignore=["scaler"])
        self.core = MLPLabelScorer(n_features, n_labels, hidden=list(hidden), dropout=dropout)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        h = self.hparams
        loss = calibrated_ranking_loss(
            self(batch["features"]),
            batch["labels"],
            surrogate=h.surrogate,
            margin=h.margin,
            pairs=h.pairs,
            calibration=h.calibration,
        )
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=len(batch["labels"]))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)


class BinaryRelevanceRanker(LabelLearner):
    """``model=binary_relevance``: one scikit-learn ``LogisticRegression`` per label on the scaled
    features (the field's baseline), fitted once on the whole training split; its decision values are
    the label scores, so the calibrated cut ``score > 0`` is ``P(relevant) > 1/2``.

    Args: ``C``, ``tol``, ``max_iter``: LogisticRegression's.
    """

    name = "binary_relevance"

    def __init__(
        self,
        *,
        n_features: int,
        n_labels: int,
        scaler: AffineScaler | None = None,
        label_names: list[str] | None = None,
        ranked: bool = False,
        C: float = 1.0,
        tol: float = 1e-4,
        max_iter: int = 1000,
        monitor: str = "val/ranking_loss",
    ) -> None:
        super().__init__(
            n_features=n_features,
            n_labels=n_labels,
            scaler=scaler,
            label_names=label_names,
            ranked=ranked,
            monitor=monitor,
        )
        self.save_hyperparameters(ignore=["scaler"])
        self.core = LinearLabelScorer(torch.zeros(n_labels, n_features), torch.zeros(n_labels))

    def fit(self, train: LabelSplit, val: LabelSplit | None, *, log: FitLog) -> None:
        x = self.scaled(train).cpu().numpy().astype(np.float64)  # as scikit-learn fits them
        y = train.labels.cpu().numpy()
        weight, bias = fit_binary_relevance(
            x, y > 0, C=self.hparams.C, tol=self.hparams.tol, max_iter=self.hparams.max_iter
        )
        self.core.weight.copy_(torch.from_numpy(weight))
        self.core.bias.copy_(torch.from_numpy(bias))
