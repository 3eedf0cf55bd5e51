"""How much of Algorithm 1 to blend with binary relevance: every share, and the CV rule, in nested CV.

    python bench/label_ranking_share.py --data emotions-train.arff emotions.xml --folds 5 \
        --data scene-train.arff scene.xml --folds 3 [--json shares.json]

For each ``--data TRAIN LABELS`` (MULAN's XML, or k for the last k attributes) the training file is
split into ``--folds`` outer folds (only training files are read: this is how the defaults were
chosen). On each outer training part it fits binary relevance and Algorithm 1 once, scores every
share of the blend (``rankers.label_ranking.blend``) on the outer held-out part, and runs the
default rule (``choose_share``: 3 inner folds, base share 0.1, the larger shares, a 2% margin) to
see which share the model would take and what that gives. Prints each share's ranking and Hamming
loss as a ratio to binary relevance's (share 0) per set, the rule's, and their mean and worst over
the sets. Features are min-max scaled on each training part, as ``data=multilabel`` does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._timing import machine
from datamodules.multilabel_io import read_multilabel
from rankers.label_ranking.baselines import fit_binary_relevance
from rankers.label_ranking.blend import blend, choose_share, fit_online, ranking_and_hamming
from rankers.label_ranking.module import DEFAULT_SHARES

SHARES = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 1.0)


def minmax(train: np.ndarray, held: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    low, span = train.min(0), train.max(0) - train.min(0)
    span[span < 1e-12] = 1.0
    return (train - low) / span, (held - low) / span


def outer_folds(features: np.ndarray, relevant: np.ndarray, folds: int, seed: int) -> dict[str, list[np.ndarray]]:
    """Each share's and the rule's ``[ranking loss, Hamming loss]`` on every outer fold."""
    order = np.random.default_rng(seed).permutation(len(features))
    out: dict[str, list[np.ndarray]] = {}
    for held in np.array_split(order, folds):
        train = np.setdiff1d(order, held)
        x, x_held = minmax(features[train], features[held])
        y, y_held = relevant[train], relevant[held]
        logistic, online = fit_binary_relevance(x, y > 0), fit_online(x, y, seed=seed)
        for share in SHARES:
            out.setdefault(str(share), []).append(
                ranking_and_hamming(blend(logistic, online, x, share), x_held, y_held)
            )
        chosen, _ = choose_share(x, y, DEFAULT_SHARES, seed=seed)
        out.setdefault("rule", []).append(ranking_and_hamming(blend(logistic, online, x, chosen), x_held, y_held))
        out.setdefault("rule's share", []).append(np.array([chosen, chosen]))
        print(f"  fold of {len(held)}: the rule took share {chosen}", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs=2, action="append", required=True, metavar=("TRAIN", "LABELS"))
    parser.add_argument("--folds", type=int, action="append", help="outer folds per --data (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the ratios here")
    args = parser.parse_args(argv)
    print(f"machine: {machine()}")
    ratios: dict[str, dict[str, list[float]]] = {}
    for i, (train_path, labels) in enumerate(args.data):
        folds = args.folds[i] if args.folds and i < len(args.folds) else 3
        option = {"n_labels": int(labels)} if labels.isdigit() else {"labels": labels}
        data, _ = read_multilabel(train_path, **option)
        name = Path(train_path).stem.removesuffix("-train")
        print(f"{name}: {len(data.features)} x {data.features.shape[1]}, {data.labels.shape[1]} labels, {folds} folds")
        losses = outer_folds(data.features.astype(np.float64), data.labels, folds, args.seed)
        base = np.mean(losses["0.0"], 0)
        ratios[name] = {k: (np.mean(v, 0) / base).tolist() for k, v in losses.items() if k != "rule's share"}
        ratios[name]["binary relevance"] = base.tolist()
        cells = "  ".join(f"{k} {r[0]:.3f}/{r[1]:.3f}" for k, r in ratios[name].items() if k != "binary relevance")
        print(f"{name}: BR {base[0]:.4f}/{base[1]:.4f}; rank/BR, Hamming/BR: {cells}", flush=True)
    keys = [k for k in next(iter(ratios.values())) if k != "binary relevance"]
    for what, reduce in (("mean", np.mean), ("worst", np.max)):
        cells = "  ".join(f"{k} {reduce([r[k][0] for r in ratios.values()]):.3f}/"
                          f"{reduce([r[k][1] for r in ratios.values()]):.3f}" for k in keys)  # fmt: skip
        print(f"{what} over {len(ratios)} sets: {cells}")
    if args.json:
        Path(args.json).write_text(json.dumps(ratios, indent=1))


if __name__ == "__main__":
    main()
