"""results.json says what it evaluated (issue 42, item 3): no ``test`` without a test file, and the
ratings protocols name their streams truthfully (the training stream is neither ``val`` nor ``test``)."""

from __future__ import annotations

import json

from datamodules.synthetic import generate_letor
from rankers.pipeline import train
from tests.ratings_files import ratings_file

METRIC_KEYS = {"ndcg@1", "ndcg@5", "ndcg@10", "map", "mrr"}


def _training_file_only(make_cfg, data_dir, tmp_path, *options):
    files = generate_letor(data_dir / "letor41", n_queries={"train": 40, "val": 5, "test": 5}, num_features=6, seed=5)
    common = ["data=letor", f"data.train={files['train']}", "model.scorer.hidden=[8]", "trainer.max_epochs=2"]
    out = tmp_path / "run"
    results = train(make_cfg(*common, "callbacks.progress_bar.refresh_rate=0", *options, out=out, tiny=False))
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(results))
    return results, files


def test_a_training_file_alone_reports_validation_as_val_never_as_test(make_cfg, data_dir, tmp_path):
    results, files = _training_file_only(make_cfg, data_dir, tmp_path, "data.val_fraction=0.25")
    assert "test" not in results and "test_random_scores" not in results
    assert set(results["val"]) == METRIC_KEYS
    assert results["evaluated"] == {"val": f"0.25 of the training queries of {files['train']}, held out"}


def test_a_training_file_without_validation_reports_the_training_figures_as_train(make_cfg, data_dir, tmp_path):
    results, _ = _training_file_only(make_cfg, data_dir, tmp_path, "data.val_fraction=0")
    assert "test" not in results and not results["val"]
    assert results["evaluated"] == {"train": "the training data as trained on (no validation or test split)"}
    assert "loss_epoch" in results["train"]


def _ratings_run(make_cfg, tmp_path, data: str, *options):
    cfg = make_cfg(
        "model=prank",
        f"data={data}",
        f"data.path={ratings_file(tmp_path, seed=6)}",
        "callbacks.progress_bar.refresh_rate=0",
        "export=false",
        *options,
        out=tmp_path / data,
        tiny=False,
    )
    return train(cfg)


def test_the_crammer_singer_stream_is_reported_as_the_training_stream(make_cfg, tmp_path):
    results = _ratings_run(make_cfg, tmp_path, "ratings_crammer_singer", "data.min_ratings=160", "data.n_rounds=150")
    assert "test" not in results and not results["val"] and set(results["data"]) >= {"train"}
    assert "val" not in results["data"] and "test" not in results["data"]
    assert 0 < results["train"]["online_rank_loss"] < 4  # each prediction made before its update
    assert set(results["evaluated"]) == {"train"}


def test_the_harrington_protocol_tests_on_its_test_items_and_validates_nothing(make_cfg, tmp_path):
    results = _ratings_run(make_cfg, tmp_path, "ratings_harrington")
    assert set(results["data"]) >= {"train", "test"} and "val" not in results["data"]
    assert not results["val"] and results["data"]["test"]["examples"] == 90 and results["test"]["rank_loss"] > 0
    assert results["evaluated"] == {"test": "the test split"}
