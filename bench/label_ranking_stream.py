"""Algorithm 1's stream on many labels: the per-row stream for 0/1 labels vs the dense loop.

    python -m bench.label_ranking_stream [--shapes 1000x500x374 1000x1000x53 1000x100x14] [--epochs 2]
        [--data medical-train.arff medical.xml ...]

For each ``NxFxd`` a synthetic multilabel set (features uniform with 80 % zeros, labels from a noisy
planted linear model, about 3.5 relevant a row) is streamed by ``blend.fit_online`` (8 runs in one
tensor) through each path of ``CalibratedPerceptron``: the per-row stream that sets of at least
``MANY_LABELS`` labels take, and the dense loop below it (forced by raising the threshold). Prints
seconds, ms a step, their ratio and the largest difference between the two hypotheses. Each
``--data TRAIN LABELS`` (MULAN's XML, or k for the last k attributes) adds a row for a real training
file, min-max scaled as ``data=multilabel`` does (``--shapes`` with no value: real files only).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import rankers.label_ranking.online as online
from bench.label_ranking_share import minmax
from bench.timing import machine
from datamodules.multilabel_io import read_multilabel
from rankers.label_ranking.blend import fit_online


def synthetic(n: int, f: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.random((n, f)) * (rng.random((n, f)) < 0.2)
    scores = x @ rng.normal(size=(f, d)) + rng.normal(size=(n, d)) * 2
    return x, (scores > np.quantile(scores, 1 - 3.5 / d, axis=0)).astype(int)


def real(train: str, labels: str) -> tuple[np.ndarray, np.ndarray]:
    option = {"n_labels": int(labels)} if labels.isdigit() else {"labels": labels}
    data, _ = read_multilabel(train, **option)
    x, _ = minmax(data.features.astype(np.float64), data.features[:0].astype(np.float64))
    return x, data.labels


def timed(x: np.ndarray, y: np.ndarray, epochs: int, threshold: int) -> tuple[float, np.ndarray]:
    online.MANY_LABELS = threshold
    start = time.perf_counter()
    weight, _ = fit_online(x, y, epochs=epochs)
    return time.perf_counter() - start, weight


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=["1000x500x374", "1000x1000x53", "1000x100x14"])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--data", nargs=2, action="append", default=[], metavar=("TRAIN", "LABELS"))
    args = parser.parse_args(argv)
    default = online.MANY_LABELS
    print(f"machine: {machine()}; 8 runs, {args.epochs} passes; per-row stream from {default} labels on")
    print("| N x F x d | dense loop s | per-row stream s | ms a step, dense / per-row | speed-up | max difference |")
    print("|---|---:|---:|---|---:|---:|")
    for name, (x, y) in [*((shape, synthetic(*map(int, shape.split("x")))) for shape in args.shapes),
                         *((Path(train).stem, real(train, labels)) for train, labels in args.data)]:  # fmt: skip
        n = len(x)
        dense, dense_weight = timed(x, y, args.epochs, threshold=10**9)
        rows, rows_weight = timed(x, y, args.epochs, threshold=0)
        steps = n * args.epochs / 1e3
        gap = float(np.abs(dense_weight - rows_weight).max())
        size = f"{name} ({n}x{x.shape[1]}x{y.shape[1]})" if args.data else name
        print(f"| {size} | {dense:.2f} | {rows:.2f} | {dense / steps:.2f} / {rows / steps:.2f} | "
              f"{dense / rows:.2f}x | {gap:.1e} |", flush=True)  # fmt: skip
    online.MANY_LABELS = default


if __name__ == "__main__":
    main()
