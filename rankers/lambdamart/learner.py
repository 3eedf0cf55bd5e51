"""``model=lambdamart``: gradient-boosted trees with the LambdaMART objective, trained by LightGBM
(``lambdarank``, the default) or XGBoost (``rank:ndcg``, ``model.engine=xgboost``), run by the harness.

    python train.py model=lambdamart data=letor data.train=train.txt data.test=test.txt
    python train.py model=lambdamart model.engine=xgboost data=letor data.train=... data.val=... data.test=...

Defaults are the engine's own (every tree option null = the engine's default; 100 rounds), on the raw
features, every training query: ``model=lambdamart`` is LightGBM's ``LGBMRanker(objective="lambdarank")``
at its defaults, inside the framework. With a validation split (``data.val=FILE`` or
``data.val_fraction > 0``) the round of the best val ndcg@10 (ours: ``metrics.functional.ndcg``, the
run's gain, ``empty=0``) is kept, stopping after ``early_stopping_rounds`` rounds without a gain. The
exported scorer is the engine's trees, tensorized (``rankers.trees.ensemble``): docs/lambdamart.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from rankers.lambdamart.engines import (
    OPTION_NAMES,
    EngineModel,
    Split,
    check_options,
    engine_params,
    fit_engine,
    lightgbm_scorer,
    xgboost_scorer,
)
from rankers.learner import FitLog, Learner, QuerySplit


def _split(split: QuerySplit) -> Split:
    """The harness's tensors -> numpy for the engines (float32 features, float64 labels)."""
    return Split(
        split.features.detach().cpu().numpy().astype(np.float32, copy=False),
        split.labels.detach().cpu().numpy().astype(np.float64),
        split.offsets.detach().cpu().numpy().astype(np.int64),
    )


class LambdaMART(Learner):
    """LambdaMART by a GBDT engine; the fitted model is the engine's own serialization (extra state).

    Args:
        n_features: from ``datamodule.model_inputs()`` (a normalizer given there is not used: trees
            read raw features, and a monotone rescaling changes no split's partition).
        engine: ``lightgbm`` | ``xgboost``.
        n_estimators: boosting rounds (both engines' default: 100).
        learning_rate: and ``max_leaves``, ``max_depth``, ``min_leaf``, ``min_hessian``, ``subsample``,
            ``feature_rate``, ``l2``, ``truncation``: ours -> the engine's parameter (``OPTION_NAMES``);
            None: the engine's default. One the engine lacks is refused when set (``min_leaf`` and
            ``truncation`` under xgboost).
        early_stopping_rounds: with a validation split, stop after this many rounds without a better
            val ndcg@10 and keep the best round (None: train every round, keep the best).
        params: further engine parameters, passed as they are (refused when we set them ourselves or
            the export cannot represent them: ``rankers.lambdamart.engines._REFUSED``).
        seed: the engine's seed.
        ks, gain, empty, monitor: the metric conventions (``metrics.functional``).
    """

    name = "lambdamart"
    # a traversal step is a few gathers: one torch thread scores fastest on busy cores (docs/trees.md);
    # the engines' own threads (OpenMP) are not torch's
    cpu_threads = 1

    def __init__(
        self,
        *,
        n_features: int,
        normalizer: Any = None,
        engine: str = "lightgbm",
        n_estimators: int = 100,
        learning_rate: float | None = None,
        max_leaves: int | None = None,
        max_depth: int | None = None,
        min_leaf: int | None = None,
        min_hessian: float | None = None,
        subsample: float | None = None,
        feature_rate: float | None = None,
        l2: float | None = None,
        truncation: int | None = None,
        early_stopping_rounds: int | None = 50,
        params: Mapping[str, Any] | None = None,
        seed: int = 0,
        ks: Sequence[int] = (1, 5, 10),
        gain: str = "exp2",
        empty: float = 0.0,
        monitor: str = "val/ndcg@10",
    ) -> None:
        super().__init__(ks=ks, gain=gain, empty=empty, monitor=monitor)
        self.save_hyperparameters(ignore=["normalizer"])  # checkpoints rebuild the learner (load_from_checkpoint)
        options = {
            "learning_rate": learning_rate,
            "max_leaves": max_leaves,
            "max_depth": max_depth,
            "min_leaf": min_leaf,
            "min_hessian": min_hessian,
            "subsample": subsample,
            "feature_rate": feature_rate,
            "l2": l2,
            "truncation": truncation,
        }
        assert set(options) == set(OPTION_NAMES)
        params = dict(params or {})
        check_options(engine, options, params)  # at config time: before any data is read
        if n_estimators < 1:
            raise ValueError(f"model.n_estimators must be >= 1, got {n_estimators}")
        if early_stopping_rounds is not None and early_stopping_rounds < 1:
            raise ValueError(f"model.early_stopping_rounds must be >= 1 or null, got {early_stopping_rounds}")
        if gain not in ("exp2", "linear"):
            raise ValueError(f"model.gain must be exp2 or linear, got {gain!r}")
        self.engine, self.n_features, self.n_estimators = engine, int(n_features), int(n_estimators)
        self.early_stopping_rounds = early_stopping_rounds
        self.params = engine_params(engine, options, params, int(seed))
        self.model: EngineModel | None = None
        self._cache: dict[str, nn.Module] = {}

    # -- state: the engine's own model text (nn.Module extra state) ------------------------------
    def get_extra_state(self) -> Tensor:
        """The engine's model and rounds as JSON bytes in a uint8 tensor ``[B]`` (a tensor, so that
        whatever walks ``state_dict()`` values meets tensors only; empty before a fit)."""
        if self.model is None:
            return torch.zeros(0, dtype=torch.uint8)
        m = self.model
        state = {"engine": m.engine, "text": m.text, "rounds": m.rounds, "trained": m.trained_rounds}
        text = json.dumps({**state, "history": m.history})
        return torch.frombuffer(bytearray(text.encode()), dtype=torch.uint8).clone()

    def set_extra_state(self, state: Tensor) -> None:
        self._cache.clear()
        if state.numel() == 0:
            self.model = None
            return
        record = json.loads(bytes(state.cpu().numpy().tobytes()).decode())
        if record["engine"] != self.engine:
            raise ValueError(f"a checkpoint of model.engine={record['engine']}, this run is engine={self.engine}")
        self.model = EngineModel(
            record["engine"], record["text"], record["rounds"], record["trained"], record["history"]
        )

    # -- fit --------------------------------------------------------------------------------------
    def fit(self, train: QuerySplit, val: QuerySplit | None, *, log: FitLog) -> None:
        """Boost on ``train`` (continuing a resumed model's rounds); with ``val``, keep the best round."""
        if self.model is not None and self.model.trained_rounds >= self.n_estimators:
            return  # resumed from a finished fit
        if train.n_queries == 0:
            raise ValueError("model=lambdamart needs training queries: none were given")

        def on_round(round_: int, value: float | None) -> bool:
            if value is not None:
                log.scalar(self.monitor, value, round_)
            log.scalar("train/rounds", float(round_), round_)
            return log.should_stop()

        self.model = fit_engine(
            self.engine,
            dict(self.params),
            _split(train),
            _split(val) if val is not None and val.n_queries else None,
            rounds=self.n_estimators,
            early_stopping_rounds=self.early_stopping_rounds,
            k=10,
            gain=self.gain,
            empty=self.empty,
            on_round=on_round,
            init_model=self.model.text if self.model is not None else None,
        )
        self._cache.clear()

    # -- scoring and export -----------------------------------------------------------------------
    def scorer(self) -> nn.Module:
        """The kept rounds' trees as one ``TreeEnsembleScorer``: raw ``[..., F]`` -> ``[...]`` (CPU)."""
        if self.model is None:
            raise RuntimeError("model=lambdamart is not fitted yet")
        if "scorer" not in self._cache:
            build = lightgbm_scorer if self.engine == "lightgbm" else xgboost_scorer
            self._cache["scorer"] = build(self.model.text, self.model.rounds, self.n_features).eval()
        return self._cache["scorer"]

    def device_policy(self, available: torch.device) -> torch.device:
        """The engines boost on the CPU (their CUDA builds are not what is installed)."""
        return torch.device("cpu")

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        scorer = self.scorer()
        with torch.no_grad():
            return scorer(features.detach().float().cpu()).to(features.device)

    def engine_predict(self, features: np.ndarray) -> np.ndarray:
        """The engine's own ``predict`` ``[N]`` of the kept rounds (the reference the export matches)."""
        if self.model is None:
            raise RuntimeError("model=lambdamart is not fitted yet")
        if self.engine == "lightgbm":
            import lightgbm as lgb

            return lgb.Booster(model_str=self.model.text).predict(features, num_iteration=self.model.rounds)
        import xgboost as xgb

        booster = xgb.Booster()
        booster.load_model(bytearray(self.model.text.encode()))
        matrix = xgb.DMatrix(features)
        return booster.predict(matrix, iteration_range=(0, self.model.rounds), output_margin=True)

    def export_meta(self) -> dict:
        m = self.model
        return {
            "engine": self.engine,
            "trees": m.rounds if m is not None else 0,
            "nan": "each split sends NaN (and, for LightGBM's zero-as-missing splits, zero) where the engine's "
            "predict does; +inf right, -inf left",
        }

    def fit_results(self) -> dict:
        if self.model is None:
            return {}
        m = self.model
        best = max(m.history) if m.history else None
        return {
            "engine": self.engine,
            "rounds_kept": m.rounds,
            "rounds_trained": m.trained_rounds,
            "best_val_ndcg@10": best,
            "engine_params": {k: v for k, v in self.params.items() if k != "label_gain"},
        }
