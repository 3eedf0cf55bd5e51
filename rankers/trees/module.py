"""``model=random_forest``: the random forest of ``rankers.trees.forest`` under ``train.py``.

python train.py model=random_forest data=letor data.train=train.txt data.test=test.txt
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from datamodules.normalization import FeatureNormalizer
from rankers.learner import FitLog, Learner, QuerySplit
from rankers.trees.ensemble import NAN_RIGHT
from rankers.trees.forest import (
    BOOTSTRAPS,
    SPLITTERS,
    TreeEnsembleScorer,
    fit_forest,
    pack_trees,
    tree_count_and_width,
)

logger = logging.getLogger(__name__)


class RandomForestModule(Learner):
    """A random forest ranker (RankLib's RandomForests at its defaults) trained under ``train.py``.

    The forest is grown once, by scikit-learn on the CPU, from every document of every training query
    (raw features: a tree is unchanged by the datamodule's global z-score, and ``query_zscore`` is not
    applied); ``rankers.harness`` runs it. The fitted
    trees are kept as node-array buffers preallocated at ``[n_trees, 2 * max_leaves - 1]``, so
    checkpoints have one shape, and scored by ``TreeEnsembleScorer`` (what is exported).

    Args:
        n_features: from ``datamodule.model_inputs()`` (the normalizer is accepted and not used).
        n_trees, sample_rate, feature_rate, max_leaves, min_leaf, bootstrap, splitter: see
            ``rankers.trees.forest.fit_forest``.
        seed: draws the bags and the features tried at each split.
        n_jobs: threads growing trees (``-1``: every core).
        ks, gain, empty, monitor: metric conventions (``metrics.functional``).
        score_chunk: documents scored at once in evaluation (``[chunk, n_trees]`` node indices).
        cpu_threads: torch threads while fitting / evaluating on CPU (None: leave as is). A traversal
            step is a few gathers: on 2 busy cores, two torch threads scored letor_a's test split
            15x slower than one (3.1 s against 0.2 s). The trees grow in ``n_jobs`` threads regardless.
    """

    def __init__(
        self,
        *,
        n_features: int,
        normalizer: FeatureNormalizer | None = None,
        n_trees: int = 300,
        sample_rate: float = 1.0,
        feature_rate: float = 0.3,
        max_leaves: int = 100,
        min_leaf: int = 1,
        bootstrap: str = "queries",
        splitter: str = "best",
        seed: int = 0,
        n_jobs: int | None = -1,
        ks: Sequence[int] = (1, 5, 10),
        gain: str = "exp2",
        empty: float = 0.0,
        monitor: str = "val/ndcg@10",
        score_chunk: int = 8192,
        cpu_threads: int | None = 1,
    ) -> None:
        super().__init__(ks=ks, gain=gain, empty=empty, monitor=monitor)
        ks = [int(k) for k in ks]
        self.save_hyperparameters(ignore=["normalizer"])
        self.cpu_threads = cpu_threads
        if bootstrap not in BOOTSTRAPS:
            raise ValueError(f"model.bootstrap must be one of {BOOTSTRAPS}, got {bootstrap!r}")
        if splitter not in SPLITTERS:
            raise ValueError(f"model.splitter must be one of {SPLITTERS}, got {splitter!r}")
        if n_trees < 1 or max_leaves < 2 or min_leaf < 1 or not 0 < feature_rate <= 1 or sample_rate <= 0:
            raise ValueError(
                "model.n_trees >= 1, max_leaves >= 2, min_leaf >= 1, 0 < feature_rate <= 1 and sample_rate > 0 "
                f"are needed, got {n_trees}, {max_leaves}, {min_leaf}, {feature_rate}, {sample_rate}"
            )
        shape = tree_count_and_width(n_trees, max_leaves)
        self.register_buffer("tree_feature", torch.zeros(shape, dtype=torch.long))
        self.register_buffer("tree_threshold", torch.full(shape, float("inf")))
        self.register_buffer("tree_left", torch.arange(shape[1]).expand(shape).clone())
        self.register_buffer("tree_value", torch.zeros(shape))
        self.register_buffer("tree_nan_right", torch.zeros(shape, dtype=torch.bool))
        self.register_buffer("tree_depth", torch.zeros((), dtype=torch.long))
        self.register_buffer("n_fitted", torch.zeros((), dtype=torch.long))
        self._cache: dict[str, TreeEnsembleScorer] = {}  # a plain dict: the scorer is no submodule
        self.fit_info: dict[str, Any] = {}

    # -- the forest ----------------------------------------------------------------------------
    def scorer(self) -> TreeEnsembleScorer:
        """The fitted forest as a standalone scorer of raw features ``[..., F] -> [...]`` (CPU)."""
        if "scorer" not in self._cache:  # rebuilt after a fit or a checkpoint load (load_state_dict clears it)
            self._cache["scorer"] = TreeEnsembleScorer(
                self.tree_feature.cpu(),
                self.tree_threshold.cpu(),
                self.tree_left.cpu(),
                self.tree_value.cpu(),
                self.tree_nan_right.cpu(),
                depth=int(self.tree_depth),
                n_features=self.hparams.n_features,
                n_trees=int(self.n_fitted),
            ).eval()
        return self._cache["scorer"]

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        self._cache.clear()
        super()._load_from_state_dict(*args, **kwargs)

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        """Raw features ``[B, L, F]`` (mask ``[B, L]``, not needed: each document is scored alone)
        -> scores ``[B, L]``."""
        if int(self.n_fitted) == 0:
            raise RuntimeError("the random forest is not fitted yet")
        scorer = self.scorer()
        flat = features.reshape(-1, features.shape[-1]).detach().float().cpu()
        chunk = self.hparams.score_chunk
        with torch.no_grad():
            scores = torch.cat([scorer(flat[i : i + chunk]) for i in range(0, len(flat), chunk)])
        return scores.reshape(features.shape[:-1]).to(features.device)

    def fit_trees(self, features: np.ndarray, labels: np.ndarray, offsets: np.ndarray) -> None:
        """Grow the forest on flat documents ``[N, F]`` / ``[N]`` of queries ``offsets [Q + 1]``."""
        h = self.hparams
        trees = fit_forest(
            features,
            labels,
            offsets,
            n_trees=h.n_trees,
            sample_rate=h.sample_rate,
            feature_rate=h.feature_rate,
            max_leaves=h.max_leaves,
            min_leaf=h.min_leaf,
            bootstrap=h.bootstrap,
            splitter=h.splitter,
            seed=h.seed,
            n_jobs=h.n_jobs,
        )
        arrays = pack_trees(trees, self.tree_feature.shape[1])
        t = len(trees)
        for name in ("feature", "threshold", "left", "value"):
            buffer = getattr(self, f"tree_{name}")
            buffer[:t] = torch.from_numpy(getattr(arrays, name)).to(buffer)
        # sklearn's routes are NaN-left / NaN-right only: kept as a bool buffer (the checkpoints' layout)
        self.tree_nan_right[:t] = torch.from_numpy(arrays.route == NAN_RIGHT)
        self.tree_depth.fill_(arrays.depth)
        self.n_fitted.fill_(t)
        self._cache.clear()
        leaves = [tree.get_n_leaves() for tree in trees]
        self.fit_info = {
            "trees": t,
            "depth": arrays.depth,
            "mean_leaves": float(np.mean(leaves)) if leaves else 0.0,
            "documents": len(labels),
            "queries": len(offsets) - 1,
        }

    # -- the learner contract -----------------------------------------------------------------
    name = "random_forest"

    def fit(self, train: QuerySplit, val: QuerySplit | None, *, log: FitLog) -> None:
        """Grow the forest on the whole training split (a resumed, fitted forest is kept)."""
        if int(self.n_fitted) > 0:
            return
        features, labels, offsets = (
            train.features.cpu().numpy().astype(np.float32),
            train.labels.cpu().numpy().astype(np.float64),
            train.offsets.cpu().numpy().astype(np.int64),
        )
        self.fit_trees(features, labels, offsets)
        log.scalar("train/trees", float(self.n_fitted), 1)
        logger.info(
            "random forest: %d trees on %d documents of %d queries, %d features; deepest leaf %d, %.1f leaves a tree",
            self.fit_info["trees"],
            self.fit_info["documents"],
            self.fit_info["queries"],
            features.shape[1],
            self.fit_info["depth"],
            self.fit_info["mean_leaves"],
        )

    def device_policy(self, available: torch.device) -> torch.device:
        """The CPU, always: scikit-learn grows the trees there and ``forward`` traverses them there
        (a traversal step is a few data-dependent gathers; GPU unmeasured)."""
        return torch.device("cpu")

    # -- export ---------------------------------------------------------------------------------
    def export_meta(self) -> dict:
        scorer = self.scorer()
        return {
            "trees": scorer.n_trees,
            "depth": scorer.depth,
            "nan": "each split sends NaN where sklearn's predict does (missing_go_to_left); +inf right, -inf left",
        }
