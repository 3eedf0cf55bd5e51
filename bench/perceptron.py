"""Perceptron updates per second of PRankEnsemble vs a straightforward one-run-at-a-time loop.

    python bench/perceptron.py                      # R=20, N=100, T=50,000 at d=6 and d=300
    python bench/perceptron.py --device cuda

Ours streams all R runs x N perceptrons as one ``[R, N, d]`` tensor, one step per example. The
reference is what one writes first: for each run, a Python loop over the examples, the N
perceptrons of that run vectorized (``[N, d]``). Its rate is measured on the first
``--reference-steps`` examples of ``--reference-runs`` runs (the work per example is constant, so the
rate does not depend on the stream length); ours runs the whole stream. Before timing, the two are
checked to give the same weights and thresholds on a deterministic stream (tau = 1).
Rate = R * N * T / seconds ("perceptron updates", presented or not, as in the issue).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._timing import machine, sync
from rankers.perceptron import PRankEnsemble


def reference_stream(x: torch.Tensor, y: torch.Tensor, n: int, k: int, tau: float, generator) -> tuple:
    """One run: ``x [T, d]``, ``y [T]``; N perceptrons ``[N, d]`` updated example by example."""
    d = x.shape[1]
    weights = torch.zeros(n, d, device=x.device)
    thresholds = torch.zeros(n, k - 1, device=x.device)
    ranks = torch.arange(k - 1, device=x.device)
    for t in range(x.shape[0]):
        score = weights @ x[t]  # [N]
        predicted = (score[:, None] >= thresholds).sum(-1)
        presented = torch.rand(n, generator=generator, device=x.device) < tau
        mistake = (predicted != y[t]) & presented
        signs = torch.where(y[t] <= ranks, -1.0, 1.0)  # [k-1]
        step = signs * (((score[:, None] - thresholds) * signs <= 0) & mistake[:, None])
        weights += step.sum(-1, keepdim=True) * x[t]
        thresholds -= step
    return weights, thresholds


def check_agreement(device: torch.device, d: int) -> None:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2, 500, d, generator=generator).to(device)
    y = torch.randint(0, 5, (2, 500), generator=generator).to(device)
    ours = PRankEnsemble(d, 5, n_perceptrons=3, n_runs=2, tau=1.0, device=device)
    ours.partial_fit(x, y)
    for run in range(2):
        weights, thresholds = reference_stream(x[run], y[run], 3, 5, 1.0, torch.Generator(device=device))
        # summation order differs (addcmul vs +=): float32 rounding only
        torch.testing.assert_close(ours.weights[run], weights, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(ours.thresholds[run], thresholds, rtol=0, atol=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--perceptrons", type=int, default=100)
    parser.add_argument("--steps", type=int, default=50000)
    parser.add_argument("--dims", type=int, nargs="+", default=[6, 300])
    parser.add_argument("--tau", type=float, default=0.6)
    parser.add_argument("--reference-runs", type=int, default=2)
    parser.add_argument("--reference-steps", type=int, default=5000)
    parser.add_argument("--tensor-path", action="store_true", help="time the tensor path, not the fused CPU loop")
    args = parser.parse_args()
    device = torch.device(args.device)
    r, n, steps = args.runs, args.perceptrons, args.steps
    path = "tensor path" if args.tensor_path else "fused CPU loop where available"
    print(f"# {machine()}, device {device}; R={r} N={n} T={steps} tau={args.tau}; ours: {path}")
    print("| d | ours s | ours updates/s | reference updates/s | speedup |")
    print("|---|---|---|---|---|")
    for d in args.dims:
        check_agreement(device, d)
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(r, steps, d, generator=generator).to(device)
        y = torch.randint(0, 5, (r, steps), generator=generator).to(device)

        ours = PRankEnsemble(d, 5, n_perceptrons=n, n_runs=r, tau=args.tau, device=device, fused=not args.tensor_path)
        ours.partial_fit(x[:, :100], y[:, :100])  # warm-up (allocator, kernels)
        sync(device)
        start = time.perf_counter()
        ours.partial_fit(x, y)
        sync(device)
        ours_seconds = time.perf_counter() - start
        ours_rate = r * n * steps / ours_seconds

        ref_steps = min(args.reference_steps, steps)
        ref_generator = torch.Generator(device=device).manual_seed(0)
        sync(device)
        start = time.perf_counter()
        for run in range(args.reference_runs):
            reference_stream(x[run, :ref_steps], y[run, :ref_steps], n, 5, args.tau, ref_generator)
        sync(device)
        ref_rate = args.reference_runs * n * ref_steps / (time.perf_counter() - start)
        print(f"| {d} | {ours_seconds:.2f} | {ours_rate:.3g} | {ref_rate:.3g} | {ours_rate / ref_rate:.1f}x |")


if __name__ == "__main__":
    main()
