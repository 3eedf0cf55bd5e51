"""bench.clicks_report's table: means over seeds and the paired difference to the naive run."""

from __future__ import annotations

import json
from pathlib import Path

from bench.clicks_report import table


def _run(folder: Path, ndcg: float, propensity: list[float] | None = None) -> None:
    folder.mkdir(parents=True)
    results = {"test": {"ndcg@10": ndcg}, "propensity": propensity or [1.0, 0.5]}
    (folder / "results.json").write_text(json.dumps(results))


def test_rows_hold_means_and_paired_differences(tmp_path: Path) -> None:
    (tmp_path / "log_eta2").mkdir()
    (tmp_path / "log_eta2" / "simulation.json").write_text(json.dumps({"propensity": [1.0, 0.25]}))
    for seed, naive, ips, clip in ((1, 0.70, 0.72, 0.71), (2, 0.60, 0.64, 0.66)):
        _run(tmp_path / "eta2" / "none" / str(seed), naive)
        _run(tmp_path / "eta2" / "ips" / str(seed), ips, [1.0, 0.3])
        _run(tmp_path / "eta2" / "clip0.1" / str(seed), clip, [1.0, 0.3])
    rows = table(tmp_path)
    assert rows[0].startswith("| eta2 | none | 0.6500 ± 0.0500 (2) |")
    assert rows[1] == "| eta2 | ips | 0.6800 ± 0.0400 (2) | 0.0300 ± 0.0100 |"  # differences 0.02, 0.04
    assert rows[2].startswith("| eta2 | clip0.1 | 0.6850 ± 0.0250 (2) | 0.0350 ± 0.0250 |")
    assert rows[3] == "| eta2 | EM propensity, max relative error at positions 1-2 | 0.200 | |"
