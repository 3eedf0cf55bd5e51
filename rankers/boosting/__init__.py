"""RankBoost (Freund, Iyer, Schapire & Singer 2003), as RankLib builds it, and its collaborative-filtering row."""

from rankers.boosting.module import RankBoostModule
from rankers.boosting.rankboost import RankBoostScorer, fit_rankboost

__all__ = ["RankBoostModule", "RankBoostScorer", "fit_rankboost"]
