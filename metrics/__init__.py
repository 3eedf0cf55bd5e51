"""Ranking metrics: pure functions in ``metrics.functional``, torchmetrics classes here."""

from metrics.modules import RankingMetric, best_metric, higher_is_better, monitor_mode, ranking_metrics

__all__ = ["RankingMetric", "best_metric", "higher_is_better", "monitor_mode", "ranking_metrics"]
