"""How to blend Algorithm 1 with binary relevance: every (C, share) pair, and the CV rule, in nested CV.

    python -m bench.label_ranking_share --data emotions-train.arff emotions.xml --folds 5 \
        --data scene-train.arff scene.xml --folds 3 [--json shares.json]

For each ``--data TRAIN LABELS`` (MULAN's XML, or k for the last k attributes) the training file is
split into ``--folds`` outer folds (only training files are read: this is how the defaults were
chosen). On each outer training part it fits scikit-learn's binary relevance at its defaults (the
reference the issue judges by), Algorithm 1 once and the logistic part at every ``C`` of the
default grid, scores every (C, share) pair of the blend (``rankers.label_ranking.blend``) on the
outer held-out part, and runs the default rule (``choose_blend``: 3 inner folds, the default grids)
to see which pair the model would take and what that gives. Prints ranking and Hamming loss as
ratios to the reference's per set, for a few fixed pairs and the rule, and their mean and worst over
the sets. Features are min-max scaled on each training part, as ``data=multilabel`` does.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np

from bench.timing import machine
from datamodules.multilabel import affine_parameters
from datamodules.multilabel_io import read_multilabel
from rankers.label_ranking.baselines import fit_binary_relevance
from rankers.label_ranking.blend import blend, choose_blend, fit_online, ranking_and_hamming
from rankers.label_ranking.logistic import fit_logistic
from rankers.label_ranking.module import DEFAULT_CS, DEFAULT_SHARES

# fixed pairs shown beside the rule: binary relevance through our solver, the previous default's base,
# a few shares at C=1, Algorithm 1 alone
SHOWN = {"C=1 share=0": (1.0, 0.0), "C=1 share=0.1": (1.0, 0.1), "C=1 share=0.3": (1.0, 0.3),
         "C=1 share=0.5": (1.0, 0.5), "Algorithm 1 alone": (1.0, 1.0)}  # fmt: skip


def minmax(train: np.ndarray, held: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both parts scaled in float64 by the min-max scaling fitted on ``train`` (``data=multilabel``'s)."""
    low, span = affine_parameters("minmax", train)
    return (train - low) / span, (held - low) / span


def outer_folds(features: np.ndarray, relevant: np.ndarray, folds: int, seed: int) -> dict[str, list[np.ndarray]]:
    """The reference's, each shown pair's and the rule's ``[ranking loss, Hamming loss]`` on every outer fold."""
    order = np.random.default_rng(seed).permutation(len(features))
    candidates = [(C, share) for C in DEFAULT_CS for share in DEFAULT_SHARES]
    out: dict[str, list[np.ndarray]] = {}
    for held in np.array_split(order, folds):
        train = np.setdiff1d(order, held)
        x, x_held = minmax(features[train], features[held])
        y, y_held = relevant[train], relevant[held]
        out.setdefault("reference", []).append(ranking_and_hamming(fit_binary_relevance(x, y > 0), x_held, y_held))
        online = fit_online(x, y, seed=seed)
        logistic = {C: fit_logistic(x, y > 0, C=C) for C in DEFAULT_CS}
        scored = {pair: ranking_and_hamming(blend(logistic[pair[0]], online, x, pair[1]), x_held, y_held)
                  for pair in candidates}  # fmt: skip
        for name, pair in SHOWN.items():
            out.setdefault(name, []).append(scored[pair])
        chosen, _ = choose_blend(x, y, candidates, seed=seed)
        out.setdefault("rule", []).append(scored[chosen])
        out.setdefault("rule's choice", []).append(np.array(chosen))
        print(f"  fold of {len(held)}: the rule took C={chosen[0]:g}, share={chosen[1]:g}", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs=2, action="append", required=True, metavar=("TRAIN", "LABELS"))
    parser.add_argument("--folds", type=int, action="append", help="outer folds per --data (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the ratios here")
    args = parser.parse_args(argv)
    print(f"machine: {machine()}")
    ratios: dict[str, dict] = {}
    for i, (train_path, labels) in enumerate(args.data):
        folds = args.folds[i] if args.folds and i < len(args.folds) else 3
        option = {"n_labels": int(labels)} if labels.isdigit() else {"labels": labels}
        data, _ = read_multilabel(train_path, **option)
        name = Path(train_path).stem.removesuffix("-train")
        print(f"{name}: {len(data.features)} x {data.features.shape[1]}, {data.labels.shape[1]} labels, {folds} folds")
        losses = outer_folds(data.features.astype(np.float64), data.labels, folds, args.seed)
        choices = Counter(f"{C:g}/{share:g}" for C, share in losses.pop("rule's choice"))
        base = np.mean(losses.pop("reference"), 0)
        ratios[name] = {k: (np.mean(v, 0) / base).tolist() for k, v in losses.items()}
        cells = "  ".join(f"{k} {r[0]:.3f}/{r[1]:.3f}" for k, r in ratios[name].items())
        print(f"{name}: reference {base[0]:.4f}/{base[1]:.4f}; rank/ref, Hamming/ref: {cells}", flush=True)
        ratios[name] = {**ratios[name], "reference": base.tolist(), "rule's choices (C/share)": dict(choices)}
    keys = [*SHOWN, "rule"]
    for what, reduce in (("mean", np.mean), ("worst", np.max)):
        cells = "  ".join(f"{k} {reduce([r[k][0] for r in ratios.values()]):.3f}/"
                          f"{reduce([r[k][1] for r in ratios.values()]):.3f}" for k in keys)  # fmt: skip
        print(f"{what} over {len(ratios)} sets: {cells}")
    if args.json:
        Path(args.json).write_text(json.dumps(ratios, indent=1))


if __name__ == "__main__":
    main()
