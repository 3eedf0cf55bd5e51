"""RankBoost (Freund, Iyer, Schapire & Singer 2003), as RankLib builds it (its collaborative-filtering row of
Harrington's Table 2 is an experiment: ``experiments.harrington2003_cf_rankboost``)."""

from rankers.boosting.module import RankBoostModule
from rankers.boosting.rankboost import RankBoostScorer, fit_rankboost

__all__ = ["RankBoostModule", "RankBoostScorer", "fit_rankboost"]
