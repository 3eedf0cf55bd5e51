"""Harrington's Table 2 (experiments/harrington2003_cf.py): the paper's finding on planted user
similarity, the rows, the extra-rows hook, the command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from datamodules.ratings import HarringtonRatings, RatingTrials
from experiments.harrington2003_cf import Table2Options, paper_order, table2, widrow_hoff_rows
from tests.conftest import ROOT
from tests.ratings_files import ratings_file


def _assert_papers_finding(table: dict, taus) -> None:
    """OAP-BPM has the lowest rank loss of all rows, below PRank with non-overlapping 95% intervals."""
    best = min(table, key=lambda name: table[name]["mean"])
    assert best.startswith("OAP-BPM"), {name: round(row["mean"], 3) for name, row in table.items()}
    bpm = table[best]
    prank = table["PRank"]
    assert bpm["mean"] + bpm["ci95"] < prank["mean"] - prank["ci95"]
    for tau in taus:  # at every tau, BPM beats the voting read-outs of the same ensemble
        assert table[f"OAP-BPM tau={tau:g}"]["mean"] < table[f"OAP-Bagg tau={tau:g}"]["mean"]
        assert table[f"OAP-BPM tau={tau:g}"]["mean"] < table[f"OAP-VP tau={tau:g}"]["mean"]


def test_oap_bpm_beats_prank_and_widrow_hoff_on_planted_similarity(tmp_path):
    protocol = HarringtonRatings(ratings_file(tmp_path, seed=0), trials=80)
    results = table2(protocol, Table2Options(n_perceptrons=40, taus=(0.1, 0.3)), out_dir=tmp_path / "out")
    table = results["table"]
    assert list(table) == paper_order((0.1, 0.3), (0.2, 0.05, 0.01, 0.001))
    _assert_papers_finding(table, (0.1, 0.3))
    assert all(len(row["per_trial"]) == 80 for row in table.values())
    assert results["setting"]["train"] == 210 and results["setting"]["test"] == 90
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    assert written["table"]["PRank"]["mean"] == pytest.approx(table["PRank"]["mean"])
    assert "| OAP-BPM tau=0.1 |" in (tmp_path / "out" / "table2.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize(
    "generator",
    [
        dict(seed=1, n_clusters=3),
        dict(seed=2, noise=1.2, taste_spread=0.8),
        dict(seed=3, half_stars=True),
    ],
    ids=["few-groups", "noisy", "half-stars"],
)
def test_the_finding_holds_across_data(tmp_path, generator):
    protocol = HarringtonRatings(ratings_file(tmp_path, **generator), trials=150)
    results = table2(protocol, Table2Options(n_perceptrons=50, taus=(0.1, 0.2, 0.3)))
    _assert_papers_finding(results["table"], (0.1, 0.2, 0.3))


def _trials(n_runs: int = 3, d: int = 4, k: int = 5) -> RatingTrials:
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(n_runs, 50, d, generator=generator) - 0.5
    y = torch.randint(0, k, (n_runs, 50), generator=generator)
    return RatingTrials(x[:, :40], y[:, :40], x[:, 40:], y[:, 40:], ["u"] * n_runs, [], k, None, None)


def test_widrow_hoff_regresses_the_papers_one_based_rank():
    trials = _trials()
    rows = widrow_hoff_rows(trials, (0.1,), torch.device("cpu"))
    # by hand, for run 0: w += eta ((y + 1) - w.x) x, then round(w.x) clamped to 1..k, minus 1
    w = torch.zeros(4)
    for x, y in zip(trials.train_x[0], trials.train_y[0]):
        w += 0.1 * ((y + 1) - w @ x) * x
    predicted = torch.floor(trials.test_x[0] @ w + 0.5).clamp(1, 5) - 1
    assert rows["WH eta=0.1"][0].item() == pytest.approx((predicted - trials.test_y[0]).abs().mean().item(), abs=1e-6)


def constant_median_row(trials: RatingTrials, *, seed: int, device) -> dict[str, torch.Tensor]:
    """An extra row through the hook: predict each trial's median training rank."""
    median = trials.train_y.float().median(1).values
    return {"median rank": (trials.test_y - median[:, None]).abs().mean(-1)}


def test_extra_rows_plug_into_the_table(tmp_path):
    protocol = HarringtonRatings(ratings_file(tmp_path, seed=4), trials=6)
    extra = ["tests.experiments.test_harrington2003_cf.constant_median_row"]
    results = table2(protocol, Table2Options(n_perceptrons=4, taus=(0.3,), extra_rows=extra))
    assert list(results["table"])[-1] == "median rank"
    assert len(results["table"]["median rank"]["per_trial"]) == 6


@pytest.mark.slow
def test_table2_from_the_command_line(tmp_path):
    path = ratings_file(tmp_path, seed=5)
    done = subprocess.run(
        [
            sys.executable,
            "train.py",
            "experiment=harrington2003_cf",
            f"data.path={path}",
            "data.trials=5",
            "harrington_cf.n_perceptrons=3",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert list(results["table"]) == paper_order((0.1, 0.2, 0.3), (0.2, 0.05, 0.01, 0.001))
    assert {"WH eta=0.05", "PRank", "OAP-BPM tau=0.3"} <= set(results["table"])
    assert all({"mean", "ci95"} <= set(row) for row in results["table"].values())
    assert results["data"]["qualifying_users"] > 10 and len(results["targets"]) == 5
