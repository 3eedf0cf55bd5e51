"""A full disk or an unwritable run directory (issue 41, case 3): one line naming the file and what
was being written, a non-zero exit, and nothing partial that a later run or resume would load."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

import rankers.export
import rankers.outputs
from rankers.outputs import OutputError, write_results
from rankers.pipeline import train
from tests.conftest import ROOT

QUICK = ["trainer.max_epochs=1", "~callbacks.early_stopping"]
ENOSPC = OSError(28, "No space left on device")


def _half_then_full(*args, **kwargs):
    """A writer (``torch.save(obj, path)``, ``export_onnx(module, example, path)``) that gets some bytes
    out, then meets a full disk."""
    with open(args[-1], "wb") as out:
        out.write(b"PK\x03\x04 half a file")
    raise ENOSPC


def test_a_disk_full_at_the_first_checkpoint_leaves_no_checkpoint(make_cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(rankers.outputs.Path, "write_bytes", lambda self, data: _half_then_full(self))
    with pytest.raises(OutputError, match=r"cannot write the checkpoint .*/checkpoints/\S+\.ckpt: No space left"):
        train(make_cfg(*QUICK, out=tmp_path / "run"))
    assert [path.name for path in (tmp_path / "run" / "checkpoints").iterdir()] == []  # no partial file


def test_a_disk_full_during_the_export_leaves_the_old_export_or_none(make_cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(rankers.export, "export_onnx", _half_then_full)
    with pytest.raises(OutputError, match=r"cannot write the export .*/run/export: No space left"):
        train(make_cfg(*QUICK, out=tmp_path / "run"))
    assert sorted(path.name for path in (tmp_path / "run").iterdir() if "export" in path.name) == []
    assert not (tmp_path / "run" / "results.json").exists()  # a failed run does not look finished


def test_results_are_replaced_whole_or_kept(tmp_path, monkeypatch):
    path = write_results(tmp_path / "results.json", {"val": {"ndcg@10": 0.5}})

    def full(self, *args, **kwargs):
        self.open("w").write('{"val": ')
        raise ENOSPC

    monkeypatch.setattr(rankers.outputs.Path, "write_text", full)
    with pytest.raises(OutputError, match=f"cannot write the results file {path}: No space left on device"):
        write_results(path, {"val": {"ndcg@10": 0.7}})
    assert json.loads(path.read_text()) == {"val": {"ndcg@10": 0.5}}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_results_hold_no_nan(tmp_path):
    results = {"table": {"GPR": {"400": {"mae": math.nan, "zero_one": 0.5}}}, "t": torch.tensor(math.inf)}
    on_disk = json.loads(write_results(tmp_path / "r.json", results).read_text())  # strict JSON: no NaN
    assert on_disk["table"]["GPR"]["400"] == {"mae": None, "zero_one": 0.5} and on_disk["t"] is None
    assert on_disk["absent"] == {"table.GPR.400.mae": "not finite (nan)", "t": "not finite (inf)"}


@pytest.mark.slow  # a train.py process: ~15 s on the shared 2-core machine
@pytest.mark.parametrize("where", ["file/run", "readonly/run"])
def test_an_unusable_run_directory_ends_in_one_line(tmp_path, where):
    (tmp_path / "file").write_text("a regular file")
    (tmp_path / "readonly").mkdir(mode=0o500)
    if where.startswith("readonly") and os.access(tmp_path / "readonly", os.W_OK):
        pytest.skip("running as a user who may write anywhere (root)")
    done = subprocess.run(
        [sys.executable, "train.py", f"hydra.run.dir={tmp_path / where}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 74, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        f"error: cannot create the run directory {tmp_path / where} (hydra.run.dir): "
        + ("Not a directory" if where.startswith("file") else "Permission denied")
    ]


def test_torch_writers_full_disk_error_is_named_too(tmp_path):
    """torch.save / torch.jit.save into a file report a full disk as a RuntimeError without an errno."""
    expected = r"cannot write the export .*/export: the writer failed \(basic_ios.*free"
    with pytest.raises(OutputError, match=expected), rankers.outputs.atomic_directory(tmp_path / "export", "export"):
        raise RuntimeError("basic_ios::clear: iostream error")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="a bug"), rankers.outputs.writing("export", tmp_path):
        raise RuntimeError("a bug")  # not a write failure: its traceback stays
