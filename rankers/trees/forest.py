"""A random forest of regression trees on the relevance labels, as RankLib's RandomForests (Breiman
2001, bagged MART trees) builds it, grown by scikit-learn and scored by a tensorized traversal.

    python train.py model=random_forest data=letor data.train=train.txt data.test=test.txt

RankLib's ``RFRanker`` at its defaults (``-ranker 8``: ``-bag 300 -srate 1.0 -frate 0.3 -rtype 0
-tree 1 -leaf 100 -mls 1``): each of 300 bags draws as many *queries* as the training set has, with
replacement (``Sampler.doSampling(samples, 1.0, true)``), and fits MART with one tree of at most 100
leaves. With one tree MART's pseudo-response is ``label - 0``, so the tree is a least-squares
regression tree on the labels; each leaf outputs the mean label of its documents; every node's
split looks at a fresh sample of 30% of the features without replacement
(``FeatureHistogram.findBestSplit``); leaves hold at least one document; the tree grows best-first
until it has 100 leaves. The forest's score is the mean of the bags' trees (MART's shrinkage 0.1 on
its one tree scales every score alike and changes no ranking).

Here each bag is a ``sklearn.tree.DecisionTreeRegressor(max_features=0.3, max_leaf_nodes=100,
min_samples_leaf=1)`` fitted with ``sample_weight`` = how often the bootstrap drew each document's
query: the same weighted least-squares tree as fitting the duplicated queries, without copying
them. Not ``RandomForestRegressor``: it bootstraps documents, not queries. Two differences from
RankLib remain: sklearn tries every midpoint between distinct values as a threshold (RankLib at most
256 equal-width candidates per feature), and its best-first order splits the leaf with the largest
impurity decrease first (RankLib: the largest squared error).

The scorer (``rankers.trees.ensemble.TreeEnsembleScorer``, shared with boosting) holds every tree
as node arrays ``feature, threshold, left,
right, value, missing_left [T, M]`` (``M = 2 * max_leaves - 1``, padding nodes unused); a leaf
points to itself, so ``depth`` steps of one gather over all trees at once bring every document to
its leaf: ``node <- left[node] if x[feature[node]] <= threshold[node] else right[node]``.

NaN features: a NaN goes where sklearn's ``predict`` sends it, ``missing_left`` per node (the
side that held more training documents when no NaN was seen in training, which is always the case
here: the LETOR readers refuse NaN). ``+inf`` goes right at every split and ``-inf`` left, as the
comparison says (sklearn's ``predict`` refuses infinities).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from joblib import Parallel, delayed, effective_n_jobs
from sklearn.tree import DecisionTreeRegressor

from rankers.trees.ensemble import (
    NAN_LEFT,
    NAN_RIGHT,
    EnsembleArrays,
    RawTree,
    TreeEnsembleScorer,
    float32_at_most,
    pack,
)

__all__ = [
    "BOOTSTRAPS",
    "SPLITTERS",
    "TreeEnsembleScorer",
    "bootstrap_weights",
    "fit_forest",
    "forest_scores_numpy",
    "pack_trees",
    "tree_count_and_width",
]

BOOTSTRAPS = ("queries", "documents", "none")
SPLITTERS = ("best", "random")


def bootstrap_weights(
    offsets: np.ndarray, rng: np.random.Generator, *, kind: str = "queries", rate: float = 1.0
) -> np.ndarray:
    """One bag's per-document weights ``[N]``: how often the bootstrap drew each document.

    Args:
        offsets: ``[Q + 1]`` query boundaries (query ``q`` is documents ``offsets[q]:offsets[q+1]``).
        kind: ``queries`` (RankLib: ``int(rate * Q)`` queries drawn with replacement, a query's
            documents share its count), ``documents`` (``int(rate * N)`` documents with replacement,
            ``RandomForestRegressor``'s bootstrap) or ``none`` (every weight 1).
        rate: the bag's size as a share of the training set (RankLib's ``-srate``).

    Example:
        >>> w = bootstrap_weights(np.array([0, 2, 5]), np.random.default_rng(0))
        >>> w.tolist()  # the second query drawn twice, the first not at all
        [0.0, 0.0, 2.0, 2.0, 2.0]
    """
    if kind not in BOOTSTRAPS:
        raise ValueError(f"bootstrap must be one of {BOOTSTRAPS}, got {kind!r}")
    n_queries, n_docs = len(offsets) - 1, int(offsets[-1])
    if kind == "none":
        return np.ones(n_docs)
    if kind == "documents":
        return np.bincount(rng.integers(0, n_docs, int(rate * n_docs)), minlength=n_docs).astype(np.float64)
    counts = np.bincount(rng.integers(0, n_queries, int(rate * n_queries)), minlength=n_queries)
    return np.repeat(counts, np.diff(offsets)).astype(np.float64)


def _fit_one(
    features: np.ndarray, labels: np.ndarray, weights: np.ndarray, seed: int, options: dict
) -> DecisionTreeRegressor | None:
    used = weights > 0  # documents outside the bag cost nothing (sklearn still sorts weight-0 rows)
    if not used.any():
        return None
    tree = DecisionTreeRegressor(random_state=seed, **options)
    return tree.fit(features[used], labels[used], sample_weight=weights[used])


def fit_forest(
    features: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    *,
    n_trees: int = 300,
    sample_rate: float = 1.0,
    feature_rate: float = 0.3,
    max_leaves: int = 100,
    min_leaf: int = 1,
    bootstrap: str = "queries",
    splitter: str = "best",
    seed: int = 0,
    n_jobs: int | None = -1,
) -> list[DecisionTreeRegressor]:
    """Fit the forest: ``n_trees`` bags, one least-squares regression tree on the labels each.

    Args:
        features: ``[N, F]`` float32, the documents of every training query in query order.
        labels: ``[N]`` graded relevance.
        offsets: ``[Q + 1]`` query boundaries.
        n_trees: bags (RankLib's ``-bag``); sample_rate: ``-srate``; feature_rate: the share of
            features each split considers (``-frate``, sklearn's ``max_features``); max_leaves:
            ``-leaf``; min_leaf: ``-mls``; bootstrap: see ``bootstrap_weights``; splitter: ``best``
            (every threshold, as RankLib) or ``random`` (one random threshold per feature: extra-trees).
        seed: draws every bag and every tree's feature samples (RankLib's draws are unseeded).
        n_jobs: threads fitting trees at once (sklearn releases the GIL while growing a tree;
            ``-1``: every core, ``None``: one).

    Returns:
        The fitted trees, in bag order (a bag that drew no document is skipped).
    """
    if splitter not in SPLITTERS:
        raise ValueError(f"splitter must be one of {SPLITTERS}, got {splitter!r}")
    if n_trees < 1 or max_leaves < 2 or min_leaf < 1 or not 0 < feature_rate <= 1 or not sample_rate > 0:
        raise ValueError(
            "need n_trees >= 1, max_leaves >= 2, min_leaf >= 1, 0 < feature_rate <= 1 and sample_rate > 0, got "
            f"{n_trees}, {max_leaves}, {min_leaf}, {feature_rate}, {sample_rate}"
        )
    if len(labels) == 0:
        raise ValueError("a random forest needs training documents: none were given")
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, 2**31 - 1, n_trees)
    options = {
        "max_features": feature_rate,
        "max_leaf_nodes": max_leaves,
        "min_samples_leaf": min_leaf,
        "splitter": splitter,
    }
    features = np.ascontiguousarray(features, dtype=np.float32)
    labels = np.asarray(labels, dtype=np.float64)
    # a few trees per thread at a time: the bags' weights of one chunk in memory, and an exception raised
    # in this thread between two chunks (model=auto's time budget, SIGALRM) stops the fit within a chunk
    parallel = Parallel(n_jobs=n_jobs, prefer="threads")
    chunk = 4 * effective_n_jobs(n_jobs)
    trees: list[DecisionTreeRegressor | None] = []
    for start in range(0, n_trees, chunk):
        part = seeds[start : start + chunk]
        bags = [bootstrap_weights(offsets, rng, kind=bootstrap, rate=sample_rate) for _ in part]
        trees += parallel(delayed(_fit_one)(features, labels, w, int(s), options) for w, s in zip(bags, part))
    return [tree for tree in trees if tree is not None]


def pack_trees(trees: Sequence[DecisionTreeRegressor], max_nodes: int | None = None) -> EnsembleArrays:
    """Fitted sklearn regression trees -> the tree ensemble's node arrays (``rankers.trees.ensemble.pack``)
    with ``M = max_nodes`` (default: the largest tree's node count) columns. sklearn's rule is
    ``x <= threshold`` in float64 (the largest float32 at most it decides the same for float32 inputs)
    and a NaN goes where ``missing_go_to_left`` says.

    Example:
        >>> X, y = np.array([[0.0], [1.0], [2.0]], np.float32), np.array([0.0, 1.0, 2.0])
        >>> arrays = pack_trees([DecisionTreeRegressor(max_leaf_nodes=2).fit(X, y)])
        >>> arrays.left.tolist(), arrays.threshold.tolist(), arrays.value.tolist(), arrays.depth
        ([[1, 1, 2]], [[0.5, inf, inf]], [[0.0, 0.0, 1.5]], 1)
    """
    return pack([_raw_tree(tree.tree_) for tree in trees], max_nodes)


def _raw_tree(t) -> RawTree:
    """One sklearn ``tree_`` in its own (depth-first) numbering."""
    nan_right = (t.children_left >= 0) & (np.asarray(t.missing_go_to_left) == 0)
    return RawTree(
        feature=t.feature,
        threshold=float32_at_most(t.threshold),
        left=t.children_left,
        right=t.children_right,
        value=t.value[:, 0, 0],
        route=np.where(nan_right, NAN_RIGHT, NAN_LEFT),
    )


def forest_scores_numpy(trees: Sequence[DecisionTreeRegressor], features: np.ndarray) -> np.ndarray:
    """sklearn's own mean prediction ``[N]`` (float64): the reference the tensorized scorer matches."""
    if not trees:
        return np.zeros(len(features))
    return np.mean([tree.predict(features) for tree in trees], axis=0)


def tree_count_and_width(n_trees: int, max_leaves: int) -> tuple[int, int]:
    """Preallocated node-array shape ``[T, M]`` for a forest's hyperparameters (checkpoints keep one
    shape): ``M = 2 * max_leaves - 1``, a binary tree's most nodes."""
    return n_trees, 2 * max_leaves - 1
