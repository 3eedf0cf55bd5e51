"""QuantileThresholds against numpy's quantiles and a per-feature loop written here."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
import torch

from rankers.feature_maps import QuantileThresholds


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
    assert dead.any() and (mapper(torch.randn(50, 4) * 10)[:, dead] == 0).all()
