"""LambdaMART's engines and their tensorized trees: the exported scorer equals the engine's own predict
(NaN, zero-as-missing, infinities), LightGBM's defaults are LGBMRanker's, fractional grades train."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rankers.lambdamart.engines import (
    ENGINES,
    Split,
    check_options,
    engine_params,
    fit_engine,
    lightgbm_scorer,
    query_ndcg,
    xgboost_scorer,
)
from rankers.trees.ensemble import NAN_LEFT, NAN_RIGHT, NAN_ZERO, ZERO_LEFT, ZERO_RIGHT

lgb = pytest.importorskip("lightgbm")
xgb = pytest.importorskip("xgboost")


def _data(seed: int, n: int = 1500, f: int = 6, *, nan: float = 0.1, zero: float = 0.2) -> Split:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, f)).astype(np.float32)
    x[:, :2] = np.round(x[:, :2], 1)  # ties: thresholds between repeated values
    y = np.clip(np.round(x[:, 2] + x[:, 3] + rng.normal(size=n)), 0, 4)
    x[rng.random(x.shape) < nan] = np.nan
    x[rng.random(x.shape) < zero] = 0.0
    return Split(x, y, np.arange(0, n + 1, 25))


def _fit(engine: str, train: Split, params: dict | None = None, val: Split | None = None, rounds: int = 20, **kw):
    return fit_engine(
        engine,
        engine_params(engine, {}, params or {}, 0),
        train,
        val,
        rounds=rounds,
        early_stopping_rounds=kw.pop("patience", None),
        k=10,
        gain="exp2",
        empty=0.0,
        on_round=kw.pop("on_round", lambda r, v: False),
    )


def _engine_predict(model, x: np.ndarray) -> np.ndarray:
    if model.engine == "lightgbm":
        return lgb.Booster(model_str=model.text).predict(x, num_iteration=model.rounds)
    booster = xgb.Booster()
    booster.load_model(bytearray(model.text.encode()))
    return booster.predict(xgb.DMatrix(x), iteration_range=(0, model.rounds), output_margin=True)


def _test_features(engine: str, seed: int = 9) -> np.ndarray:
    x = _data(seed, 800).features
    x[:3, 0] = 0.05  # exactly at a rounded value: the <= / < boundary
    x[3:6, 1] = 1e-38  # LightGBM counts |x| <= 1e-35 as zero
    if engine == "lightgbm":  # XGBoost's predict refuses infinities
        x[6:9, 2], x[9:12, 3] = np.inf, -np.inf
    return x


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", ["nan", "no_nan_in_training", "zero_as_missing"])
def test_tensorized_trees_equal_the_engines_predict(engine: str, case: str) -> None:
    train = _data(0, nan=0.0 if case == "no_nan_in_training" else 0.1)
    params = {"zero_as_missing": True} if case == "zero_as_missing" and engine == "lightgbm" else {}
    model = _fit(engine, train, params)
    build = lightgbm_scorer if engine == "lightgbm" else xgboost_scorer
    scorer = build(model.text, model.rounds, train.features.shape[1])
    x = _test_features(engine)
    got = scorer(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, _engine_predict(model, x), rtol=0, atol=1e-5)
    assert np.isfinite(got).all()
    expected_routes = {
        ("lightgbm", "nan"): {NAN_LEFT, NAN_RIGHT, NAN_ZERO},
        ("lightgbm", "no_nan_in_training"): {NAN_ZERO},
        ("lightgbm", "zero_as_missing"): {ZERO_LEFT, ZERO_RIGHT},
    }.get((engine, case))
    if expected_routes is not None:  # the case exercised the route it is named for
        assert set(scorer.routes) & expected_routes
    if engine == "lightgbm" and case == "no_nan_in_training":
        assert scorer.routes == [NAN_ZERO]  # NaN read as 0, as LightGBM's missing_type=None does


@pytest.mark.parametrize("engine", ENGINES)
def test_torchscript_and_onnx_export_score_as_the_engine(engine: str, tmp_path) -> None:
    from datamodules.normalization import FeatureNormalizer
    from rankers.export import export_scorer

    ort = pytest.importorskip("onnxruntime")
    train = _data(1)
    model = _fit(engine, train, rounds=8)
    build = lightgbm_scorer if engine == "lightgbm" else xgboost_scorer
    scorer = build(model.text, model.rounds, train.features.shape[1])
    paths = export_scorer(FeatureNormalizer("none", num_features=6), scorer, tmp_path, 6)
    x = _test_features(engine)
    expected = _engine_predict(model, x)
    scripted = torch.jit.load(paths["torchscript"])(torch.from_numpy(x)).numpy()
    session = ort.InferenceSession(paths["onnx"])
    onnx = session.run(None, {"features": x})[0]
    np.testing.assert_allclose(scripted, expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(onnx, expected, rtol=0, atol=1e-5)


def test_lightgbm_defaults_are_lgbmrankers() -> None:
    """model=lambdamart's LightGBM parameters at their defaults train LGBMRanker(objective=lambdarank)."""
    train = _data(2, nan=0.0, zero=0.0)
    ours = _fit("lightgbm", train, rounds=100)
    ranker = lgb.LGBMRanker(objective="lambdarank", random_state=0, verbose=-1)
    ranker.fit(train.features, train.labels, group=train.sizes)
    x = _data(3, nan=0.0, zero=0.0).features
    np.testing.assert_allclose(_engine_predict(ours, x), ranker.predict(x), rtol=0, atol=1e-9)


def test_fractional_grades_train_with_the_gain_of_the_grade() -> None:
    """The engines refuse fractional labels; ours become distinct-value codes with gain 2^grade - 1."""
    train = _data(4, nan=0.0)
    train.labels = train.labels * 0.75  # grades in {0, .75, 1.5, 2.25, 3}
    with pytest.raises(lgb.basic.LightGBMError):
        lgb.LGBMRanker(objective="lambdarank", n_estimators=2, verbose=-1).fit(
            train.features, train.labels, group=train.sizes
        )
    for engine in ENGINES:
        model = _fit(engine, train, rounds=30)
        scores = _engine_predict(model, train.features)
        assert query_ndcg(scores, train) > query_ndcg(np.zeros_like(scores), train) + 0.1


def test_early_stopping_keeps_the_best_round_of_our_ndcg_and_the_callback_stops() -> None:
    train, val = _data(5), _data(6, 500)
    for engine in ENGINES:
        model = _fit(engine, train, val=val, rounds=60, patience=5)
        assert model.history, engine
        assert model.rounds == 1 + int(np.argmax(model.history))
        assert model.trained_rounds <= model.rounds + 5
        # the history is our metric: the kept round's val ndcg@10 recomputed from the engine's predict
        recomputed = query_ndcg(_engine_predict(model, val.features), val)
        assert recomputed == pytest.approx(max(model.history), abs=1e-6)
        seen = []
        stopped = _fit(engine, train, rounds=50, on_round=lambda r, v: seen.append(r) or r >= 7)
        assert stopped.trained_rounds == 7 and seen == list(range(1, 8)), engine


def test_unsupported_options_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"model.min_leaf=5 has no equivalent in xgboost"):
        check_options("xgboost", {"min_leaf": 5}, {})
    with pytest.raises(ValueError, match=r"model.params.linear_tree"):
        check_options("lightgbm", {}, {"linear_tree": True})
    with pytest.raises(ValueError, match=r"model.params.num_leaf: set model.max_leaves"):
        check_options("lightgbm", {}, {"num_leaf": 7})
    with pytest.raises(ValueError, match=r"model.params.num_leavs is not a LightGBM parameter"):
        check_options("lightgbm", {}, {"num_leavs": 7})
    with pytest.raises(ValueError, match=r"model.params.booster"):
        check_options("xgboost", {}, {"booster": "gblinear"})
    with pytest.raises(ValueError, match=r"model.engine must be one of"):
        check_options("catboost", {}, {})
