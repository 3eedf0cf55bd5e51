"""The other writers of run outputs (issue 41, sweep): run files, the score CLI, Ctrl-C at train.py."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import train
from datamodules.normalization import FeatureNormalizer
from rankers.export import export_scorer
from rankers.outputs import EXIT_OUTPUT_ERROR, OutputError
from rankers.score import main as score_main
from rankers.score import write_run as write_letor_run
from rankers.scorers import LinearScorer
from retrieval.trec import write_run

ENOSPC = OSError(28, "No space left on device")


def test_a_run_file_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    scores = torch.tensor([[0.3, 0.1], [0.2, 0.9]])
    path = write_run(tmp_path / "r.run", scores, ["q1", "q2"], ["a", "b"], tag="t")
    before = path.read_text()

    def full(self, text, *args, **kwargs):
        self.open("w").write(text[:10])
        raise ENOSPC

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError, match="No space"):
        write_run(path, scores.flip(1), ["q1", "q2"], ["a", "b"], tag="t")
    assert path.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["r.run"]


def test_the_score_cli_refuses_nan_scores_and_writes_nothing(tmp_path):
    run = tmp_path / "run.txt"
    scores = np.array([0.5, math.nan, 0.1], dtype=np.float32)
    with pytest.raises(ValueError, match=r"1 non-finite scores \(first: document row 1, query 7\)"):
        write_letor_run(run, scores, np.array([7, 7, 8]), np.array([0, 2, 3]), ["a", "b", "c"])
    assert not run.exists()
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match="cannot write the run file"):
        write_letor_run(tmp_path / "file" / "run", scores[[0, 2]], np.array([7, 8]), np.array([0, 1, 2]), ["a", "c"])


def test_the_score_cli_ends_an_unwritable_output_in_one_line(tmp_path, caplog):
    letor = tmp_path / "test.txt"
    letor.write_text("2 qid:1 1:3 # docid = a\n0 qid:1 1:1 # docid = b\n")
    export = export_scorer(FeatureNormalizer("none", num_features=1), LinearScorer(1), tmp_path / "export", 1)
    (tmp_path / "file").write_text("")
    output = tmp_path / "file" / "run.txt"
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as exit_:
        score_main(["--scorer", export["torchscript"], "--input", str(letor), "--output", str(output)])
    assert exit_.value.code == EXIT_OUTPUT_ERROR
    (message,) = [r.message for r in caplog.records if r.levelno >= logging.ERROR]
    assert message.startswith(f"cannot write the run file {output}: ")  # ENOTDIR or EEXIST, by the OS


def interrupted(cfg):
    raise KeyboardInterrupt


def test_ctrl_c_outside_the_training_loop_ends_in_one_line_and_exit_130(caplog):
    cfg = OmegaConf.create({"entry": f"{__name__}.interrupted"})
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as exit_:
        train.main.__wrapped__(cfg)
    assert exit_.value.code == 130
    assert [r.message for r in caplog.records if r.levelno >= logging.ERROR] == ["interrupted by SIGINT"]
