"""Pairs per second of the Committee Perceptron: our paths next to a one-run numpy loop, and a sweep of
R runs as one tensor against the same R runs one after another.

    python -m bench.committee_perceptron                     # CPU (and CUDA when present)
    python -m bench.committee_perceptron --device cuda --runs 64

Data: the preference pairs of ``--data`` (LETOR file; default LightGBM's lambdarank example as
converted for this project, 161 queries, 300 features, 10,584 pairs), z-scored; a seeded random
file of the same shape when it is missing. Committee K=20, query balancing on.

Rows (same pairs, same orders):

* numpy reference: the pseudo-code for one run as one writes it first, a Python loop over the
  pairs with numpy vectors (timed on ``--reference-pairs`` pairs, extrapolated: the work per pair
  is constant);
* tensor path: ``PairwisePerceptron(fused=False)``, one run (timed on the same prefix);
* fused: the C++ loop of ``kernels.pairwise_perceptron_cpu`` (CPU only), a whole pass;
* sweep: ``--runs`` runs (seeds x K in 1..100) as one ``[R, d]`` tensor in one pass, against the
  same R runs one at a time (tensor path: on the prefix; fused: whole passes).

Before timing, the numpy loop and every path are checked to make the same mistakes and keep the
same committee counts on a prefix of the stream.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from bench.timing import device_seconds, machine
from datamodules.feature_maps import QuantileThresholds
from datamodules.letor_io import read_letor
from datamodules.normalization import FeatureNormalizer
from kernels import pairwise_perceptron_cpu
from rankers.pairwise_perceptron.perceptron import PairwisePerceptron, pass_orders, preference_pairs

K = 20


def load_pairs(path: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``features [N, d]`` (z-scored), ``pairs [P, 2]``, ``eta [P]`` from a LETOR file (or random data)."""
    if Path(path).exists():
        data = read_letor(path)
        features, labels, offsets = data.features, data.labels, data.offsets
    else:
        print(f"{path} missing: a seeded random file of the same shape")
        rng = np.random.default_rng(0)
        lengths = rng.integers(5, 27, 161)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        features = rng.normal(size=(offsets[-1], 300)).astype(np.float32)
        labels = rng.integers(0, 5, offsets[-1]).astype(np.float32)
    features = FeatureNormalizer.fit("zscore", features)(torch.from_numpy(features))
    return (features, *query_pairs(labels, offsets))


def query_pairs(labels: np.ndarray, offsets: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """``pairs [P, 2]`` (row indices, preferred first) and ``eta [P]`` of every query of a flat split."""
    width = int(np.diff(offsets).max())
    query = torch.from_numpy(np.repeat(np.arange(len(offsets) - 1), np.diff(offsets)))
    position = torch.arange(len(query)) - torch.from_numpy(offsets[:-1]).long()[query]
    padded = torch.full((len(offsets) - 1, width), -1.0)
    mask = torch.zeros(len(offsets) - 1, width, dtype=torch.bool)
    padded[query, position], mask[query, position] = torch.from_numpy(labels), True
    found, eta = preference_pairs(padded, mask)
    start = torch.from_numpy(offsets[:-1]).long()[found[:, 0]]
    return torch.stack([start + found[:, 1], start + found[:, 2]], 1), eta


def numpy_reference(features: np.ndarray, pairs: np.ndarray, eta: np.ndarray, order: np.ndarray, k: int):
    """One run of the pseudo-code: returns (mistakes per pair, the committee's counts, sorted)."""
    w, c, birth = np.zeros(features.shape[1], dtype=np.float32), 0, 0
    members: list[list] = []  # [count, birth, weights]
    mistakes = np.zeros(len(order), dtype=bool)
    for t, p in enumerate(order):
        x = features[pairs[p, 0]] - features[pairs[p, 1]]
        if float(w @ x) > 0:
            c += 1
            continue
        mistakes[t] = True
        if len(members) < k:
            members.append([c, birth, w.copy()])
        else:
            low = min(range(k), key=lambda m: (members[m][0], members[m][1]))
            if c > members[low][0]:
                members[low] = [c, birth, w.copy()]
        w = w + eta[p] * x
        birth, c = birth + 1, 0
    return mistakes, sorted(m[0] for m in members)


def check(features, pairs, eta, device: torch.device, steps: int) -> None:
    order = pass_orders(len(pairs), [0], 0)[:, :steps]
    mistakes, counts = numpy_reference(features.numpy(), pairs.numpy(), eta.numpy(), order[0].numpy(), K)
    paths = [False] + (["cpu"] if device.type == "cpu" and pairwise_perceptron_cpu.kernel() is not None else [])
    for fused in paths:
        ours = PairwisePerceptron(features.shape[1], committee_size=K, device=device, fused=fused)
        ours.fit_pairs(features, pairs, eta, order)
        filled = ours.counts[0][ours.counts[0] >= 0].sort().values.tolist()
        assert int(ours.mistakes[0]) == int(mistakes.sum()) and filled == counts, f"fused={fused} disagrees"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="/work/data/letor_a/train.txt")
    parser.add_argument("--device", default="all", help="cpu, cuda or all (CUDA when present)")
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--reference-pairs", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument(
        "--feature-map",
        choices=["none", "thresholds"],
        default="none",
        help="thresholds: the pairs over model=committee_perceptron's default features (32x wider)",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"machine: {machine()}")
    features, pairs, eta = load_pairs(args.data)
    live = None
    if args.feature_map == "thresholds":
        mapper = QuantileThresholds(features.shape[1]).fit(features)
        features, live = mapper(features), mapper.live_columns()
        print(f"thresholds: {len(live)} of {features.shape[1]} columns can be non-zero")
    n_pairs, d = len(pairs), features.shape[1]
    print(f"data: {features.shape[0]} documents, d={d}, {n_pairs} pairs per pass; K={K}")
    prefix = min(args.reference_pairs, n_pairs)

    order = pass_orders(n_pairs, [0], 0)
    f_np, p_np, e_np, o_np = features.numpy(), pairs.numpy(), eta.numpy(), order[0, :prefix].numpy()
    start = time.perf_counter()
    numpy_reference(f_np, p_np, e_np, o_np, K)
    reference_rate = prefix / (time.perf_counter() - start)
    print("\n| device | path | runs | pairs/s (all runs) | vs numpy one-run loop |\n|---|---|---:|---:|---:|")
    print(f"| cpu | numpy reference, one run | 1 | {reference_rate:,.0f} | 1.0x |")

    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    sizes = [[1, 5, 20, 100][r % 4] for r in range(args.runs)]
    for name in devices:
        if name == "cuda" and not torch.cuda.is_available():
            continue
        device = torch.device(name)
        check(features, pairs, eta, device, min(prefix, 500))
        x = features.to(device)
        paths = [False] + (["cpu"] if name == "cpu" and pairwise_perceptron_cpu.kernel() is not None else [])
        for fused in paths:
            label = "fused C++" if fused else "tensor path"
            steps = n_pairs if fused else prefix
            one = pass_orders(n_pairs, [0], 0)[:, :steps]
            sweep = pass_orders(n_pairs, range(args.runs), 0)[:, :steps]

            def single(order=one, fused=fused, device=device, x=x):
                PairwisePerceptron(d, committee_size=K, device=device, fused=fused).fit_pairs(x, pairs, eta, order)

            def batched(order=sweep, fused=fused, device=device, x=x):
                learner = PairwisePerceptron(d, committee_size=sizes, n_runs=args.runs, device=device, fused=fused)
                learner.fit_pairs(x, pairs, eta, order)

            def sequential(order=sweep, fused=fused, device=device, x=x):
                for run in range(args.runs):
                    learner = PairwisePerceptron(d, committee_size=sizes[run], device=device, fused=fused)
                    learner.fit_pairs(x, pairs, eta, order[run : run + 1])

            rate = steps / device_seconds(single, device, warmup=1)
            print(f"| {name} | {label}, one run | 1 | {rate:,.0f} | {rate / reference_rate:.1f}x |")
            batched_seconds = device_seconds(batched, device, warmup=1)
            rate = args.runs * steps / batched_seconds
            print(
                f"| {name} | {label}, sweep as one tensor | {args.runs} | {rate:,.0f} | {rate / reference_rate:.1f}x |"
            )
            sequential_seconds = device_seconds(sequential, device, warmup=1)
            rate = args.runs * steps / sequential_seconds
            print(
                f"| {name} | {label}, the sweep's runs one by one | {args.runs} | {rate:,.0f} | "
                f"{rate / reference_rate:.1f}x |"
            )
            speedup = sequential_seconds / batched_seconds
            print(f"|  | sweep speed-up over sequential runs ({label}) | | {speedup:.1f}x | |")
        if live is not None and "cpu" in paths:
            time_live_columns(features, pairs, eta, live, n_pairs, sizes, args.runs, reference_rate)


def time_live_columns(features, pairs, eta, live, n_pairs, sizes, runs, reference_rate) -> None:
    """The fused loop on the map's live columns only (what model=committee_perceptron streams)."""
    narrow, device = features[:, live].contiguous(), torch.device("cpu")
    width = features.shape[1]
    for count, committee in ((1, K), (runs, sizes)):
        order = pass_orders(n_pairs, range(count), 0)

        def fit(order=order, count=count, committee=committee):
            learner = PairwisePerceptron(width, committee_size=committee, n_runs=count, fused="cpu")
            learner.fit_pairs(narrow, pairs, eta, order, columns=live)

        rate = count * n_pairs / device_seconds(fit, device, warmup=1)
        what = "one run" if count == 1 else "sweep as one tensor"
        print(f"| cpu | fused C++ on the live columns, {what} | {count} | {rate:,.0f} | {rate / reference_rate:.1f}x |")


if __name__ == "__main__":
    main()
