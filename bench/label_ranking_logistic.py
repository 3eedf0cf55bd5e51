"""The blend's logistic part: one batched truncated-Newton solve for all labels vs scikit-learn per label.

    python -m bench.label_ranking_logistic --data genbase-train.arff genbase.xml [--data ...] [--C 1 3]

For each training file (min-max scaled, as ``data=multilabel`` does) and each ``C``: the median
seconds of ``rankers.label_ranking.logistic.fit_logistic`` (all labels at once, torch float64 on the
CPU) and of ``baselines.fit_binary_relevance`` (one scikit-learn ``LogisticRegression`` per label at
its default tolerance), their ratio, and each one's largest relative distance from a tightly
converged scikit-learn fit (tol 1e-12) over the first few non-constant labels: which of the two
stops nearer the optimum both aim at.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np

from bench.label_ranking_share import minmax
from bench.timing import machine, median_seconds
from datamodules.multilabel_io import read_multilabel
from rankers.label_ranking.baselines import fit_binary_relevance
from rankers.label_ranking.logistic import fit_logistic


def distance_to_optimum(part: tuple[np.ndarray, np.ndarray], x: np.ndarray, y: np.ndarray, C: float) -> float:
    """Largest ``|params - tight| / |tight|_max`` over up to 3 labels that are not constant."""
    from sklearn.linear_model import LogisticRegression

    labels = [j for j in range(y.shape[1]) if 0 < y[:, j].sum() < len(y)][:3]
    worst = 0.0
    for j in labels:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tight = LogisticRegression(C=C, tol=1e-12, max_iter=100_000).fit(x, y[:, j])
        reference = np.r_[tight.coef_[0], tight.intercept_]
        found = np.r_[part[0][j], part[1][j]]
        worst = max(worst, float(np.abs(found - reference).max() / np.abs(reference).max()))
    return worst


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs=2, action="append", required=True, metavar=("TRAIN", "LABELS"))
    parser.add_argument("--C", type=float, nargs="+", default=[1.0, 3.0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"machine: {machine()}")
    print("| set | N x F, labels | C | Newton s | scikit-learn s | speed-up | distance to optimum: ours / sklearn |")
    print("|---|---|---:|---:|---:|---:|---|")
    for train_path, labels in args.data:
        option = {"n_labels": int(labels)} if labels.isdigit() else {"labels": labels}
        data, _ = read_multilabel(train_path, **option)
        x, _ = minmax(data.features.astype(np.float64), data.features[:0].astype(np.float64))
        y = (data.labels > 0).astype(int)
        name = Path(train_path).stem.removesuffix("-train")
        for C in args.C:
            ours = median_seconds(lambda: fit_logistic(x, y, C=C), args.repeats)  # noqa: B023
            theirs = median_seconds(lambda: fit_binary_relevance(x, y, C=C), args.repeats)  # noqa: B023
            gap_ours = distance_to_optimum(fit_logistic(x, y, C=C), x, y, C)
            gap_theirs = distance_to_optimum(fit_binary_relevance(x, y, C=C), x, y, C)
            print(f"| {name} | {x.shape[0]} x {x.shape[1]}, {y.shape[1]} | {C:g} | {ours:.2f} | {theirs:.2f} | "
                  f"{theirs / ours:.1f}x | {gap_ours:.1e} / {gap_theirs:.1e} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
