"""torchmetrics wrappers that average a per-query metric over queries, DDP-safe.

Each wrapper keeps two states, the sum of per-query values and the number of queries, both with
``dist_reduce_fx="sum"``, so a distributed run averages over every query of every process rather
than over per-process means.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from metrics import functional as F

QueryMetric = Callable[..., Tensor]


class RankingMetric(Metric):
    """Mean over queries of ``fn(scores, labels, mask, **options)``.

    ``update(scores [B, L], labels [B, L], mask [B, L] | None)``; ``compute() -> scalar``.
    Queries with no real document are not counted.
    """

    full_state_update = False

    def __init__(self, fn: QueryMetric, **options: Any) -> None:
        super().__init__()
        self.fn = fn
        self.options = options
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, scores: Tensor, labels: Tensor, mask: Tensor | None = None) -> None:
        if mask is None:
            mask = torch.ones_like(labels, dtype=torch.bool)
        per_query = self.fn(scores, labels, mask, **self.options)
        has_docs = mask.any(-1)
        self.total += per_query[has_docs].double().sum()
        self.count += has_docs.sum()

    def compute(self) -> Tensor:
        return (self.total / self.count.clamp_min(1)).float()


def ranking_metrics(
    ks: Iterable[int] = (1, 5, 10), *, gain: F.Gain = "exp2", empty: float = 0.0
) -> dict[str, RankingMetric]:
    """The standard set logged by every ranker: ``ndcg@k`` for each k, ``map`` and ``mrr``.

    ``gain`` and ``empty`` follow ``metrics.functional`` and are the logged conventions.
    """
    metrics = {f"ndcg@{k}": RankingMetric(F.ndcg, k=k, gain=gain, empty=empty) for k in ks}
    metrics["map"] = RankingMetric(F.average_precision, empty=empty)
    metrics["mrr"] = RankingMetric(F.reciprocal_rank, empty=empty)
    return metrics
