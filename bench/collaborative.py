"""Harrington's Table 2 protocol: all trials of a row as one ``[R, N, d]`` tensor vs one trial at a time.

    python -m bench.collaborative                                # ml-100k-sized MovieLens-like data, 500 trials
    python -m bench.collaborative --path ratings.dat             # a real ratings file
    python -m bench.collaborative --devices cuda              # (default: cpu, and cuda when present)
    python -m bench.collaborative --rankboost                 # + the RankBoost row's time and rank loss

Ours: ``experiments.harrington2003_cf`` runs every row (WH at four rates, PRank/PRank-VP, OAP at each tau
with N perceptrons) over all R trials at once. Reference: the same rows run for one trial at a
time (R = 1 per call, the loop a first implementation writes), timed on ``--reference-trials``
trials and scaled to R (every trial is the same work). Both on the same trials, in the same run;
before timing, the batched and one-at-a-time rows are checked to give the same per-trial losses
on the reference trials (same seeds per trial are not possible for OAP's Bernoulli draws, so OAP
is checked with tau = 1, where the draws do not matter).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from bench.timing import machine, sync
from datamodules.ratings import HarringtonRatings, RatingTrials
from datamodules.ratings_io import write_ratings
from datamodules.synthetic_ratings import movielens_like
from experiments.harrington2003_cf import oap_rows, prank_rows, widrow_hoff_rows
from experiments.harrington2003_cf_rankboost import ROUNDS, rankboost_row

ETAS = (0.2, 0.05, 0.01, 0.001)


def all_rows(trials: RatingTrials, n: int, taus, device: torch.device) -> dict[str, torch.Tensor]:
    rows = widrow_hoff_rows(trials, ETAS, device)
    rows.update(prank_rows(trials, 0, device))
    for i, tau in enumerate(taus):
        rows.update(oap_rows(trials, n, tau, 1 + i, device)[0])
    sync(device)
    return rows


def one(trials: RatingTrials, r: int) -> RatingTrials:
    """Trial ``r`` alone, as an R = 1 set."""
    pick = slice(r, r + 1)
    return RatingTrials(
        trials.train_x[pick], trials.train_y[pick], trials.test_x[pick], trials.test_y[pick], trials.targets[pick],
        trials.feature_users, trials.n_ranks, trials.train_items[pick], trials.test_items[pick],
    )  # fmt: skip


def check_agreement(trials: RatingTrials, device: torch.device, count: int) -> None:
    batched = all_rows(trials, 5, (1.0,), device)
    for r in range(count):
        alone = all_rows(one(trials, r), 5, (1.0,), device)
        for name, values in alone.items():
            torch.testing.assert_close(batched[name][r : r + 1], values, atol=1e-5, rtol=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", help="ratings file (default: ml-100k-sized MovieLens-like data)")
    parser.add_argument("--devices", nargs="+", default=["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--perceptrons", type=int, default=100)
    parser.add_argument("--taus", type=float, nargs="+", default=[0.1, 0.2, 0.3])
    parser.add_argument("--reference-trials", type=int, default=10)
    parser.add_argument("--rankboost", action="store_true", help="also time the RankBoost row (one fit per trial)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = args.path
        if path is None:
            path = str(Path(folder) / "ratings.tsv")
            write_ratings(movielens_like(seed=0), path)
        start = time.perf_counter()
        trials = HarringtonRatings(path, trials=args.trials).trials()
        data_seconds = time.perf_counter() - start
    for device in args.devices:
        run(trials, torch.device(device), args, data_seconds)


def run(trials: RatingTrials, device: torch.device, args: argparse.Namespace, data_seconds: float) -> None:
    trials.train_x, trials.test_x = trials.train_x.to(device), trials.test_x.to(device)
    check_agreement(trials, device, 3)
    r, d = trials.n_trials, trials.n_features
    print(f"# {machine()}, device {device}; R={r} trials, d={d}, N={args.perceptrons}, taus={args.taus}")
    print(f"# reading the file and building the trials: {data_seconds:.2f} s")
    all_rows(one(trials, 0), 2, (0.5,), device)  # warm-up (compiles the CPU kernel on first use)
    start = time.perf_counter()
    all_rows(trials, args.perceptrons, args.taus, device)
    ours = time.perf_counter() - start
    start = time.perf_counter()
    for index in range(args.reference_trials):
        all_rows(one(trials, index), args.perceptrons, args.taus, device)
    per_trial = (time.perf_counter() - start) / args.reference_trials
    reference = per_trial * r
    print("| rows | ours (all trials in one tensor) s | one trial at a time s (scaled) | speedup |")
    print("|---|---|---|---|")
    scaled = f"{reference:.2f} ({per_trial * 1e3:.0f} ms/trial)"
    print(f"| Table 2 (15 rows) | {ours:.2f} | {scaled} | {reference / ours:.1f}x |")
    if args.rankboost:
        start = time.perf_counter()
        loss = rankboost_row(trials, seed=0, device=device)["RankBoost"]
        seconds = time.perf_counter() - start
        print(f"| RankBoost row ({ROUNDS} rounds a trial, trials one after the other) | {seconds:.2f} | - | "
              f"{seconds / ours:.1f}x the 15 rows' time |")  # fmt: skip
        print(f"# RankBoost row: mean test rank loss {loss.mean():.3f} over {r} trials")


if __name__ == "__main__":
    main()
