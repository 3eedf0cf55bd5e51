"""Crammer & Singer's online run (experiments/crammer_singer2001_cf.py): their finding on planted user
similarity, and the experiment through train.py's config."""

from __future__ import annotations

import json

import pytest
import torch
from hydra.utils import get_method

from datamodules.ratings import CrammerSingerRatings
from experiments.crammer_singer2001_cf import OnlineOptions, online_table
from tests.ratings_files import ratings_file


def test_crammer_singer_online_run(tmp_path):
    protocol = CrammerSingerRatings(ratings_file(tmp_path, seed=7), min_ratings=160, n_rounds=150, n_test=10, trials=40)
    results = online_table(protocol, OnlineOptions(etas=(1.0, 0.1)), out_dir=tmp_path / "out")
    assert set(results["table"]) == {"PRank", "WH eta=1", "WH eta=0.1"} and len(results["curves"]["PRank"]) == 150
    # the time-averaged loss after round 1 is the first prediction's error; PRank ends below WH (their finding)
    assert results["table"]["PRank"]["mean"] < min(results["table"][f"WH eta={eta}"]["mean"] for eta in ("1", "0.1"))
    assert len(results["test"]["PRank"]["per_trial"]) == 40
    assert "| PRank |" in (tmp_path / "out" / "online.md").read_text()


def test_the_curves_are_the_running_mean_of_a_loop(tmp_path):
    """The online curve of PRank at round t is ``1/t sum_{s<=t} |y_hat_s - y_s|``, checked against a
    loop over the same predictions (PRank's, made before each update)."""
    from rankers.perceptron.ensemble import PRankEnsemble

    protocol = CrammerSingerRatings(ratings_file(tmp_path, seed=8), min_ratings=160, n_rounds=60, trials=5)
    results = online_table(protocol, OnlineOptions(etas=(0.1,)))
    trials = protocol.trials()
    prank = PRankEnsemble(trials.n_features, trials.n_ranks, n_runs=trials.n_trials, seed=0)
    predicted = prank.partial_fit(trials.train_x, trials.train_y)[:, 0]
    for r in range(trials.n_trials):
        errors = [abs(int(p) - int(y)) for p, y in zip(predicted[r], trials.train_y[r])]
        assert results["table"]["PRank"]["per_trial"][r] == pytest.approx(sum(errors) / len(errors), rel=1e-6)
    expected_curve = (predicted - trials.train_y).abs().double().cumsum(-1) / torch.arange(1, 61)
    assert results["curves"]["PRank"] == pytest.approx(expected_curve.mean(0).tolist(), rel=1e-5)


def test_the_experiment_runs_from_its_config(make_cfg, tmp_path):
    cfg = make_cfg(
        "experiment=crammer_singer2001_cf",
        f"data.path={ratings_file(tmp_path, seed=9)}",
        "data.min_ratings=160",
        "data.n_rounds=40",
        "data.trials=3",
        "crammer_singer_cf.etas=[0.1]",
        out=tmp_path / "run",
        tiny=False,
    )
    results = get_method(cfg.entry)(cfg)
    written = json.loads((tmp_path / "run" / "results.json").read_text())
    assert set(written["table"]) == {"PRank", "WH eta=0.1"} == set(results["table"])
    assert len(written["targets"]) == 3 and (tmp_path / "run" / "online.md").exists()
