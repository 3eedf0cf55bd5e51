"""A run directory used twice, and resuming from another run's checkpoint (issue 41, case 1)."""

from __future__ import annotations

import json
import os
import signal

import pytest
import pytorch_lightning as pl
import torch

from rankers.pipeline import EXIT_SIGTERM, train
from rankers.run_identity import RunConflict, run_identity
from tests.rankers.test_pipeline import SigtermAt

QUICK = ["trainer.max_epochs=1", "test=false", "export=false", "~callbacks.early_stopping"]


def test_every_checkpoint_names_its_run(make_cfg, tmp_path):
    cfg = make_cfg("model=ranknet", *QUICK, out=tmp_path / "run")
    train(cfg)
    for path in (tmp_path / "run" / "checkpoints").glob("*.ckpt"):
        stored = torch.load(path, weights_only=False)["run_identity"]
        assert stored == run_identity(cfg) and stored["model"] == cfg.model._target_
        assert len(stored["fingerprint"]) == 64


def test_a_run_directory_holding_another_run_is_refused_before_training(make_cfg, tmp_path):
    out = tmp_path / "run"
    train(make_cfg("model=ranknet", *QUICK, out=out))
    before = {path.name: path.stat().st_mtime_ns for path in (out / "checkpoints").iterdir()}
    for model in ("listnet", "ranknet"):  # another model, and the same one started afresh
        with pytest.raises(RunConflict, match=f"already holds another run.*ckpt_path={out}/checkpoints/last.ckpt"):
            train(make_cfg(f"model={model}", *QUICK, out=out))
    assert {path.name: path.stat().st_mtime_ns for path in (out / "checkpoints").iterdir()} == before


def test_resuming_from_another_models_checkpoint_is_refused_naming_both(make_cfg, tmp_path):
    ranknet = make_cfg("model=ranknet", *QUICK, out=tmp_path / "ranknet")
    train(ranknet)
    last = tmp_path / "ranknet" / "checkpoints" / "last.ckpt"
    listnet = make_cfg("model=listnet", *QUICK, f"ckpt_path={last}", out=tmp_path / "listnet")
    theirs, ours = run_identity(ranknet)["fingerprint"][:12], run_identity(listnet)["fingerprint"][:12]
    with pytest.raises(RunConflict, match=f"refusing to resume from {last}.*{theirs}.*this run is.*{ours}") as refused:
        train(listnet)
    assert "(checkpoint) vs" in str(refused.value)  # and says which settings differ
    assert not (tmp_path / "listnet" / "checkpoints").exists()  # refused before training
    # another data setting is another run too
    with pytest.raises(RunConflict, match="refusing to resume"):
        train(make_cfg("model=ranknet", *QUICK, "data.max_list_length=5", f"ckpt_path={last}", out=tmp_path / "x"))


def test_an_interrupted_run_resumes_in_its_own_directory(make_cfg, tmp_path):
    out = tmp_path / "run"
    common = ["~callbacks.early_stopping", "data.max_list_length=8", "test=false", "export=false"]
    sigterm = [f"+callbacks.sigterm._target_={SigtermAt.__module__}.SigtermAt", "+callbacks.sigterm.epoch=1"]
    with pytest.raises(SystemExit) as exit_:
        train(make_cfg(*common, *sigterm, "+callbacks.sigterm.batch=2", "trainer.max_epochs=2", out=out))
    assert exit_.value.code == EXIT_SIGTERM
    last = out / "checkpoints" / "last.ckpt"
    assert json.loads((out / "results.json").read_text())["resume"] == f"ckpt_path={last}"
    results = train(make_cfg(*common, "trainer.max_epochs=2", f"ckpt_path={last}", out=out))
    assert results["epochs"] == 2 and sorted(p.name for p in last.parent.iterdir() if "-v" in p.name) == []
    # Lightning's own keyword, one more epoch; another model is still refused (when Lightning loads it)
    assert train(make_cfg(*common, "trainer.max_epochs=3", "ckpt_path=last", out=out))["epochs"] == 3
    with pytest.raises(RunConflict, match="refusing to resume"):
        train(make_cfg(*common, "model=listnet", "trainer.max_epochs=4", "ckpt_path=last", out=out))


class SigtermInTest(pl.Callback):
    """SIGTERM while the finished fit's best checkpoint is being tested."""

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        if batch_idx == 0:
            os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_during_the_test_after_the_fit_exits_143_not_0(make_cfg, tmp_path):
    out = tmp_path / "run"
    cfg = make_cfg(
        *QUICK[:1], "data.eval_batch_size=8", f"+callbacks.sigterm._target_={__name__}.SigtermInTest", out=out
    )
    with pytest.raises(SystemExit) as exit_:  # Lightning's evaluation loop raised a bare SystemExit: status 0
        train(cfg)
    assert exit_.value.code == EXIT_SIGTERM
    record = json.loads((out / "results.json").read_text())
    assert record["interrupted"] == "SIGTERM" and record["during"] == "test"
    assert record["resume"] == f"ckpt_path={out / 'checkpoints' / 'last.ckpt'}"


def test_a_checkpoint_without_identity_or_missing_is_refused(make_cfg, tmp_path):
    from rankers.run_identity import refuse_foreign_checkpoint

    cfg = make_cfg("model=ranknet", out=tmp_path / "run")
    legacy = tmp_path / "legacy.ckpt"
    torch.save({"state_dict": {}, "epoch": 3}, legacy)
    with pytest.raises(RunConflict, match="unknown identity"):
        refuse_foreign_checkpoint(legacy, cfg)
    with pytest.raises(RunConflict, match="no such checkpoint file"):
        refuse_foreign_checkpoint(tmp_path / "nope.ckpt", cfg)
