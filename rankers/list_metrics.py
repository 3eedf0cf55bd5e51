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


def name_evaluated(results: dict[str, Any], datamodule: Any, trained_on: dict[str, float] | None = None) -> None:
    """Say in ``results`` what was evaluated: ``results["evaluated"]`` maps each reported split (``val``,
    ``test``) to its source (``datamodule.split_sources()`` where it has one). With nothing held out
    (a ratings stream with n_test=0, a training file alone with val_fraction=0) the training stream's own
    figures ``trained_on`` go under ``"train"``, named as such. Every trainer path calls this one."""
    sources = datamodule.split_sources() if hasattr(datamodule, "split_sources") else {}
    results["evaluated"] = {
        name: sources.get(name, f"the {name} split") for name in ("val", "test") if results.get(name)
    }
    if not results["evaluated"] and trained_on:
        results["train"] = trained_on
        results["evaluated"] = {"train": "the training data as trained on (no validation or test split)"}
