"""The val/test list metrics that the non-neural list rankers (RankBoost, random forests, GP
preference) log the same way: one ``metrics.ranking_metrics`` dict per stage, updated per batch of
padded lists and logged per epoch, nDCG@10 on the progress bar."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor, nn

from metrics import ranking_metrics

RESULT_KEYS = ("ndcg@1", "ndcg@5", "ndcg@10", "map", "mrr")


class ListMetrics:
    """Mixin for a ``LightningModule``: ``init_list_metrics`` in the constructor, ``log_list_metrics``
    in the validation and test steps."""

    def init_list_metrics(self, ks: Sequence[int], *, gain: str, empty: float) -> None:
        self.val_metrics = nn.ModuleDict(ranking_metrics(ks, gain=gain, empty=empty))
        self.test_metrics = nn.ModuleDict(ranking_metrics(ks, gain=gain, empty=empty))

    def log_list_metrics(self: pl.LightningModule, scores: Tensor, batch: Any, stage: str) -> None:
        """Update and log ``stage``'s metrics with ``scores [B, L]`` of ``batch``'s padded lists."""
        metrics = self.val_metrics if stage == "val" else self.test_metrics
        for name, metric in metrics.items():
            metric.update(scores, batch["labels"], batch["mask"])
            self.log(
                f"{stage}/{name}", metric, on_epoch=True, prog_bar=name == "ndcg@10", batch_size=batch["mask"].shape[0]
            )


def random_baseline(datamodule: Any, seed: int) -> dict[str, float]:
    """Test metrics of uniformly random scores: the floor a trained ranker must clear."""
    metrics = ranking_metrics()
    generator = torch.Generator().manual_seed(seed)
    for batch in datamodule.test_dataloader():
        if "mask" not in batch:
            return {}  # not query data
        scores = torch.rand(batch["mask"].shape, generator=generator)
        for metric in metrics.values():
            metric.update(scores, batch["labels"].cpu(), batch["mask"].cpu())
    return {name: float(metric.compute()) for name, metric in metrics.items() if name in RESULT_KEYS}
