"""The exported scorers reproduce the framework's scores on every input, in both formats."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
import torch

from datamodules.normalization import KINDS, FeatureNormalizer
from rankers.export import export_scorer
from rankers.scorers import MLPScorer

N_FEATURES = 5


def hostile_queries() -> dict[str, torch.Tensor]:
    """One query's raw features ``[L, F]`` per case that once broke an export."""
    generator = torch.Generator().manual_seed(0)
    ordinary = torch.randn(7, N_FEATURES, generator=generator) * 3 + 1
    constant_column = ordinary.clone()
    constant_column[:, 2] = 4.0
    return {
        "one document": torch.ones(1, N_FEATURES),
        "one random document": torch.randn(1, N_FEATURES, generator=generator),
        "all columns constant": torch.full((3, N_FEATURES), -2.5),
        "one constant column": constant_column,
        "tiny spread": 1.0 + 1e-7 * torch.randn(4, N_FEATURES, generator=generator),
        "large values": ordinary * 1e6,
        "ordinary": ordinary,
    }


def fitted_normalizer(kind: str) -> FeatureNormalizer:
    training = np.random.default_rng(1).normal(2.0, 3.0, size=(50, N_FEATURES)).astype(np.float32)
    training[:, 3] = 1.0  # a constant training feature: zscore's std falls back to 1
    return FeatureNormalizer.fit(kind, training)


@pytest.fixture(scope="module", params=KINDS)
def exported(request, tmp_path_factory):
    torch.manual_seed(0)
    normalizer, scorer = fitted_normalizer(request.param), MLPScorer(N_FEATURES, [8], norm="layer").eval()
    out = tmp_path_factory.mktemp(f"export-{request.param}")
    export_scorer(normalizer, scorer, out, N_FEATURES)
    scripted = torch.jit.load(str(out / "scorer.pt"))
    session = onnxruntime.InferenceSession(str(out / "scorer.onnx"))
    return normalizer, scorer, scripted, session


@pytest.mark.parametrize("case", list(hostile_queries()))
def test_torchscript_and_onnx_match_the_framework(exported, case):
    normalizer, scorer, scripted, session = exported
    raw = hostile_queries()[case]
    with torch.no_grad():
        framework = scorer(normalizer(raw[None], torch.ones(1, len(raw), dtype=torch.bool)))[0]
        from_script = scripted(raw)
    from_onnx = torch.from_numpy(session.run(None, {"features": raw.numpy()})[0])
    assert torch.isfinite(framework).all()
    torch.testing.assert_close(from_script, framework, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(from_onnx, framework, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fill", [float("nan"), float("inf"), -float("inf"), 1e30])
def test_padding_never_reaches_the_normalized_documents(kind, fill):
    normalizer = fitted_normalizer(kind)
    features = torch.randn(2, 4, N_FEATURES)
    mask = torch.tensor([[True, True, False, False], [True, True, True, False]])
    clean = normalizer(features, mask)
    poisoned = normalizer(features.masked_fill(~mask[..., None], fill), mask)
    torch.testing.assert_close(poisoned[mask], clean[mask])
    assert torch.isfinite(poisoned[mask]).all()
