"""QuantileThresholds against numpy's quantiles and a per-feature loop written here."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
import torch

from datamodules.feature_maps import QuantileCDF, QuantileThresholds


def _reference_thresholds(features: np.ndarray, bins: int) -> list[np.ndarray]:
    """Per feature: the distinct inner quantiles above the feature's minimum (numpy, float64)."""
    levels = np.arange(1, bins) / bins
    kept = []
    for column in features.T.astype(np.float64):
        cuts = np.unique(np.quantile(column, levels))
        kept.append(cuts[cuts > column.min()])
    return kept


def _data(seed: int = 0) -> torch.Tensor:
    generator = np.random.default_rng(seed)
    return torch.from_numpy(
        np.stack(
            [
                generator.normal(size=200),  # continuous
                generator.integers(0, 3, 200),  # three levels: most quantiles repeat
                np.zeros(200),  # constant: no threshold at all
                np.r_[np.zeros(190), generator.exponential(size=10)],  # mostly zero, heavy tail
            ],
            1,
        ).astype(np.float32)
    )


@pytest.mark.parametrize("bins", [2, 5, 32])
def test_thresholds_are_numpys_distinct_quantiles_above_the_minimum(bins):
    features = _data()
    thresholds = QuantileThresholds(4, bins=bins).fit(features).thresholds
    assert thresholds.shape == (4, bins - 1)
    for found, expected in zip(thresholds, _reference_thresholds(features.numpy(), bins), strict=True):
        finite = found[torch.isfinite(found)].numpy()
        np.testing.assert_allclose(np.sort(finite), expected.astype(np.float32), rtol=1e-6)


def test_forward_is_the_features_then_the_scaled_indicators():
    features = _data(1)
    mapper = QuantileThresholds(4, bins=8, scale=0.5).fit(features)
    queries = features[:30].reshape(3, 10, 4)
    mapped = mapper(queries)
    assert mapped.shape == (3, 10, 4 * 8)
    torch.testing.assert_close(mapped[..., :4], queries)
    thresholds = mapper.thresholds.numpy()
    for b in range(3):
        for i in range(10):
            expected = [0.5 * float(queries[b, i, f] >= t) for f in range(4) for t in thresholds[f]]
            np.testing.assert_array_equal(mapped[b, i, 4:].numpy(), np.array(expected, dtype=np.float32))
    # an indicator column that is constant on the training documents (+inf) is always 0
    assert (mapper(features)[:, 4:].std(0)[~torch.isfinite(mapper.thresholds.flatten())] == 0).all()


def test_unfitted_map_adds_zero_columns_and_bad_arguments_are_refused():
    mapper = QuantileThresholds(3, bins=4)
    assert not mapper.fitted
    torch.testing.assert_close(mapper(torch.ones(5, 3))[:, 3:], torch.zeros(5, 9))
    with pytest.raises(ValueError, match="bins"):
        QuantileThresholds(3, bins=1)
    with pytest.raises(ValueError, match="scale"):
        QuantileThresholds(3, scale=0.0)
    with pytest.raises(ValueError, match=r"features \[N, 3\]"):
        mapper.fit(torch.ones(5, 4))
    with pytest.raises(ValueError, match="no training documents"):
        mapper.fit(torch.ones(0, 3))


def test_map_exports_to_torchscript_and_onnx(tmp_path):
    mapper = QuantileThresholds(4, bins=6).fit(_data(2)).eval()
    features = _data(3)[:17]
    scripted = torch.jit.script(mapper)
    torch.testing.assert_close(scripted(features), mapper(features))
    path = tmp_path / "map.onnx"
    rows = torch.export.Dim("rows", min=1, max=1 << 20)
    torch.onnx.export(mapper, (features,), str(path), input_names=["x"], dynamic_shapes=({0: rows},), dynamo=True)
    (onnx,) = onnxruntime.InferenceSession(str(path)).run(None, {"x": features.numpy()})
    np.testing.assert_array_equal(onnx, mapper(features).numpy())


def test_live_columns_are_the_features_and_the_finite_thresholds():
    features = _data(4)
    mapper = QuantileThresholds(4, bins=8).fit(features)
    live = mapper.live_columns()
    finite = torch.isfinite(mapper.thresholds).flatten().nonzero().squeeze(1) + 4
    torch.testing.assert_close(live, torch.cat([torch.arange(4), finite]))
    dead = torch.ones(mapper.out_features, dtype=torch.bool)
    dead[live] = False
    inputs = torch.randn(2, 50, 4) * 10
    assert dead.any() and (mapper(inputs)[..., dead] == 0).all()
    torch.testing.assert_close(mapper.live_forward(inputs), mapper(inputs)[..., live])


@pytest.mark.parametrize("raw_columns", ["features", "cdf"])
def test_threshold_inputs_standardize_the_live_columns_of_the_normalized_features(raw_columns):
    from datamodules.feature_maps import ThresholdInputs
    from datamodules.normalization import FeatureNormalizer

    raw = _data(5) * 3 + 1
    normalizer = FeatureNormalizer.fit("zscore", raw.numpy())
    inputs = ThresholdInputs.fit(normalizer, normalizer(raw), bins=8, raw_columns=raw_columns)
    mapper = QuantileThresholds(4, bins=8, scale=1.0, raw_columns=raw_columns).fit(normalizer(raw))
    expected = mapper(normalizer(raw))[:, mapper.live_columns()]
    assert inputs.in_features == 4 and inputs.out_features == expected.shape[1] < 4 * 8
    out = inputs(raw)
    varying = expected.std(0) > 0
    torch.testing.assert_close(out.mean(0), torch.zeros(out.shape[1]), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.std(0, unbiased=False)[varying], torch.ones(int(varying.sum())), atol=1e-4, rtol=0)
    spread = expected.std(0, unbiased=False)
    spread = torch.where(spread > 1e-6, spread, torch.ones_like(spread))  # a constant column stays 0
    torch.testing.assert_close(out, (expected - expected.mean(0)) / spread, atol=1e-5, rtol=1e-5)
    padded = torch.full((1, 3, 4), float("nan"))  # padding holds NaN: masked before any statistic
    padded[0, 0] = raw[0]
    mask = torch.tensor([[True, False, False]])
    assert torch.isfinite(inputs(padded, mask)).all()
    torch.testing.assert_close(inputs(padded, mask)[0, 0], out[0])


def test_letor_models_train_on_threshold_inputs_and_export_raw_features_in(make_cfg, tmp_path, data_dir):
    import json

    import onnxruntime

    from datamodules.synthetic import generate_letor
    from rankers.pipeline import train

    files = generate_letor(data_dir / "maps", n_queries={"train": 40, "val": 10, "test": 10}, num_features=6, seed=2)
    split = [f"data.{name}={files[name]}" for name in ("train", "val", "test")]
    quiet = ["model.scorer.hidden=[8]", "trainer.max_epochs=2", "callbacks.progress_bar.refresh_rate=0"]
    out = tmp_path / "run"
    results = train(make_cfg("model=ranknet", "data=letor", *split, *quiet, out=out, tiny=False))
    meta = json.loads((out / "export" / "meta.json").read_text())
    assert meta["n_features"] == 6 and meta["normalization"] == "zscore+thresholds32"
    from datamodules.letor_io import read_letor

    test = read_letor(files["test"])
    scripted = torch.jit.load(str(out / "export" / "scorer.pt"))
    session = onnxruntime.InferenceSession(str(out / "export" / "scorer.onnx"))
    for a, b in zip(test.offsets[:-1], test.offsets[1:], strict=True):
        features = test.features[a:b]
        (onnx,) = session.run(None, {"features": features})
        np.testing.assert_allclose(onnx, scripted(torch.from_numpy(features)).detach().numpy(), rtol=1e-5, atol=1e-5)
    assert results["test"]["ndcg@10"] > results["test_random_scores"]["ndcg@10"]
    plain = train(
        make_cfg("model=ranknet", "data=letor", *split, *quiet, "data.feature_map=none", out=tmp_path / "p", tiny=False)
    )
    assert json.loads((tmp_path / "p" / "export" / "meta.json").read_text())["normalization"] == "zscore"
    assert plain["test"]
    # the CDF raw columns (the perceptrons' default) through a network and its export
    cdf_run = make_cfg(
        "model=ranknet", "data=letor", *split, *quiet, "data.raw_columns=cdf", out=tmp_path / "c", tiny=False
    )
    cdf = train(cdf_run)
    assert (
        json.loads((tmp_path / "c" / "export" / "meta.json").read_text())["normalization"] == "zscore+cdf+thresholds32"
    )
    scripted = torch.jit.load(str(tmp_path / "c" / "export" / "scorer.pt"))
    session = onnxruntime.InferenceSession(str(tmp_path / "c" / "export" / "scorer.onnx"))
    features = test.features[test.offsets[0] : test.offsets[1]] * 50  # far beyond the training range too
    (onnx,) = session.run(None, {"features": features})
    np.testing.assert_allclose(onnx, scripted(torch.from_numpy(features)).detach().numpy(), rtol=1e-5, atol=1e-5)
    assert np.isfinite(onnx).all() and cdf["test"]["ndcg@10"] > cdf["test_random_scores"]["ndcg@10"]


def test_an_unknown_feature_map_is_refused_by_the_letor_datamodule(tmp_path):
    from datamodules.letor import LetorDataModule

    with pytest.raises(ValueError, match="feature_map must be 'none' or 'thresholds', got 'splines'"):
        LetorDataModule(train=str(tmp_path / "train.txt"), feature_map="splines")
    with pytest.raises(ValueError, match="raw_columns must be one of"):
        LetorDataModule(train=str(tmp_path / "train.txt"), feature_map="thresholds", raw_columns="ranks")


@pytest.mark.parametrize("raw_columns", ["features", "cdf"])
def test_threshold_inputs_from_a_fitted_map_are_its_live_forward_after_the_normalizer(raw_columns):
    from datamodules.feature_maps import ThresholdInputs
    from datamodules.normalization import FeatureNormalizer

    raw = _data(6) * 2 - 1
    normalizer = FeatureNormalizer.fit("zscore", raw.numpy())
    mapper = QuantileThresholds(4, bins=8, scale=0.1, raw_columns=raw_columns).fit(normalizer(raw))
    inputs = ThresholdInputs.from_thresholds(normalizer, mapper)
    assert inputs.out_features == len(mapper.live_columns())
    assert ("+cdf" in inputs.kind) == (raw_columns == "cdf")
    torch.testing.assert_close(inputs(raw[None])[0], mapper.live_forward(normalizer(raw)))
    scripted = torch.jit.script(inputs)  # the export's input module, raw features in
    torch.testing.assert_close(scripted(raw[None]), inputs(raw[None]))


def _reference_cdf(column: np.ndarray, value: float, bins: int) -> float:
    """The training CDF of one feature at ``value``, linear between its quantiles at 0, 1/bins, ..., 1,
    written as numpy's interpolation (the quantiles of this test's data are strictly increasing)."""
    knots = np.quantile(column.astype(np.float64), np.arange(bins + 1) / bins)
    assert np.all(np.diff(knots) > 0)
    return float(np.interp(value, knots, np.arange(bins + 1) / bins))


def test_the_cdf_columns_are_numpys_interpolated_quantile_cdf_bounded_outside_the_training_range():
    train = torch.from_numpy(np.random.default_rng(0).normal(size=(300, 2)).astype(np.float32))
    cdf = QuantileCDF(2, bins=16).fit_sorted(train.double().t().sort(-1).values)
    probe = torch.tensor([[-9.0, 9.0], [0.0, -0.3], [0.7, 0.05], [9.0, -9.0]])
    expected = [[_reference_cdf(train[:, f].numpy(), float(v), 16) for f, v in enumerate(row)] for row in probe]
    torch.testing.assert_close(cdf(probe) / 12**0.5, torch.tensor(expected), atol=1e-5, rtol=0)
    assert cdf(probe)[0, 0] == 0 and cdf(probe)[0, 1] == pytest.approx(12**0.5)


def test_a_value_many_documents_share_gets_their_whole_share_and_no_nan():
    column = torch.cat([torch.zeros(80), torch.linspace(1, 2, 20)])[:, None]  # 80% of the documents at 0
    cdf = QuantileCDF(1, bins=10).fit_sorted(column.double().t().sort(-1).values)
    at_zero = float(cdf(torch.zeros(1, 1))) / 12**0.5
    assert 0.8 - 1 / 10 - 1e-6 <= at_zero <= 0.8 + 1e-6  # the 80% at or below 0, to within one segment
    assert float(cdf(torch.full((1, 1), -1e-3))) == 0.0
    constant = QuantileCDF(1, bins=4).fit_sorted(torch.ones(1, 5, dtype=torch.float64))
    assert torch.isfinite(constant(torch.tensor([[0.0], [1.0], [2.0]]))).all()


def test_cdf_columns_barely_move_under_an_increasing_heavy_tailed_map_of_a_feature():
    # the point of them: raw counts, their logs or a heavy-tailed rescaling give nearly the same columns
    def stretch(x: torch.Tensor) -> torch.Tensor:
        return torch.sign(x) * torch.expm1(6 * x.abs())  # increasing, heavy-tailed

    base = _data(7).double()
    probe = base[:40] * 1.1
    for raw_columns, bound in (("cdf", 2 / 8 * 12**0.5), ("features", None)):
        fitted = [QuantileThresholds(4, bins=8, raw_columns=raw_columns).fit(x) for x in (base, stretch(base))]
        moved = (fitted[1](stretch(probe)) - fitted[0](probe))[:, :4].abs().max()
        if bound is None:
            assert moved > 100  # the features as given: a heavy tail moves them without bound
        else:
            assert moved <= bound  # within about a segment's share (two, for values between samples)
            # the indicators (thresholds at quantiles) move only for a value between the two samples a
            # threshold is interpolated from; none of these probes is
            torch.testing.assert_close(fitted[1](stretch(probe))[:, 4:], fitted[0](probe)[:, 4:])


def test_cdf_columns_export_to_onnx_as_the_module_computes_them(tmp_path):
    mapper = QuantileThresholds(4, bins=6, raw_columns="cdf").fit(_data(8)).eval()
    features = _data(9)[:23] * 1.5  # some values beyond the training range
    path = tmp_path / "map.onnx"
    rows = torch.export.Dim("rows", min=1, max=1 << 20)
    torch.onnx.export(mapper, (features,), str(path), input_names=["x"], dynamic_shapes=({0: rows},), dynamo=True)
    (onnx,) = onnxruntime.InferenceSession(str(path)).run(None, {"x": features.numpy()})
    np.testing.assert_allclose(onnx, mapper(features).numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="raw_columns must be one of"):
        QuantileThresholds(4, raw_columns="ranks")


@pytest.mark.parametrize("normalization", ["zscore", "query_zscore"])
def test_the_datamodules_threshold_inputs_are_fitted_on_documents_normalized_as_batches_are(data_dir, normalization):
    from datamodules.feature_maps import ThresholdInputs
    from datamodules.letor import LetorDataModule
    from datamodules.synthetic import generate_letor

    files = generate_letor(data_dir / "fitted", n_queries={"train": 12, "val": 2, "test": 2}, num_features=5, seed=4)
    module = LetorDataModule(
        train=files["train"], normalization=normalization, feature_map="thresholds", bins=6, cache_dir=None
    )
    module.setup()
    inputs = module.build_normalizer()
    train = module.splits["train"]
    features = torch.from_numpy(train.features)
    # a loop over the training queries, each normalized as one batch of one list
    per_query = [inputs.normalizer(features[a:b][None])[0] for a, b in zip(train.offsets[:-1], train.offsets[1:])]
    expected = ThresholdInputs.fit(inputs.normalizer, torch.cat(per_query), bins=6)
    for name in ("feature", "cut", "mean", "std"):
        torch.testing.assert_close(getattr(inputs, name), getattr(expected, name))
