"""Scoring throughput of LambdaMART's exported tree ensemble against the engine's own ``predict``.

    python -m bench.tree_scoring --train letor_a/train.txt --test letor_a/test.txt
    python -m bench.tree_scoring --train T --test X --engine xgboost --rounds 500 --device cuda
    python -m bench.tree_scoring --train synthetic:2000 --device cuda   # MSLR-shaped data made in memory

Fits ``model=lambdamart``'s engine (its defaults, ``--rounds`` rounds) on ``--train``, then scores every
document of ``--test`` (repeated ``--repeat`` times, so that the timed call is not a few hundred rows)
with (1) the tensorized ensemble (``rankers.trees.ensemble.TreeEnsembleScorer``, TorchScript as
exported, on ``--device``) in chunks of ``--chunk`` documents and (2) the engine's ``predict`` on the
same array, in the same run. Prints documents per second of each, their ratio and the largest
difference between the two scores.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from bench.timing import machine, sync
from datamodules.letor_io import read_letor
from rankers.lambdamart.engines import Split, engine_params, fit_engine, lightgbm_scorer, xgboost_scorer


def best_seconds(fn, repeats: int) -> float:
    fn()  # warm-up (TorchScript's profiling run, the engine's first call)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def splits(train: str, test: str | None) -> tuple:
    """Two LETOR files, or ``synthetic:Q``: MSLR-shaped splits of Q and Q/4 queries (136 features)."""
    if train.startswith("synthetic:"):
        from bench.train_throughput import mslr_like

        queries = int(train.removeprefix("synthetic:"))
        return mslr_like(queries, seed=0), mslr_like(max(1, queries // 4), seed=1)
    if test is None:
        raise SystemExit("--test is needed with a --train file")
    return read_letor(train), read_letor(test)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--test", default=None, help="(with --train synthetic:Q: Q/4 queries of other draws)")
    parser.add_argument("--engine", default="lightgbm", choices=["lightgbm", "xgboost"])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=10, help="copies of the test documents scored at once")
    parser.add_argument("--chunk", type=int, default=8192, help="documents per call of the tensorized scorer")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the engine uses its own)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--timings", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    train, test = splits(args.train, args.test)
    width = max(train.num_features, test.num_features)
    train, test = train.with_num_features(width), test.with_num_features(width)
    split = Split(train.features, train.labels.astype(np.float64), train.offsets)
    start = time.perf_counter()
    params = engine_params(args.engine, {}, {}, 0)
    model = fit_engine(
        args.engine, params, split, None, rounds=args.rounds, early_stopping_rounds=None, k=10, gain="exp2",
        empty=0.0, on_round=lambda r, v: False,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    print(f"# fitted {model.rounds} rounds on {len(train.labels):,} documents in {seconds:.1f} s", flush=True)
    build = lightgbm_scorer if args.engine == "lightgbm" else xgboost_scorer
    device = torch.device(args.device)
    scorer = torch.jit.script(build(model.text, model.rounds, width).eval()).to(device)
    x = np.ascontiguousarray(np.tile(test.features, (args.repeat, 1)))
    xt = torch.from_numpy(x).to(device)

    def ours() -> np.ndarray:
        with torch.no_grad():
            parts = [scorer(xt[i : i + args.chunk]) for i in range(0, len(xt), args.chunk)]
        sync(device)
        return torch.cat(parts).cpu().numpy()

    if args.engine == "lightgbm":
        import lightgbm as lgb

        booster = lgb.Booster(model_str=model.text)

        def engine() -> np.ndarray:
            return booster.predict(x, num_iteration=model.rounds)
    else:
        import xgboost as xgb

        booster = xgb.Booster()
        booster.load_model(bytearray(model.text.encode()))

        def engine() -> np.ndarray:
            return booster.predict(xgb.DMatrix(x), iteration_range=(0, model.rounds), output_margin=True)

    diff = float(np.abs(ours() - engine()).max())
    print(f"# scored {len(x):,} documents both ways; largest |difference| {diff:.2e}", flush=True)
    ours_s, engine_s = best_seconds(ours, args.timings), best_seconds(engine, args.timings)
    n = len(x)
    trees = f"{model.rounds} trees (deepest leaf {scorer.depth})"
    print(f"{machine()}; {args.engine}, {trees}, {n} documents x {width} features")
    print("| scorer | documents/s | s per call | ratio to the engine |\n|---|---:|---:|---:|")
    name = f"tensorized ensemble, TorchScript, {device}, {args.threads} torch thread(s)"
    print(f"| {name} | {n / ours_s:,.0f} | {ours_s:.4f} | {engine_s / ours_s:.2f}x |")
    print(f"| {args.engine} predict (its own threads) | {n / engine_s:,.0f} | {engine_s:.4f} | 1.00x |")
    print(f"largest |difference| between the two: {diff:.2e}")


if __name__ == "__main__":
    main()
