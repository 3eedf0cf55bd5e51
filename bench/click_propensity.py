"""The EM's propensities against a simulated log's truth, for several refit thresholds.

    python -m bench.click_propensity LOG [LOG ...] --min-examinations 0 0.5 1

LOG: a folder written by ``python -m datamodules.clicks simulate`` (``features.txt``, ``clicks.tsv``,
``simulation.json``). Prints, per log and threshold (``rankers.clicks.propensity.em_propensities``'s
``min_examinations``; 0: one fit on every cell), the largest relative error at positions 1-10, the
mean relative error over positions 5-10 (the sign says which way the deep positions lean), and the
clicks the log has at each of positions 5-10 (what a 10% check there can rest on).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from datamodules.clicks.cells import aggregate
from datamodules.clicks.io import read_click_log
from rankers.clicks.propensity import em_propensities


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+")
    parser.add_argument("--min-examinations", type=float, nargs="+", default=[0.0, 0.5])
    parser.add_argument("--cache-dir", default=None)
    args = parser.parse_args()
    print(
        "| log | min_examinations | max relative error, positions 1-10 | mean relative error, positions 5-10 "
        "| clicks at positions 5-10 |"
    )
    print("|---|---:|---:|---:|---|")
    for log in map(Path, args.logs):
        data = read_click_log(log / "features.txt", log / "clicks.tsv", cache_dir=args.cache_dir)
        cells = aggregate(data.row, data.position, data.click, data.session, data.features.offsets)
        truth = np.array(json.loads((log / "simulation.json").read_text())["propensity"])
        clicks = np.bincount(cells.position, weights=cells.clicks, minlength=11)[5:11].astype(int)
        for threshold in args.min_examinations:
            estimate = em_propensities(cells, bootstrap=0, min_examinations=threshold).propensity
            positions = min(len(estimate), len(truth))  # a log's deepest position may lie above the truth's
            error = estimate[:positions] / truth[:positions] - 1
            print(
                f"| {log} | {threshold:g} | {np.abs(error).max():.3f} | {error[4:10].mean():+.3f} | "
                f"{' '.join(map(str, clicks))} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
