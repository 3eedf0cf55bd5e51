"""End to end: train.py's pipeline on tiny synthetic data, results, export, TensorBoard, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import onnxruntime
import pytest
import pytorch_lightning as pl
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from datamodules.letor_io import read_letor
from rankers.pipeline import EXIT_SIGTERM, train
from tests.conftest import ROOT, cuda_only

METRIC_KEYS = {"ndcg@1", "ndcg@5", "ndcg@10", "map", "mrr"}


def test_run_writes_results_export_and_tensorboard(make_cfg, tmp_path):
    cfg = make_cfg("model=lambdarank", out=tmp_path / "run")
    results = train(cfg)
    out = tmp_path / "run"
    on_disk = json.loads((out / "results.json").read_text())
    assert set(on_disk["test"]) == METRIC_KEYS and set(on_disk["val"]) == METRIC_KEYS
    assert on_disk["fit_seconds"] > 0 and on_disk == json.loads(json.dumps(results))
    # a trained ranker clearly beats random scores on held-out queries
    assert on_disk["test"]["ndcg@10"] > on_disk["test_random_scores"]["ndcg@10"] + 0.1

    tags = set()
    for events in (out / "tensorboard").glob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        tags |= set(accumulator.Tags()["scalars"])
    assert {"train/loss_step", "train/loss_epoch", "val/ndcg@10", "val/ndcg@10_best", "val/map"} <= tags
    assert (out / "tensorboard" / "hparams.yaml").exists()
    assert (out / "report.png").read_bytes().startswith(b"\x89PNG")  # the run at a glance


def test_exported_scorers_match_the_framework(make_cfg, tmp_path):
    cfg = make_cfg("model=ranknet", "data.normalization=zscore", out=tmp_path / "run")
    results = train(cfg)
    export = tmp_path / "run" / "export"
    from hydra.utils import instantiate

    datamodule = instantiate(cfg.data)
    datamodule.setup()
    test = read_letor(datamodule.paths["test"])  # raw features exactly as in the file
    model_ckpt = torch.load(results["best_checkpoint"], weights_only=False)
    model = instantiate(cfg.model, n_features=test.num_features, normalizer=datamodule.build_normalizer())
    model.load_state_dict(model_ckpt["state_dict"])
    model.eval()
    scripted = torch.jit.load(str(export / "scorer.pt"))
    session = onnxruntime.InferenceSession(str(export / "scorer.onnx"))
    for q in range(min(5, test.num_queries)):
        rows = slice(test.offsets[q], test.offsets[q + 1])
        raw = torch.from_numpy(test.features[rows])
        with torch.no_grad():
            framework = model(raw[None], torch.ones(1, len(raw), dtype=torch.bool))[0]
            torch.testing.assert_close(scripted(raw), framework, atol=1e-5, rtol=0)
        onnx_scores = session.run(None, {"features": raw.numpy()})[0]
        np.testing.assert_allclose(onnx_scores, framework.numpy(), atol=1e-5, rtol=0)


def test_same_seed_same_metrics(make_cfg, tmp_path):
    first = train(make_cfg("seed=7", out=tmp_path / "a"))
    second = train(make_cfg("seed=7", out=tmp_path / "b"))
    assert first["val"] == second["val"] and first["test"] == second["test"]
    third = train(make_cfg("seed=8", out=tmp_path / "c"))
    assert third["val"] != first["val"]


class SigtermAt(pl.Callback):
    """Sends this process SIGTERM (what a job scheduler sends) at a given epoch and batch."""

    def __init__(self, epoch: int, batch: int) -> None:
        self.epoch, self.batch = epoch, batch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if (trainer.current_epoch, batch_idx) == (self.epoch, self.batch):
            os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_exits_non_zero_and_the_run_resumes_to_the_same_weights(make_cfg, tmp_path):
    common = ["~callbacks.early_stopping", "data.max_list_length=8", "test=false", "export=false"]
    train(make_cfg(*common, "trainer.max_epochs=3", out=tmp_path / "straight"))
    sigterm = [f"+callbacks.sigterm._target_={SigtermAt.__module__}.SigtermAt", "+callbacks.sigterm.epoch=2"]
    with pytest.raises(SystemExit) as exit_:
        train(make_cfg(*common, *sigterm, "+callbacks.sigterm.batch=3", out=tmp_path / "interrupted"))
    assert exit_.value.code == EXIT_SIGTERM
    record = json.loads((tmp_path / "interrupted" / "results.json").read_text())
    last = tmp_path / "interrupted" / "checkpoints" / "last.ckpt"
    assert record["interrupted"] == "SIGTERM" and record["resume"] == f"ckpt_path={last}" and "test" not in record
    train(make_cfg(*common, "trainer.max_epochs=3", f"ckpt_path={last}", out=tmp_path / "resumed"))
    straight = torch.load(tmp_path / "straight" / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    resumed = torch.load(tmp_path / "resumed" / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    for name, tensor in straight.items():
        torch.testing.assert_close(resumed[name], tensor, msg=name)


def test_device_resident_mode_trains_like_the_loader(make_cfg, tmp_path):
    loader = train(make_cfg("data.max_list_length=8", "export=false", out=tmp_path / "loader"))
    resident = train(
        make_cfg("data.max_list_length=8", "data.device_resident=true", "export=false", out=tmp_path / "resident")
    )
    for key in METRIC_KEYS:
        assert resident["val"][key] == pytest.approx(loader["val"][key], abs=1e-5)


def test_letor_files_from_the_command_line_config(make_cfg, tmp_path, data_dir):
    from datamodules.synthetic import generate_letor

    files = generate_letor(
        data_dir / "letor", n_queries={"train": 40, "val": 10, "test": 10}, num_features=6, mean_docs=10, seed=3
    )
    cfg = make_cfg(
        "data=letor",
        f"data.train={files['train']}",
        f"data.test={files['test']}",
        "data.normalization=log1p",
        "trainer.max_epochs=1",
        "model.scorer.hidden=[8]",
        "callbacks.progress_bar.refresh_rate=0",
        out=tmp_path / "run",
        tiny=False,
    )
    results = train(cfg)
    # no val file: a seeded 10% of the training queries is held out
    assert results["data"]["val"]["queries"] == 4 and results["data"]["train"]["queries"] == 36
    assert (tmp_path / "run" / "export" / "scorer.onnx").exists()


def test_without_validation_every_training_query_trains_and_the_last_epoch_is_kept(make_cfg, tmp_path, data_dir):
    from datamodules.synthetic import generate_letor

    files = generate_letor(
        data_dir / "letor", n_queries={"train": 40, "val": 10, "test": 10}, num_features=6, mean_docs=10, seed=3
    )
    common = [
        "data=letor",
        f"data.train={files['train']}",
        f"data.test={files['test']}",
        "model.scorer.hidden=[8]",
        "callbacks.progress_bar.refresh_rate=0",
        "callbacks.early_stopping.patience=0",  # would stop after epoch 2 if it were still there
    ]
    results = train(make_cfg(*common, "data.val_fraction=0", "trainer.max_epochs=3", out=tmp_path / "run", tiny=False))
    assert "val" not in results["data"] and results["data"]["train"]["queries"] == 40
    assert results["val"] == {} and set(results["test"]) == METRIC_KEYS
    assert results["epochs"] == 3 and results["best_checkpoint"].endswith("epoch_002.ckpt")
    assert (tmp_path / "run" / "export" / "scorer.pt").exists()
    # model=rankboost sets it (RankLib trains on every query when given no validation file)
    boosted = train(make_cfg(*common[:3], "model=rankboost", "model.rounds=20", out=tmp_path / "rb", tiny=False))
    assert "val" not in boosted["data"] and boosted["data"]["train"]["queries"] == 40
    # and the perceptron family (a fixed number of passes over every training query)
    committee = train(
        make_cfg(*common[:3], "model=committee_perceptron", "model.epochs=2", out=tmp_path / "cp", tiny=False)
    )
    assert committee["data"]["train"]["queries"] == 40 and committee["epochs"] == 2
    with pytest.raises(Exception, match="val_fraction must be in"):
        train(make_cfg(*common, "data.val_fraction=1.0", out=tmp_path / "bad", tiny=False))
    plateau = [
        "+model.scheduler._target_=torch.optim.lr_scheduler.ReduceLROnPlateau",
        "+model.scheduler._partial_=true",
    ]
    with pytest.raises(ValueError, match="ReduceLROnPlateau steps on a validation metric"):
        train(make_cfg(*common, "data.val_fraction=0", *plateau, out=tmp_path / "plateau", tiny=False))
    # runs are chosen on validation: without it, a sweep says that run 0 is kept
    sweep = ["model=committee_perceptron", "model.n_runs=2", "model.pool_runs=false", "model.epochs=1"]
    sweep.append("data.val_fraction=0")
    with pytest.warns(UserWarning, match="run 0 is kept"):
        train(make_cfg(*common[:3], *common[4:], *sweep, out=tmp_path / "sweep", tiny=False))


@pytest.mark.slow
def test_command_line_multirun(data_dir, tmp_path):
    overrides = [
        f"paths.data_dir={data_dir}",
        "data.n_train_queries=40",
        "data.n_val_queries=10",
        "data.n_test_queries=10",
        "data.mean_docs=10",
        "trainer.max_epochs=1",
        "export=false",
        f"hydra.sweep.dir={tmp_path}",
    ]
    done = subprocess.run(
        [sys.executable, "train.py", "-m", "model=ranknet,lambdarank", *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for job in ("0", "1"):
        assert set(json.loads((tmp_path / job / "results.json").read_text())["test"]) == METRIC_KEYS


@cuda_only
def test_gpu_training_with_device_resident_data(make_cfg, tmp_path):
    results = train(make_cfg("trainer=gpu", "data.device_resident=true", out=tmp_path / "gpu"))
    assert results["test"]["ndcg@10"] > results["test_random_scores"]["ndcg@10"]


def test_a_diverged_run_fails_and_exports_nothing(make_cfg, tmp_path):
    cfg = make_cfg(
        "model.optimizer._target_=torch.optim.SGD",
        "model.optimizer.lr=1e30",
        "trainer.max_epochs=1",
        out=tmp_path / "run",
    )
    with pytest.raises(RuntimeError, match="training diverged: not finite"):
        train(cfg)
    assert "training diverged" in json.loads((tmp_path / "run" / "results.json").read_text())["error"]
    assert not (tmp_path / "run" / "export").exists()
