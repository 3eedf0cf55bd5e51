"""The label rankers through train.py's pipeline: results.json, TensorBoard, exports that reproduce the scores."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
from hydra.core.global_hydra import GlobalHydra

from datamodules.errors import DataError
from datamodules.multilabel_io import write_top_label
from rankers.label_ranking.predict import main as predict_main
from rankers.pipeline import compose_config, train

FAST = ["~callbacks.progress_bar", "+trainer.enable_progress_bar=false", "trainer.log_every_n_steps=1"]
TINY = ["data=label_ranking_synthetic", "data.n_train=300", "data.n_test=200", "data.noise=0.3", *FAST]


def run(tmp_path: Path, *overrides: str) -> dict:
    cfg = compose_config([*overrides], output_dir=tmp_path / "out")
    try:
        return train(cfg)
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.parametrize(
    ("model", "options"),
    [
        ("calibrated_label_ranking", ["model.epochs=2", "model.n_runs=3", "export=false"]),
        (
            "calibrated_label_ranking_mlp",
            ["model.epochs=8", "model.hidden=[16]", "model.lr=0.02", "export=false", "data.val_fraction=0.2"],
        ),
        ("binary_relevance", ["export=false"]),
    ],
)
def test_a_model_trains_tests_and_writes_results(tmp_path, model, options):
    results = run(tmp_path, f"model={model}", *TINY, *options)
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    expected = {"ranking_loss", "hamming_loss", "coverage", "average_precision", "one_error", "kendall_tau", "footrule"}
    assert set(saved["test"]) == expected and saved["test"] == results["test"]
    # a planted linear model with little noise: far better than chance on every measure
    assert saved["test"]["ranking_loss"] < 0.15 and saved["test"]["kendall_tau"] < 0.2
    assert list((tmp_path / "out" / "tensorboard").rglob("events.out.tfevents.*"))
    # with a validation split, the monitored val/ranking_loss chooses the checkpoint
    assert ("ranking_loss" in saved["val"]) == ("data.val_fraction=0.2" in options)


def test_the_exports_reproduce_the_scores_and_predict_reads_them(tmp_path, capsys):
    results = run(tmp_path, "model=calibrated_label_ranking", *TINY, "model.epochs=1", "data.scaling=zscore")
    export = tmp_path / "out" / "export"
    meta = json.loads((export / "meta.json").read_text())
    assert meta["scaling"] == "zscore" and meta["labels"] == [str(i) for i in range(6)]
    x = np.random.default_rng(0).normal(3.0, 2.0, (17, 10)).astype(np.float32)  # raw, unscaled features
    ts = torch.jit.load(str(export / "scorer.pt"))(torch.from_numpy(x)).detach().numpy()
    session = onnxruntime.InferenceSession(str(export / "scorer.onnx"), providers=["CPUExecutionProvider"])
    onnx = session.run(None, {"features": x})[0]
    np.testing.assert_allclose(onnx, ts, rtol=1e-5, atol=1e-5)
    # the export's scores on the test split give results.json's metrics
    from datamodules.multilabel import SyntheticLabelRankingDataModule

    module = SyntheticLabelRankingDataModule(n_train=300, n_test=200, noise=0.3)
    module.setup()
    tx, ty = module.arrays("test")
    write_top_label(tmp_path / "test.rank", tx, ty)
    predict_main(["--scorer", str(export / "scorer.pt"), "--input", str(tmp_path / "test.rank"),
                  "--output", str(tmp_path / "p.tsv")])  # fmt: skip
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for name, value in printed.items():
        assert value == pytest.approx(results["test"][name], abs=1e-4)
    assert len((tmp_path / "p.tsv").read_text().splitlines()) == 200


def test_a_bad_file_is_a_data_error_naming_file_and_line(tmp_path):
    bad = tmp_path / "bad.arff"
    bad.write_text("@relation r\n@attribute x numeric\n@attribute L {0,1}\n@data\n1,0\n2,7\n")
    with pytest.raises(DataError, match=r"bad.arff:6: "):
        run(tmp_path, "model=calibrated_label_ranking", "data=multilabel", f"data.train={bad}", "data.n_labels=1")


def _multilabel_files(tmp_path: Path) -> list[str]:
    """A planted multilabel problem in SVMlight multilabel files (train, test)."""
    from sklearn.datasets import dump_svmlight_file, make_multilabel_classification

    x, y = make_multilabel_classification(n_samples=500, n_features=12, n_classes=5, random_state=3)
    for name, rows in (("train.svm", slice(0, 350)), ("test.svm", slice(350, None))):
        dump_svmlight_file(x[rows], y[rows], str(tmp_path / name), multilabel=True, zero_based=False)
    return ["data=multilabel", f"data.train={tmp_path / 'train.svm'}", f"data.test={tmp_path / 'test.svm'}"]


def test_share_zero_is_binary_relevance_and_cv_reports_its_choice(tmp_path):
    data = _multilabel_files(tmp_path)
    # binary relevance converged tightly: the blend's logistic part solves scikit-learn's problem to 1e-8
    relevance = run(tmp_path / "br", "model=binary_relevance", "model.tol=1e-10", *data, *FAST, "export=false")
    blended = run(
        tmp_path / "zero", "model=calibrated_label_ranking", "model.share=0", "model.C=1", *data, *FAST, "export=false"
    )
    # share 0: the logistic part rescaled by a positive number -- the same ranking and the same cut
    for name in ("ranking_loss", "hamming_loss", "coverage", "average_precision", "one_error"):
        assert blended["test"][name] == pytest.approx(relevance["test"][name], abs=1e-6)
    chosen = run(tmp_path / "cv", "model=calibrated_label_ranking", *data, *FAST, "model.epochs=2", "export=false")
    blend = json.loads((tmp_path / "cv" / "out" / "results.json").read_text())["blend"]
    assert len(blend["cv"]) == 5 * 7 and f"{blend['C']:g}/{blend['share']:g}" in blend["cv"]
    assert chosen["test"]["ranking_loss"] < 0.5 * relevance["test"]["ranking_loss"] + 0.5  # trained, not chance


def test_a_share_outside_zero_to_one_is_refused():
    from rankers.label_ranking.module import CalibratedLabelRanker

    with pytest.raises(ValueError, match=r"model\.share must be 'cv' or in"):
        CalibratedLabelRanker(n_features=3, n_labels=2, share=1.5)
    with pytest.raises(ValueError, match=r"model\.C must be 'cv' or > 0"):
        CalibratedLabelRanker(n_features=3, n_labels=2, C=0)


def test_the_blend_state_survives_a_checkpoint_loaded_with_weights_only():
    import io

    from rankers.label_ranking.module import CalibratedLabelRanker

    module = CalibratedLabelRanker(n_features=3, n_labels=2)
    module.logistic, module.chosen_share, module.chosen_C = (np.ones((2, 3)), np.zeros(2)), 0.3, 3.0
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)  # the harness's checkpoints hold the state_dict
    buffer.seek(0)
    restored = CalibratedLabelRanker(n_features=3, n_labels=2)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert (restored.chosen_share, restored.chosen_C) == (0.3, 3.0)
    np.testing.assert_array_equal(restored.logistic[0], module.logistic[0])
