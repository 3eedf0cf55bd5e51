"""The LightningModule shared by every gradient-trained ranker (RankNet, LambdaRank, ...)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric

from datamodules.batching import Batch
from datamodules.normalization import FeatureNormalizer
from metrics import best_metric, ranking_metrics
from rankers.export import export_scorer


def check_loss(loss: Callable[..., Tensor]) -> None:
    """Call the configured loss once on a tiny batch, so that a bad option (``model.loss.k=abc``) is
    reported when the model is built, naming the loss, not inside the first training step."""
    scores = torch.tensor([[0.5, -0.5, 0.0]], requires_grad=True)
    labels, mask = torch.tensor([[1.0, 0.0, 2.0]]), torch.tensor([[True, True, False]])
    try:
        value = loss(scores, labels, mask)
        value.backward()
    except Exception as error:
        name = getattr(getattr(loss, "func", loss), "__name__", repr(loss))
        options = getattr(loss, "keywords", {})
        raise ValueError(f"model.loss {name}({options}) cannot be computed: {error}") from error
    if value.dim() != 0 or not torch.isfinite(value):
        raise ValueError(f"model.loss must return a finite scalar, got {value}")


class PassLimit:
    """For learners whose training length is a number of passes over the data (``epochs``: the
    online rankers, LinkLearn) rather than the trainer's ``max_epochs``: they stop the trainer
    after their last pass, and refuse a trainer that would stop them earlier."""

    def check_passes(self: pl.LightningModule, passes: int) -> None:
        limit = self.trainer.max_epochs
        if limit is not None and 0 <= limit < passes:
            raise ValueError(f"model.epochs={passes} needs trainer.max_epochs >= {passes} (it is {limit})")

    def stop_after(self: pl.LightningModule, passes: int) -> None:
        if self.current_epoch + 1 >= passes:
            self.trainer.should_stop = True


class RankerModule(pl.LightningModule):
    """Scores documents with ``normalizer`` then ``scorer`` and trains on a loss from ``losses/``.

    Args:
        scorer: factory ``scorer(n_features=F) -> nn.Module`` mapping ``[..., F]`` to ``[...]``
            (Hydra ``_partial_``).
        loss: ``loss(scores, labels, mask) -> scalar`` (Hydra ``_partial_`` of a ``losses`` function).
        optimizer: factory ``optimizer(params=...)``; scheduler: optional factory ``scheduler(optimizer=...)``.
        n_features: input width, from the datamodule.
        normalizer: the datamodule's ``FeatureNormalizer`` (part of the model, hence of the export).
        ks: NDCG cut-offs logged as ``val/ndcg@k``; must contain the monitored one.
        gain, empty: metric conventions, see ``metrics.functional``; logged as hyperparameters.
        monitor: the validation metric for checkpoints and early stopping; its direction comes
            from ``metrics.higher_is_better``.
    """

    def __init__(
        self,
        scorer: Callable[..., nn.Module],
        loss: Callable[..., Tensor],
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., Any] | None = None,
        *,
        n_features: int,
        normalizer: FeatureNormalizer | None = None,
        ks: Sequence[int] = (1, 5, 10),
        gain: str = "exp2",
        empty: float = 0.0,
        monitor: str = "val/ndcg@10",
    ) -> None:
        super().__init__()
        ks = [int(k) for k in ks]  # plain ints: Hydra's ListConfig cannot be unpickled with weights_only
        self.save_hyperparameters(ignore=["scorer", "loss", "optimizer", "scheduler", "normalizer"])
        self.normalizer = normalizer if normalizer is not None else FeatureNormalizer("none", num_features=n_features)
        self.scorer = scorer(n_features=n_features)
        self.loss_fn, self.optimizer_factory, self.scheduler_factory = loss, optimizer, scheduler
        check_loss(loss)
        self.train_loss, self.val_loss = MeanMetric(), MeanMetric()
        self.val_metrics = nn.ModuleDict(ranking_metrics(ks, gain=gain, empty=empty))
        self.test_metrics = nn.ModuleDict(ranking_metrics(ks, gain=gain, empty=empty))
        self.val_best = best_metric(monitor)  # max or min by the metric's direction
        self.monitor = monitor

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        """Raw features ``[B, L, F]`` (mask ``[B, L]``) -> scores ``[B, L]``."""
        return self.scorer(self.normalizer(features, mask))

    def model_step(self, batch: Batch) -> tuple[Tensor, Tensor]:
        scores = self(batch["features"], batch["mask"])
        return self.loss_fn(scores, batch["labels"], batch["mask"]), scores

    def on_train_start(self) -> None:
        self.val_best.reset()  # forget the sanity-check validation of the untrained model

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        loss, _ = self.model_step(batch)
        self.train_loss(loss)
        self.log(
            "train/loss", self.train_loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=batch["mask"].shape[0]
        )
        return loss

    def _evaluate(self, batch: Batch, stage: str, metrics: nn.ModuleDict) -> None:
        loss, scores = self.model_step(batch)
        size = batch["mask"].shape[0]
        if stage == "val":
            # weighted by real queries: a DDP padding batch (one empty query) weighs nothing
            self.val_loss.update(loss, weight=batch["mask"].any(-1).sum())
            self.log("val/loss", self.val_loss, on_epoch=True, batch_size=size)
        for name, metric in metrics.items():
            metric.update(scores, batch["labels"], batch["mask"])
            self.log(f"{stage}/{name}", metric, on_epoch=True, prog_bar=name == "ndcg@10", batch_size=size)

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_metrics)

    def on_validation_epoch_end(self) -> None:
        name = self.monitor.removeprefix("val/")
        self.val_best(self.val_metrics[name].compute())
        # the same value on every rank (computed from synced metrics); sync_dist keeps Lightning exact about it
        self.log(f"{self.monitor}_best", self.val_best.compute(), prog_bar=True, sync_dist=True)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_metrics)

    def predict_step(self, batch: Batch, batch_idx: int) -> Tensor:
        return self(batch["features"], batch["mask"])

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = self.optimizer_factory(params=self.parameters())
        if self.scheduler_factory is None:
            return {"optimizer": optimizer}
        scheduler = self.scheduler_factory(optimizer=optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "monitor": self.monitor, "interval": "epoch"},
        }

    def export_model(self, out_dir: str | Path) -> dict[str, str]:
        """``scorer.pt``, ``scorer.onnx`` and ``meta.json``: raw ``[L, F]`` features in, ``[L]`` scores out."""
        return export_scorer(self.normalizer, self.scorer, out_dir, self.hparams.n_features)
