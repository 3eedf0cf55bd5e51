"""LambdaMART's two engines: LightGBM's ``lambdarank`` and XGBoost's ``rank:ndcg``, and their trees read
into ``rankers.trees.ensemble`` (the tensorized scorer that is exported).

Pure functions on numpy arrays: the learner (``rankers.lambdamart.learner``) feeds them whole splits.
What we add to the engines: early stopping on *our* ``ndcg@10`` (``metrics.functional.ndcg`` with the
run's gain and empty-query conventions; the engines' own use ``empty=1``), a per-round callback (logs,
the budget's stop), fractional grades (the exp2 gain of the actual grade; the engines refuse them), and
the exact export.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from metrics.functional import ndcg
from rankers.trees.ensemble import (
    NAN_LEFT,
    NAN_RIGHT,
    NAN_ZERO,
    ZERO_LEFT,
    ZERO_RIGHT,
    RawTree,
    TreeEnsembleScorer,
    float32_at_most,
    float32_below,
    pack,
)

__all__ = [
    "ENGINES",
    "EngineModel",
    "Split",
    "check_options",
    "engine_params",
    "fit_engine",
    "lightgbm_scorer",
    "query_ndcg",
    "xgboost_scorer",
]

ENGINES = ("lightgbm", "xgboost")

# our option -> the engine's parameter; None: the engine has no such option (refused when set)
OPTION_NAMES: dict[str, dict[str, str | None]] = {
    "learning_rate": {"lightgbm": "learning_rate", "xgboost": "eta"},
    "max_leaves": {"lightgbm": "num_leaves", "xgboost": "max_leaves"},
    "max_depth": {"lightgbm": "max_depth", "xgboost": "max_depth"},
    "min_leaf": {"lightgbm": "min_data_in_leaf", "xgboost": None},
    "min_hessian": {"lightgbm": "min_sum_hessian_in_leaf", "xgboost": "min_child_weight"},
    "subsample": {"lightgbm": "bagging_fraction", "xgboost": "subsample"},
    "feature_rate": {"lightgbm": "feature_fraction", "xgboost": "colsample_bytree"},
    "l2": {"lightgbm": "lambda_l2", "xgboost": "lambda"},
    "truncation": {"lightgbm": "lambdarank_truncation_level", "xgboost": None},
}

# engine parameters we set ourselves or that the export cannot represent
_REFUSED: dict[str, dict[str, str]] = {
    "lightgbm": {
        "objective": "LambdaMART is objective=lambdarank",
        "linear_tree": "the exported scorer holds constant leaves only",
        "categorical_feature": "the exported scorer holds numerical (<=) splits only",
        "num_class": "a ranker has one output",
        "num_iterations": "set model.n_estimators",
        "early_stopping_round": "set model.early_stopping_rounds (it watches our val/ndcg@10)",
        "label_gain": "the gain is model.gain (exp2: LightGBM's default label_gain)",
        "metric": "validation uses our val/ndcg@10",
        "init_score": "the boosting starts from zero",
    },
    "xgboost": {
        "objective": "LambdaMART is objective=rank:ndcg",
        "booster": "the exported scorer holds trees (gbtree) only",
        "enable_categorical": "the exported scorer holds numerical (<) splits only",
        "num_parallel_tree": "one tree per round",
        "num_boost_round": "set model.n_estimators",
        "n_estimators": "set model.n_estimators",
        "early_stopping_rounds": "set model.early_stopping_rounds (it watches our val/ndcg@10)",
        "eval_metric": "validation uses our val/ndcg@10",
        "ndcg_exp_gain": "the gain is model.gain",
        "base_score": "the boosting's start is the engine's",
    },
}


def _lightgbm_canonical() -> dict[str, str]:
    """Every LightGBM parameter name and alias -> its canonical name."""
    import lightgbm as lgb

    aliases = lgb.basic._ConfigAliases._get_all_param_aliases()  # {canonical: [aliases]}
    return {alias: name for name, names in aliases.items() for alias in [name, *names]}


def check_options(engine: str, options: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    """Refuse, naming the option, what the engine cannot do: an unknown engine, one of our options the
    engine lacks (``options`` not None), an engine parameter we set ourselves or cannot export."""
    if engine not in ENGINES:
        raise ValueError(f"model.engine must be one of {ENGINES}, got {engine!r}")
    for name, value in options.items():
        if value is not None and OPTION_NAMES[name][engine] is None:
            raise ValueError(f"model.{name}={value} has no equivalent in {engine}: set it to null")
    canonical = _lightgbm_canonical() if engine == "lightgbm" else {}
    for key in params:
        if engine == "lightgbm" and key not in canonical:
            raise ValueError(f"model.params.{key} is not a LightGBM parameter")
        name = canonical.get(key, key)
        if name in _REFUSED[engine]:
            raise ValueError(f"model.params.{key} is refused with engine={engine}: {_REFUSED[engine][name]}")
        ours = [option for option, names in OPTION_NAMES.items() if names[engine] == name]
        if ours:
            raise ValueError(f"model.params.{key}: set model.{ours[0]} instead")
    boosting = {canonical.get(k, k): v for k, v in params.items()}.get("boosting", "gbdt")
    if engine == "lightgbm" and str(boosting) not in ("gbdt", "dart", "goss"):
        raise ValueError("model.params.boosting: gbdt, dart or goss (rf averages trees: not LambdaMART)")


def engine_params(engine: str, options: Mapping[str, Any], params: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The engine's parameter dict: its defaults, our non-null options renamed, ``params`` as given."""
    renamed = {OPTION_NAMES[name][engine]: value for name, value in options.items() if value is not None}
    if engine == "lightgbm":
        base = {"objective": "lambdarank", "verbosity": -1, "seed": seed}
    else:
        base = {"objective": "rank:ndcg", "seed": seed, "verbosity": 0}
    return {**base, **renamed, **dict(params)}


@dataclass
class Split:
    """Flat documents of queries: ``features [N, F]`` float32, ``labels [N]``, ``offsets [Q + 1]``."""

    features: np.ndarray
    labels: np.ndarray
    offsets: np.ndarray

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)


def query_ndcg(scores: np.ndarray, split: Split, *, k: int = 10, gain: str = "exp2", empty: float = 0.0) -> float:
    """Mean over queries of ``metrics.functional.ndcg`` of flat ``scores [N]`` (ties by list position)."""
    sizes = split.sizes
    width, n = int(sizes.max(initial=0)), len(sizes)
    rows = np.repeat(np.arange(n), sizes)
    cols = np.arange(len(scores)) - np.repeat(split.offsets[:-1], sizes)
    padded = np.zeros((2, n, width), np.float32)
    padded[0, rows, cols] = scores
    padded[1, rows, cols] = split.labels
    mask = np.zeros((n, width), bool)
    mask[rows, cols] = True
    scores_, labels = torch.from_numpy(padded[0]), torch.from_numpy(padded[1])
    values = ndcg(scores_, labels, torch.from_numpy(mask), k=k, gain=gain, empty=empty)
    return float(values.mean()) if n else 0.0


def _grades(labels: np.ndarray, gain: str) -> tuple[np.ndarray, list[float] | None]:
    """Labels the engine accepts and, when they had to change, the gain of each new integer label.

    Integer grades are passed as they are (LightGBM's default ``label_gain`` is ``2^i - 1``, our exp2);
    fractional grades become the index of their distinct value, with the gain of the value itself."""
    integer = np.array_equal(labels, np.round(labels)) and labels.min(initial=0) >= 0
    if integer and gain == "exp2":
        return labels.astype(np.float64), None
    values, codes = np.unique(labels, return_inverse=True)
    gains = (np.exp2(values) - 1.0) if gain == "exp2" else values
    return codes.astype(np.float64), [float(g) for g in gains]


RoundCallback = Callable[[int, float | None], bool]  # (round, val ndcg or None) -> stop now?


@dataclass
class EngineModel:
    """A fitted engine's model: its own serialization (``text``) and the rounds kept."""

    engine: str
    text: str
    rounds: int  # trees kept (the best round with early stopping)
    trained_rounds: int
    history: list[float]  # val ndcg per round (empty without validation)


def fit_engine(
    engine: str,
    params: dict[str, Any],
    train: Split,
    val: Split | None,
    *,
    rounds: int,
    early_stopping_rounds: int | None,
    k: int,
    gain: str,
    empty: float,
    on_round: RoundCallback,
    init_model: str | None = None,
) -> EngineModel:
    """Boost ``rounds`` rounds (continuing ``init_model``, the engine's text of an earlier fit, when
    given); with ``val``, keep the round of the best val ndcg@k (ours) and stop after
    ``early_stopping_rounds`` rounds without a gain. ``on_round(round, val_ndcg)`` returning True stops."""
    fit = _fit_lightgbm if engine == "lightgbm" else _fit_xgboost
    return fit(params, train, val, rounds, early_stopping_rounds, (k, gain, empty), on_round, init_model)


class _Stopper:
    """The best round of our val metric and when to stop (patience), shared by both engines."""

    def __init__(self, val: Split | None, patience: int | None, conventions: tuple[int, str, float], on_round) -> None:
        self.val, self.patience, self.conventions, self.on_round = val, patience, conventions, on_round
        self.history: list[float] = []
        self.best_round, self.best = 0, -np.inf

    def after(self, round_: int, val_scores: Callable[[], np.ndarray] | None) -> bool:
        """Round ``round_`` (1-based) done; True: stop."""
        value = None
        if self.val is not None and val_scores is not None:
            k, gain, empty = self.conventions
            value = query_ndcg(val_scores(), self.val, k=k, gain=gain, empty=empty)
            self.history.append(value)
            if value > self.best:
                self.best, self.best_round = value, round_
        stop = bool(self.on_round(round_, value))
        if self.patience and value is not None and round_ - self.best_round >= self.patience:
            stop = True
        return stop


def _fit_lightgbm(params, train, val, rounds, patience, conventions, on_round, init_model) -> EngineModel:
    import lightgbm as lgb

    labels, label_gain = _grades(train.labels, conventions[1])
    params = dict(params)
    if label_gain is not None:
        params["label_gain"] = label_gain
    dataset = lgb.Dataset(train.features, labels, group=train.sizes, params={"verbosity": -1}, free_raw_data=False)
    init = lgb.Booster(model_str=init_model) if init_model else None
    done = init.current_iteration() if init is not None else 0
    stopper = _Stopper(val, patience, conventions, on_round)
    latest: dict[str, np.ndarray] = {}
    extra: dict[str, Any] = {}
    if val is not None:  # LightGBM keeps the val scores up to date round by round: feval stashes them
        val_set = lgb.Dataset(val.features, np.zeros(len(val.labels)), group=val.sizes, reference=dataset)
        params["metric"] = "None"

        def stash(preds: np.ndarray, _: Any) -> tuple[str, float, bool]:
            latest["val"] = preds
            return "stashed", 0.0, True

        extra = {"valid_sets": [val_set], "valid_names": ["val"], "feval": stash}

    def callback(env: lgb.callback.CallbackEnv) -> None:
        if stopper.after(env.iteration + 1, (lambda: latest["val"]) if val else None):
            # LightGBM's own way out of its loop between rounds (a safe point, never mid-tree)
            raise lgb.callback.EarlyStopException(env.iteration, [])

    booster = lgb.train(
        params, dataset, num_boost_round=max(rounds - done, 0), init_model=init, callbacks=[callback], **extra
    )
    trained = booster.current_iteration()
    kept = stopper.best_round if val is not None and stopper.history else trained
    return EngineModel("lightgbm", booster.model_to_string(), kept, trained, stopper.history)


def _fit_xgboost(params, train, val, rounds, patience, conventions, on_round, init_model) -> EngineModel:
    import xgboost as xgb

    labels, label_gain = _grades(train.labels, conventions[1])
    params = dict(params)
    if label_gain is not None:  # linear gain on 2^grade - 1 is the exp2 gain of the grade
        labels = np.asarray(label_gain)[labels.astype(np.int64)]
        params["ndcg_exp_gain"] = False
    qid = np.repeat(np.arange(len(train.sizes)), train.sizes)
    dtrain = xgb.DMatrix(train.features, labels, qid=qid)
    init = None
    if init_model:
        init = xgb.Booster()
        init.load_model(bytearray(init_model.encode()))
    done = init.num_boosted_rounds() if init is not None else 0
    stopper = _Stopper(val, patience, conventions, on_round)
    latest: dict[str, np.ndarray] = {}
    extra: dict[str, Any] = {}
    if val is not None:  # XGBoost caches the val margins round by round: the custom metric stashes them
        dval = xgb.DMatrix(val.features, np.zeros(len(val.labels)), qid=np.repeat(np.arange(len(val.sizes)), val.sizes))
        params["disable_default_eval_metric"] = 1

        def stash(preds: np.ndarray, _: Any) -> tuple[str, float]:
            latest["val"] = preds
            return "stashed", 0.0

        extra = {"evals": [(dval, "val")], "custom_metric": stash}

    class Callback(xgb.callback.TrainingCallback):
        def after_iteration(self, model: xgb.Booster, epoch: int, evals_log: dict) -> bool:
            # True: XGBoost stops between rounds (a safe point)
            return stopper.after(epoch + 1, (lambda: latest["val"]) if val is not None else None)

    booster = xgb.train(
        params,
        dtrain,
        num_boost_round=max(rounds - done, 0),
        xgb_model=init,
        callbacks=[Callback()],
        verbose_eval=False,
        **extra,
    )
    trained = booster.num_boosted_rounds()
    kept = stopper.best_round if val is not None and stopper.history else trained
    text = booster.save_raw("json").decode()
    return EngineModel("xgboost", text, kept, trained, stopper.history)


# -- the engines' trees, tensorized --------------------------------------------------------------
_LIGHTGBM_ROUTES = {("NaN", True): NAN_LEFT, ("NaN", False): NAN_RIGHT, ("Zero", True): ZERO_LEFT}
_LIGHTGBM_ROUTES |= {("Zero", False): ZERO_RIGHT, ("None", True): NAN_ZERO, ("None", False): NAN_ZERO}


def _lightgbm_tree(structure: dict[str, Any]) -> RawTree:
    """One ``dump_model()`` tree (nested dicts) -> ``RawTree`` (preorder ids)."""
    feature, threshold, left, right, value, route = [], [], [], [], [], []

    def visit(node: dict[str, Any]) -> int:
        me = len(feature)
        for column in (feature, threshold, left, right, value, route):
            column.append(0)
        if "leaf_value" in node:
            left[me], right[me], value[me] = -1, -1, float(node["leaf_value"])
            return me
        if node["decision_type"] != "<=":
            raise ValueError(f"a categorical split ({node['decision_type']}): the export holds numerical splits only")
        feature[me], threshold[me] = int(node["split_feature"]), float(node["threshold"])
        route[me] = _LIGHTGBM_ROUTES[(node["missing_type"], bool(node["default_left"]))]
        left[me] = visit(node["left_child"])
        right[me] = visit(node["right_child"])
        return me

    visit(structure)
    return RawTree(
        np.asarray(feature),
        float32_at_most(np.asarray(threshold, np.float64)),  # left is x <= t in float64
        np.asarray(left),
        np.asarray(right),
        np.asarray(value, np.float64),
        np.asarray(route),
    )


def lightgbm_scorer(text: str, rounds: int, n_features: int) -> TreeEnsembleScorer:
    """LightGBM's model (its text) with its first ``rounds`` trees -> the tensorized scorer."""
    import lightgbm as lgb

    dump = lgb.Booster(model_str=text).dump_model(num_iteration=rounds)
    if dump.get("average_output"):
        raise ValueError("an averaged (boosting=rf) LightGBM model is not LambdaMART")
    trees = [_lightgbm_tree(info["tree_structure"]) for info in dump["tree_info"]]
    return TreeEnsembleScorer.from_arrays(pack(trees), n_features, scale=1.0)


def _xgboost_base_score(learner: dict[str, Any]) -> float:
    text = str(learner["learner_model_param"]["base_score"]).strip("[]")
    values = [float(v) for v in text.split(",") if v.strip()]
    if len(values) != 1:
        raise ValueError(f"an XGBoost model with {len(values)} outputs is not a ranker")
    return values[0]


def xgboost_scorer(text: str, rounds: int, n_features: int) -> TreeEnsembleScorer:
    """XGBoost's model (its JSON) with its first ``rounds`` rounds -> the tensorized scorer (base score
    as the bias: ``predict``'s margin is the base score plus the trees)."""
    model = json.loads(text)
    learner = model["learner"]
    booster = learner["gradient_booster"]
    if booster["name"] != "gbtree":
        raise ValueError(f"an XGBoost {booster['name']} model: the export holds gbtree models only")
    indptr = booster["model"]["iteration_indptr"]
    trees = []
    for tree in booster["model"]["trees"][: indptr[rounds]]:
        if any(tree["split_type"]):
            raise ValueError("a categorical split: the export holds numerical splits only")
        left = np.asarray(tree["left_children"])
        conditions = np.asarray(tree["split_conditions"], np.float32)
        internal = left >= 0
        trees.append(
            RawTree(
                np.asarray(tree["split_indices"]),
                np.where(internal, float32_below(conditions), np.inf).astype(np.float32),  # left is x < t
                left,
                np.asarray(tree["right_children"]),
                np.where(internal, 0.0, conditions.astype(np.float64)),
                np.where(np.asarray(tree["default_left"]) > 0, NAN_LEFT, NAN_RIGHT),
            )
        )
    return TreeEnsembleScorer.from_arrays(pack(trees), n_features, scale=1.0, bias=_xgboost_base_score(learner))
