"""bench.click_propensity prints one row per (log, threshold) with the EM's errors against the truth."""

from __future__ import annotations

import sys

from bench import click_propensity
from datamodules.clicks.simulate import Simulation, load_labeled, simulate
from datamodules.synthetic import generate_letor


def test_one_row_per_log_and_threshold(tmp_path, monkeypatch, capsys) -> None:
    files = generate_letor(tmp_path, n_queries={"train": 40, "val": 2, "test": 2}, num_features=4, mean_docs=16)
    data, ids = load_labeled(files["train"])
    simulate(data, ids, Simulation(eta=1.0, sessions=(60, 80), seed=0), tmp_path / "log")
    monkeypatch.setattr(sys, "argv", ["x", str(tmp_path / "log"), "--min-examinations", "0", "0.5"])
    click_propensity.main()
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"| {tmp_path}")]
    assert [row.split(" | ")[1] for row in rows] == ["0", "0.5"]
    for row in rows:
        max_error = float(row.split(" | ")[2])
        assert 0 < max_error < 0.5  # an estimate, near the truth (eta 1, a small log)
