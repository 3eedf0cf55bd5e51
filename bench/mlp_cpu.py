"""The MLP's training forward + backward on CPU: the one-pass kernel against the per-product path and autograd.

    python -m bench.mlp_cpu                          # 7k and 28k rows (a 64- and a 256-query MSLR batch)
    python -m bench.mlp_cpu --rows 28318 --blocks 128 256 512 1024

The MLP 136-256-128-64-1 on z-scored features, 10% of the rows padding, as ``RankerModule`` trains it
on CPU: ``kernels.mlp_cpu`` (gather, z-score and every layer a block at a time, ``--blocks`` rows a
block), ``rankers.neural.mkl_mlp``'s product-at-a-time path in reused buffers (the z-score into a
buffer), and ``nn.Sequential`` through autograd. Each figure is the median of ``--repeats`` timings;
the floor is the MLP's FLOPs over the real rows divided by the peak of a 2048^3 ``torch.mm`` (best of
three) measured in the same run, so ``vs floor`` is the distance to the limit and the last column the
kernel's speed-up over the per-product path.
"""

# ruff: noqa: E402  (the MKL shim must be loaded before torch)
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from kernels import mkl_vendor

mkl_vendor.activate()

import torch

from bench.train_throughput import HIDDEN, flops_per_document, machine, peak_flops
from datamodules.normalization import FeatureNormalizer
from kernels import mlp_cpu
from rankers.neural import mkl_mlp, onednn_mlp
from rankers.scorers import MLPScorer

FEATURES = 136


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def paths(rows: int, seed: int = 0) -> tuple[dict[str, Callable[[], None]], int]:
    """Each path's forward + backward on the same padded batch ``[rows, F]`` (one step, no update), and
    the batch's real rows."""
    torch.manual_seed(seed)
    scorer = MLPScorer(FEATURES, hidden=HIDDEN)
    layers = onednn_mlp.plain_layers(scorer)
    features = torch.randn(1, rows, FEATURES) * 3 + 1
    mask = torch.rand(1, rows) < 0.9
    features[~mask] = float("nan")
    normalizer = FeatureNormalizer("zscore", torch.ones(FEATURES), torch.full((FEATURES,), 3.0))
    grad = torch.randn(1, rows) * mask
    workspace = mkl_mlp.Workspace()

    def kernel():
        mkl_mlp.training_scores(layers, features, mask, normalizer, workspace).backward(grad)

    def per_product():
        normalized = mkl_mlp.normalized_into(normalizer, features, mask, workspace)
        mkl_mlp.mlp_scores(layers, normalized, workspace).backward(grad)

    def autograd():
        scorer(normalizer(features, mask)).backward(grad)

    return {"kernel": kernel, "per product": per_product, "autograd": autograd}, int(mask.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[7662, 28318])
    parser.add_argument("--blocks", type=int, nargs="+", default=[mlp_cpu.BLOCK_ROWS])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    if not mlp_cpu.available():
        raise SystemExit("kernels.mlp_cpu is not available here (no MKL in torch, or no compiler)")
    print(f"# machine: {machine()}; MKL: {'AVX-512 kernels' if mkl_vendor.active() else 'its own dispatch'}")
    print("| rows | path | block | ms | floor ms | vs floor | per product / this |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for rows in args.rows:
        runs, real = paths(rows)
        peak = peak_flops("cpu", torch.float32)
        floor = flops_per_document(FEATURES) * real / peak * 1e3
        timings = {}
        for name in ("per product", "autograd"):
            timings[name] = median_ms(runs[name], args.repeats)
        default = mlp_cpu.BLOCK_ROWS
        for block in args.blocks:
            mlp_cpu.BLOCK_ROWS = block
            timings[f"kernel {block}"] = median_ms(runs["kernel"], args.repeats)
        mlp_cpu.BLOCK_ROWS = default
        for name, ms in timings.items():
            path, _, block = name.partition(" ") if name.startswith("kernel") else (name, "", "")
            print(
                f"| {rows:,} | {path} | {block} | {ms:.2f} | {floor:.2f} | {ms / floor:.2f}x | "
                f"{timings['per product'] / ms:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
