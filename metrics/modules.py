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
from torchmetrics import MaxMetric, Metric, MinMetric

from metrics import functional as F

QueryMetric = Callable[..., Tensor]

# Whether a larger value is better, for every per-query metric and every name the rankers log
# (by its base: ``val/ndcg@10`` -> ``ndcg``). Checkpointing, early stopping and the running best
# read it from here (``monitor_mode``), so no config states a direction of its own.
HIGHER_IS_BETTER: dict[str, bool] = {
    "ndcg": True,
    "dcg": True,
    "average_precision": True,
    "map": True,
    "reciprocal_rank": True,
    "mrr": True,
    "precision": True,
    "p": True,
    "r_precision": True,
    "winner_takes_all": False,
    "wta": False,
    "pairwise_error": False,
    "kpartite_error": False,
    "rank_loss": False,
    "loss": False,
    # label ranking (metrics.label_ranking)
    "ranking_loss": False,
    "hamming_loss": False,
    "coverage": False,
    "one_error": False,
    "kendall_tau": False,
    "footrule": False,
}


def higher_is_better(name: str) -> bool:
    """Direction of a metric or logged name: ``"val/ndcg@10"``, ``"test/rank_loss"``, ``"ndcg"``..."""
    base = name.rsplit("/", 1)[-1].split("@", 1)[0]
    if base not in HIGHER_IS_BETTER:
        raise KeyError(f"no known direction for metric {name!r} (known: {sorted(HIGHER_IS_BETTER)})")
    return HIGHER_IS_BETTER[base]


def monitor_mode(name: str) -> str:
    """``"max"`` or ``"min"`` for Lightning's checkpoint and early-stopping callbacks."""
    return "max" if higher_is_better(name) else "min"


def best_metric(name: str) -> MaxMetric | MinMetric:
    """The running best of a monitored value: a ``MaxMetric`` or ``MinMetric`` by its direction."""
    return MaxMetric() if higher_is_better(name) else MinMetric()


class RankingMetric(Metric):
    """Mean over queries of ``fn(scores, labels, mask, **options)``.

    ``update(scores [B, L], labels [B, L], mask [B, L] | None)``; ``compute() -> scalar``.
    Queries with no real document are not counted. ``higher_is_better`` follows ``fn``.

    Example:
        >>> import torch
        >>> metric = RankingMetric(F.ndcg, k=2)
        >>> metric.update(torch.tensor([[0.9, 0.1, 0.5]]), torch.tensor([[1.0, 0.0, 0.0]]))
        >>> round(float(metric.compute()), 4), metric.higher_is_better
        (1.0, True)
    """

    full_state_update = False

    def __init__(self, fn: QueryMetric, **options: Any) -> None:
        super().__init__()
        self.fn = fn
        self._higher_is_better = higher_is_better(fn.__name__)
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

    @property
    def higher_is_better(self) -> bool:  # torchmetrics declares it per class; ours follows ``fn``
        return self._higher_is_better


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
