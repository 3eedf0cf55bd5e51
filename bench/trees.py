"""The random forest's cost: growing it (scikit-learn, threads) and scoring with the tensorized trees
against scikit-learn's own ``predict`` on the same trees, measured in the same run.

    python -m bench.trees --train train.txt --test test.txt
    python -m bench.trees --train train.txt --test test.txt --trees 300 --jobs 1 2 --repeat 5
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from bench.timing import best_seconds, machine
from datamodules.letor_io import read_letor
from rankers.trees.forest import TreeEnsembleScorer, fit_forest, forest_scores_numpy, pack_trees


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--test", required=True)
    parser.add_argument("--trees", type=int, default=300)
    parser.add_argument("--jobs", type=int, nargs="*", default=[1, -1])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads scoring (model.cpu_threads)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"machine: {machine()}")
    train, test = read_letor(args.train), read_letor(args.test)
    print(f"train {train.features.shape[0]} documents x {train.features.shape[1]} features; test {len(test.labels)}")
    trees, fit_times = None, {}
    for jobs in args.jobs:
        start = time.perf_counter()
        trees = fit_forest(train.features, train.labels, train.offsets, n_trees=args.trees, seed=0, n_jobs=jobs)
        fit_times[jobs] = time.perf_counter() - start
    base = fit_times[args.jobs[0]]
    for jobs, seconds in fit_times.items():
        print(f"fit {args.trees} trees, n_jobs={jobs}: {seconds:.2f} s ({base / seconds:.2f}x n_jobs={args.jobs[0]})")
    arrays = pack_trees(trees)
    scorer = TreeEnsembleScorer.from_arrays(arrays, train.features.shape[1])
    x = torch.from_numpy(test.features)
    with torch.no_grad():
        ours = scorer(x).numpy()
        tensor_s = best_seconds(lambda: scorer(x), args.repeat)
    reference = forest_scores_numpy(trees, test.features)
    sklearn_s = best_seconds(lambda: forest_scores_numpy(trees, test.features), args.repeat)
    n = len(test.labels)
    print(f"depth {arrays.depth}; max |tensor - sklearn| = {np.abs(ours - reference).max():.2e}")
    print(f"score, tensorized trees: {n / tensor_s:,.0f} documents/s ({tensor_s * 1e3:.1f} ms)")
    print(f"score, sklearn predict:  {n / sklearn_s:,.0f} documents/s ({sklearn_s * 1e3:.1f} ms)")
    print(f"ratio tensorized / sklearn: {sklearn_s / tensor_s:.2f}x")


if __name__ == "__main__":
    main()
