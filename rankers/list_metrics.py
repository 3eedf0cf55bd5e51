"""The keys every ranker's results.json reports for a query split, and the random-scores floor the
pipeline and the learner harness report beside them."""

from __future__ import annotations

from typing import Any

import torch

from metrics import ranking_metrics

RESULT_KEYS = ("ndcg@1", "ndcg@5", "ndcg@10", "map", "mrr")


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
