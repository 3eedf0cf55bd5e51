"""LightningModule for the online ordinal rankers: manual optimization, one pass over the stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric

from datamodules.batching import Batch, StreamBatch
from datamodules.normalization import FeatureNormalizer
from metrics import ranking_metrics
from metrics.functional import rank_loss
from rankers.export import export_scorer
from rankers.neural.module import PassLimit
from rankers.outputs import save_torchscript
from rankers.perceptron.ensemble import PRankEnsemble, WidrowHoff, rank_of
from rankers.scorers import LinearScorer

# algorithm -> (combination rule used for predictions, keep the hypothesis history)
ALGORITHMS = {
    "prank": ("bpm", False),
    "prank_vp": ("voted", True),
    "oap_bpm": ("bpm", False),
    "oap_bagg": ("bagg", False),
    "oap_vp": ("vp", False),
    "widrow_hoff": (None, False),
}


class Grader(nn.Module):
    """Raw features ``[L, F]`` -> predicted 0-based grade ``[L]`` (averaged weights and thresholds)."""

    def __init__(self, normalizer: FeatureNormalizer, weights: Tensor, thresholds: Tensor) -> None:
        super().__init__()
        self.normalizer = normalizer
        self.register_buffer("weights", weights)
        self.register_buffer("thresholds", thresholds)

    def forward(self, features: Tensor) -> Tensor:
        score = self.normalizer(features.unsqueeze(0), None).squeeze(0) @ self.weights
        return (score.unsqueeze(-1) - self.thresholds >= 0).long().cumprod(-1).sum(-1)


class OnlineOrdinalModule(PassLimit, pl.LightningModule):
    """PRank / PRank-VP / OAP-BPM / OAP-Bagg / OAP-VP / Widrow-Hoff trained on the stream in order.

    Batches are ``{"features": [B, d], "labels": [B]}`` (ordinal streams) or LETOR batches
    ``features [B, L, F]`` with ``mask``, whose real documents are streamed in order and whose
    labels are the ordinal ranks. Logs the online average rank loss ``1/T sum |y_hat_t - y_t|`` of
    the predictions made before each update (Harrington's Figure 2), test rank loss, and NDCG
    when the data has queries.
    """

    def __init__(
        self,
        algorithm: str,
        *,
        n_features: int,
        n_ranks: int,
        n_perceptrons: int = 1,
        tau: float = 1.0,
        eta: float = 0.1,
        seed: int = 0,
        epochs: int = 1,
        normalizer: FeatureNormalizer | None = None,
        monitor: str = "val/rank_loss",
    ) -> None:
        super().__init__()
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {sorted(ALGORITHMS)}, got {algorithm!r}")
        self.save_hyperparameters(ignore=["normalizer"])
        self.automatic_optimization = False
        self.normalizer = normalizer if normalizer is not None else FeatureNormalizer("none", num_features=n_features)
        self.combine, keep_history = ALGORITHMS[algorithm]
        self.n_ranks, self.monitor = n_ranks, monitor
        if algorithm == "widrow_hoff":
            self.learner: Any = WidrowHoff(n_features, n_ranks, eta=eta)
        else:
            single = algorithm in ("prank", "prank_vp")
            self.learner = PRankEnsemble(
                n_features,
                n_ranks,
                n_perceptrons=1 if single else n_perceptrons,
                tau=1.0 if single else tau,
                seed=seed,
                keep_history=keep_history,
            )
        self.online_error, self.online_count = torch.zeros(()), 0
        # Lightning counts training steps by optimizer steps (checkpointing and logging depend on
        # it); the perceptron update is no gradient step, so a no-op optimizer marks each batch.
        self.step_marker = nn.Parameter(torch.zeros(()), requires_grad=False)
        self.val_rank_loss, self.test_rank_loss = MeanMetric(), MeanMetric()
        self.val_metrics = nn.ModuleDict(ranking_metrics())
        self.test_metrics = nn.ModuleDict(ranking_metrics())

    def _stream(self, batch: Batch | StreamBatch) -> tuple[Tensor, Tensor]:
        features, labels = batch["features"], batch["labels"]
        if "mask" in batch:  # LETOR batch: its real documents, in order, each normalized within its query
            # (as evaluation and the exported scorer and grader do: they see one query at a time)
            mask = batch["mask"]
            features, labels = self.normalizer(features, mask)[mask], labels[mask]
        labels = labels.long()
        if labels.numel() and int(labels.max()) >= self.n_ranks:
            raise ValueError(f"label {int(labels.max())} >= n_ranks={self.n_ranks}; set model.n_ranks")
        return features, labels

    def on_fit_start(self) -> None:
        self.refuse_ddp("the online rankers stream the examples")
        self.check_passes(self.hparams.epochs)
        self.learner.to(self.device)

    def on_train_epoch_end(self) -> None:
        self.stop_after(self.hparams.epochs)

    def on_validation_start(self) -> None:
        self.learner.to(self.device)  # a checkpoint may have been loaded onto another device

    def on_test_start(self) -> None:
        self.learner.to(self.device)

    def training_step(self, batch: Batch | StreamBatch, batch_idx: int) -> None:
        features, labels = self._stream(batch)
        online = self._online_predictions(features, labels)
        self.optimizers().step()
        # a tensor sum: no host sync per batch (the progress bar reads it when it refreshes)
        self.online_error = self.online_error + (online - labels).abs().sum()
        self.online_count += labels.numel()
        self.log(
            "train/online_rank_loss",
            self.online_error / max(1, self.online_count),
            on_step=True,
            prog_bar=True,
            batch_size=labels.numel(),
        )
        self.log("train/examples_seen", float(self.online_count), on_step=True, batch_size=labels.numel())

    def _online_predictions(self, features: Tensor, labels: Tensor) -> Tensor:
        """Stream the batch; the prediction of the combined model before each update, ``[T]``."""
        if isinstance(self.learner, WidrowHoff) or self.combine == "voted":
            # one model (Widrow-Hoff), or a rule that needs the whole history (voted): the current hypothesis
            return self.learner.partial_fit(features[None], labels[None])[0, 0]
        return self.learner.partial_fit(features[None], labels[None], combine=self.combine)[0]

    def predict_ranks(self, features: Tensor) -> Tensor:
        if isinstance(self.learner, WidrowHoff):
            return self.learner.predict(features[None])[0, 0]
        return self.learner.predict(features[None], self.combine)[0]

    def scores(self, features: Tensor) -> Tensor:
        """Ranking scores ``w . x`` of ``features [..., d]`` (averaged weights)."""
        return features @ self.linear_weights()

    def linear_weights(self) -> Tensor:
        if isinstance(self.learner, WidrowHoff):
            return self.learner.weights[0, 0]
        return self.learner.weights[0].mean(0)

    def _evaluate(self, batch: Batch | StreamBatch, stage: str) -> None:
        features, labels = self._stream(batch)
        loss_metric = self.val_rank_loss if stage == "val" else self.test_rank_loss
        loss_metric.update(
            rank_loss(self.predict_ranks(features)[None].float(), labels[None].float()), weight=labels.numel()
        )
        self.log(f"{stage}/rank_loss", loss_metric, on_epoch=True, prog_bar=True)
        if "mask" in batch:  # queries: rank documents by w . x
            raw = self.normalizer(batch["features"], batch["mask"])
            scores = self.scores(raw)
            metrics = self.val_metrics if stage == "val" else self.test_metrics
            for name, metric in metrics.items():
                metric.update(scores, batch["labels"], batch["mask"])
                self.log(f"{stage}/{name}", metric, on_epoch=True, batch_size=batch["mask"].shape[0])

    def validation_step(self, batch: Batch | StreamBatch, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Batch | StreamBatch, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD([self.step_marker], lr=0.0)

    # the learner is not an nn.Module: carry its state in checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = {name: value for name, value in vars(self.learner).items() if isinstance(value, Tensor)}
        if isinstance(self.learner, PRankEnsemble):
            state["drawn"] = self.learner.drawn  # where the counter-based Bernoulli draws go on
            state["history"] = self.learner.history
        checkpoint["online_learner"] = state
        checkpoint["online_loss"] = (float(self.online_error), self.online_count)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        for name, value in checkpoint["online_learner"].items():
            if name == "generator":  # a checkpoint from before the counter-based draws: they start over
                continue
            elif name == "history":
                self.learner.history = list(value)
            else:
                setattr(self.learner, name, value)
        error, self.online_count = checkpoint["online_loss"]
        self.online_error = torch.tensor(error)

    @property
    def scorer(self) -> nn.Module:
        """``w . x`` as a ``LinearScorer`` (bias 0), for the standard export."""
        return LinearScorer.from_weights(self.linear_weights())

    def export_model(self, out_dir: str | Path) -> dict[str, str]:
        """The standard scorer export of ``w . x``, plus ``grader.pt``: raw features ``[L, F]`` ->
        predicted grade ``[L]`` (averaged weights and thresholds, the OAP-BPM rule)."""
        exported = export_scorer(self.normalizer, self.scorer, out_dir, self.hparams.n_features)
        if isinstance(self.learner, WidrowHoff):
            return exported
        path = Path(out_dir) / "grader.pt"
        grader = Grader(
            self.normalizer.cpu(),
            self.linear_weights().detach().cpu(),
            self.learner.thresholds[0].mean(0).detach().cpu(),
        )
        save_torchscript(torch.jit.script(grader), path, "export")
        return {**exported, "grader": str(path)}


__all__ = ["Grader", "OnlineOrdinalModule", "rank_of"]
