"""K-fold CV of LambdaMART settings on one training file: which defaults ``model=lambdamart`` should have.

    python -m bench.lambdamart_cv --train letor_a/train.txt --folds 5
    python -m bench.lambdamart_cv --train T --settings defaults holdout-es100 holdout-es1000 xgboost

Each setting boosts through ``rankers.lambdamart.engines`` (what ``model=lambdamart`` runs) on the same
seeded folds of the training queries (``rankers.epoch_selection.query_folds``, as ``model=auto``); the
held-out fold is scored by trec_eval's ``ndcg_cut_10`` (linear gain, 0 without a relevant document:
``metrics.functional.ndcg(gain="linear")``), averaged over every held-out query. ``paired`` is the
query-by-query difference to ``defaults`` (mean ± standard error). Settings:

- ``defaults``: LightGBM's lambdarank at its defaults, every training query, 100 rounds (model=lambdamart);
- ``holdout-es100``: 10% of the training queries held out, early stopping (patience 50) on our
  val ndcg@10, at most 100 rounds (model.val_fraction=0.1);
- ``holdout-es1000``: the same with at most 1000 rounds (model.n_estimators=1000);
- ``xgboost``: XGBoost's rank:ndcg at its defaults (model.engine=xgboost).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

from bench.timing import machine
from datamodules.letor_io import LetorData, read_letor
from rankers.epoch_selection import query_folds
from rankers.lambdamart.engines import Split, engine_params, fit_engine, query_ndcg

SETTINGS = {
    "defaults": {"engine": "lightgbm", "holdout": 0.0, "rounds": 100},
    "holdout-es100": {"engine": "lightgbm", "holdout": 0.1, "rounds": 100},
    "holdout-es1000": {"engine": "lightgbm", "holdout": 0.1, "rounds": 1000},
    "xgboost": {"engine": "xgboost", "holdout": 0.0, "rounds": 100},
}


def _split(data: LetorData) -> Split:
    return Split(data.features, data.labels.astype(np.float64), data.offsets)


def _per_query_ndcg(scores: np.ndarray, data: LetorData) -> list[float]:
    return [
        query_ndcg(scores[a:b], Split(data.features[a:b], data.labels[a:b], np.array([0, b - a])), gain="linear")
        for a, b in zip(data.offsets[:-1], data.offsets[1:], strict=True)
    ]


def run_setting(name: str, fit_part: LetorData, held_out: LetorData, seed: int) -> tuple[list[float], float]:
    setting = SETTINGS[name]
    train, val = fit_part, None
    if setting["holdout"]:
        order = np.random.default_rng([seed, 5]).permutation(fit_part.num_queries)
        n_val = max(1, round(setting["holdout"] * fit_part.num_queries))
        val, train = fit_part.subset(np.sort(order[:n_val])), fit_part.subset(np.sort(order[n_val:]))
    engine = setting["engine"]
    start = time.perf_counter()
    model = fit_engine(
        engine,
        engine_params(engine, {}, {}, seed),
        _split(train),
        _split(val) if val is not None else None,
        rounds=setting["rounds"],
        early_stopping_rounds=50 if val is not None else None,
        k=10,
        gain="exp2",
        empty=0.0,
        on_round=lambda r, v: False,
    )
    seconds = time.perf_counter() - start
    if engine == "lightgbm":
        import lightgbm as lgb

        scores = lgb.Booster(model_str=model.text).predict(held_out.features, num_iteration=model.rounds)
    else:
        import xgboost as xgb

        booster = xgb.Booster()
        booster.load_model(bytearray(model.text.encode()))
        scores = booster.predict(xgb.DMatrix(held_out.features), iteration_range=(0, model.rounds))
    return _per_query_ndcg(np.asarray(scores, np.float32), held_out), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    args = parser.parse_args()
    data = read_letor(args.train)
    folds = query_folds(data, args.folds, args.seed)
    per_query = {name: [] for name in args.settings}
    seconds = {name: [] for name in args.settings}
    for fit_part, held_out in folds:
        for name in args.settings:
            values, s = run_setting(name, fit_part, held_out, args.seed)
            per_query[name] += values
            seconds[name].append(s)
    base = per_query.get("defaults")
    print(
        f"\n{args.train}: {data.num_queries} queries, {data.num_features} features, {args.folds}-fold CV; {machine()}"
    )
    print("| setting | ndcg@10 (CV mean) | - defaults (paired) | fit s per fold |\n|---|---:|---:|---:|")
    for name in args.settings:
        mean = statistics.fmean(per_query[name])
        paired = "-"
        if base is not None and name != "defaults":
            gaps = [a - b for a, b in zip(per_query[name], base, strict=True)]
            paired = f"{statistics.fmean(gaps):+.4f} ± {statistics.stdev(gaps) / math.sqrt(len(gaps)):.4f}"
        print(f"| {name} | {mean:.4f} | {paired} | {statistics.fmean(seconds[name]):.1f} |")


if __name__ == "__main__":
    main()
