"""Tree ensembles: a random forest of least-squares regression trees (RankLib's RandomForests),
grown by scikit-learn, scored and exported as tensorized node arrays."""

from rankers.trees.forest import TreeEnsembleScorer, fit_forest, pack_trees

__all__ = ["TreeEnsembleScorer", "fit_forest", "pack_trees"]
