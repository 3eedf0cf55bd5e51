"""Ranking metrics: pure functions in ``metrics.functional``, torchmetrics classes here."""

from metrics.modules import RankingMetric, ranking_metrics

__all__ = ["RankingMetric", "ranking_metrics"]
