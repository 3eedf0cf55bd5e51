"""Does a small Optuna search per model pay? K-fold CV over a LETOR training file's queries: each
model at its defaults against the configuration an N-trial search picks (on a validation share of the
fold's training queries, never the held-out fold), refit on all of the fold's training queries; test
ndcg@10 of each on the held-out fold, and the paired difference (docs/hparams_search.md).

    python -m bench.hparams_search_cv --train rank.train --query-file rank.train.query --models rankboost lambdarank

``--query-file``: LightGBM's group sizes (one count per query, in order) for a file without ``qid:``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# models whose default holds out no validation queries: the search holds out this share itself
NO_VALIDATION = ("rankboost", "random_forest", "committee_perceptron", "pairwise_perceptron")


def read_queries(train: Path, query_file: Path | None) -> list[list[str]]:
    """The file's lines grouped by query (``qid:`` written in when the groups come from ``query_file``)."""
    lines = [line for line in train.read_text().splitlines() if line.strip()]
    if query_file is None:
        groups: dict[str, list[str]] = {}
        for line in lines:
            groups.setdefault(line.split()[1], []).append(line)
        return list(groups.values())
    queries, at = [], 0
    for q, n in enumerate(int(x) for x in query_file.read_text().split()):
        block = lines[at : at + n]
        at += n
        queries.append([f"{row.split(' ', 1)[0]} qid:{q + 1} {row.split(' ', 1)[1]}" for row in block])
    return queries


def train_py(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "train.py", *args, "callbacks.progress_bar.refresh_rate=0"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)}\n{done.stderr[-2000:]}")


def test_ndcg(run_dir: Path) -> float:
    return json.loads((run_dir / "results.json").read_text())["test"]["ndcg@10"]


def fold(model: str, d: Path, seed: int, trials: int) -> dict:
    data = ["data=letor", f"data.train={d / 'train.txt'}", f"data.test={d / 'test.txt'}", f"seed={seed}"]
    train_py(f"model={model}", *data, f"hydra.run.dir={d / model / 'default'}")
    held = ["data.val_fraction=0.2"] if model in NO_VALIDATION else []
    sweep = d / model / "sweep"
    train_py("-m", "hparams_search=optuna", f"model={model}", *data, *held, f"hydra.sweeper.n_trials={trials}",
             f"hydra.sweep.dir={sweep}")  # fmt: skip
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())["best_params"]
    train_py(f"model={model}", *data, *[f"{k}={v}" for k, v in best.items()], f"hydra.run.dir={d / model / 'tuned'}")
    return {"default": test_ndcg(d / model / "default"), "tuned": test_ndcg(d / model / "tuned"), "best": best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=Path, required=True)
    parser.add_argument("--query-file", type=Path)
    parser.add_argument("--models", nargs="+", default=["rankboost"])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--out", type=Path, default=Path("/tmp/hparams_search_cv"))
    args = parser.parse_args()
    queries = read_queries(args.train, args.query_file)
    order = list(range(len(queries)))
    random.Random(args.seed).shuffle(order)
    folds = [order[i :: args.folds] for i in range(args.folds)]
    print("| model | defaults | searched, refit | searched - defaults (wins) |\n|---|---:|---:|---:|")
    for model in args.models:
        rows = []
        for f, held in enumerate(folds):
            d = args.out / f"fold{f}"
            d.mkdir(parents=True, exist_ok=True)
            train = sorted(q for i, other in enumerate(folds) if i != f for q in other)
            (d / "train.txt").write_text("".join(line + "\n" for q in train for line in queries[q]))
            (d / "test.txt").write_text("".join(line + "\n" for q in sorted(held) for line in queries[q]))
            rows.append(fold(model, d, args.seed + f, args.trials))
            print(f"<!-- {model} fold {f}: {rows[-1]} -->", flush=True)
        diffs = [r["tuned"] - r["default"] for r in rows]
        se = statistics.stdev(diffs) / len(diffs) ** 0.5
        print(
            f"| {model} | {statistics.mean(r['default'] for r in rows):.4f} | "
            f"{statistics.mean(r['tuned'] for r in rows):.4f} | "
            f"{statistics.mean(diffs):+.4f} ± {se:.4f} ({sum(x > 0 for x in diffs)}/{len(diffs)}) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
