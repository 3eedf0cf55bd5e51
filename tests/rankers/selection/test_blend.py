"""model=auto's blend: the combinations against slow references, one TorchScript and one ONNX file that
agree, and a run that blends tied candidates and says why."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy.stats import rankdata

from datamodules.normalization import FeatureNormalizer
from rankers.export import export_scorer
from rankers.selection.blend import METHODS, BlendScorer, blend_onnx, combine


def test_combinations_equal_slow_references_and_ignore_scale():
    g = torch.Generator().manual_seed(0)
    stacked = torch.randn(3, 11, generator=g)
    stacked[1, :4] = 0.25  # ties share their mid-rank
    z = [(row - row.mean()) / row.std(unbiased=False) for row in stacked]
    torch.testing.assert_close(combine(stacked, "zscore"), torch.stack(z).mean(0))
    ranks = np.mean([(rankdata(row.numpy()) - 1) / 10 for row in stacked], axis=0)
    np.testing.assert_allclose(combine(stacked, "rank").numpy(), ranks, rtol=0, atol=1e-6)
    scaled = stacked * torch.tensor([[10.0], [0.01], [3.0]]) + 5.0  # a member's scale or offset changes nothing
    for method in METHODS:
        torch.testing.assert_close(combine(scaled, method), combine(stacked, method), rtol=0, atol=1e-4)
        single = combine(torch.full((2, 1), 3.0), method)  # one document, constant lists: finite
        assert torch.isfinite(single).all() and torch.isfinite(combine(torch.ones(2, 5), method)).all()


class _Linear(torch.nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.layer = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x).squeeze(-1)


@pytest.mark.parametrize("method", METHODS)
def test_the_blend_is_one_torchscript_and_one_onnx_file_that_agree(method: str, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    none = FeatureNormalizer("none", num_features=4)
    exports = [export_scorer(none, _Linear(i), tmp_path / f"m{i}", 4) for i in range(2)]
    members = [torch.jit.load(paths["torchscript"]) for paths in exports]
    scripted = torch.jit.script(BlendScorer(members, method).eval())
    blend_onnx([paths["onnx"] for paths in exports], method, tmp_path / "blend.onnx")
    session = ort.InferenceSession(str(tmp_path / "blend.onnx"))
    for length in (1, 7, 30):  # the list length stays dynamic
        x = torch.randn(length, 4)
        expected = combine(torch.stack([m(x) for m in members]).detach(), method)
        torch.testing.assert_close(scripted(x).detach(), expected)
        np.testing.assert_allclose(session.run(None, {"features": x.numpy()})[0], expected.numpy(), atol=1e-5)


@pytest.mark.slow  # two LambdaMART candidates x 3 folds, two refits, the blend's exports: about 15 s idle
def test_auto_blends_candidates_the_cv_cannot_tell_apart(make_cfg, tmp_path):
    pytest.importorskip("lightgbm")
    from datamodules.letor_io import read_letor
    from datamodules.synthetic import generate_letor
    from rankers.score import score_file
    from rankers.selection.run import train_auto

    files = generate_letor(tmp_path / "data", n_queries={"train": 40, "val": 2, "test": 10}, num_features=5)
    candidates = '[lambdamart,"lambdamart model.learning_rate=0.099"]'  # all but the same model: tied
    cfg = make_cfg(
        "model=auto",
        "data=letor",
        f"data.train={files['train']}",
        f"data.test={files['test']}",
        f"model.candidates={candidates}",
        "model.folds=3",
        "bound.enabled=false",
        out=tmp_path / "auto",
        tiny=False,
    )
    results = train_auto(cfg)
    blend = results["selection"]["blend"]
    written = json.loads((tmp_path / "auto" / "results.json").read_text())
    if blend["method"] == "single":  # the CV may find a blend no better: it must then say so
        assert "neither blend beat" in blend["why"] and written["selection"]["chosen"] in blend["tied_with_best"]
        return
    assert len(blend["members"]) == 2 and "within one standard error" in blend["why"]
    assert written["selection"]["chosen"].startswith(f"blend ({blend['method']})")
    test = read_letor(files["test"])
    runs = {
        kind: score_file(tmp_path / "auto" / "export" / f"scorer.{kind}", files["test"])[0] for kind in ("pt", "onnx")
    }
    np.testing.assert_allclose(runs["pt"], runs["onnx"], atol=1e-5)
    assert len(runs["pt"]) == len(test.labels) and np.isfinite(runs["pt"]).all()
