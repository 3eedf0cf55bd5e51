"""Perceptron updates per second of PRankEnsemble's paths vs a straightforward one-run-at-a-time loop.

    python -m bench.perceptron                      # CPU (and CUDA when present); d=6 and d=300
    python -m bench.perceptron --device cuda        # GPU rows next to the CPU rows and the reference
    python -m bench.perceptron --device cuda --runs 60 --dims 6 --sweep   # Table 1's OAP tensor, block sweep

Shape: R=20 runs x N=100 perceptrons x T=50,000 examples (Harrington's Table 1; the experiment runs
all three tau as one R=60 tensor). Rows, each on the same data:

* reference: what one writes first: for each run a Python loop over the examples, the N
  perceptrons of that run vectorized (``[N, d]``); timed on ``--reference-runs`` runs x
  ``--reference-steps`` examples (the work per example is constant, so its rate does not depend on
  the stream length) and extrapolated to the whole stream;
* tensor path: ``PRankEnsemble(fused=False)``, all R*N perceptrons one ``[R, N, d]`` tensor, a
  handful of ops per example (timed on ``--reference-steps`` examples, extrapolated);
* fused: the C++ loop (``kernels.prank_cpu``) on CPU, the Triton kernel (``kernels.prank_triton``)
  on CUDA, over the whole stream.

CUDA rows are timed with CUDA events (GPU time, after a warm-up that compiles the kernel) and name
the GPU. Before timing, every path is checked against the reference on a deterministic stream.
Rate = R * N * T / seconds ("perceptron updates", presented or not).
"""

from __future__ import annotations

import argparse
import time

import torch

from bench.timing import device_seconds, machine
from kernels import prank_triton
from rankers.perceptron import ensemble as perceptron
from rankers.perceptron.ensemble import PRankEnsemble


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


def check_agreement(device: torch.device, d: int, fused: bool) -> None:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2, 500, d, generator=generator).to(device)
    y = torch.randint(0, 5, (2, 500), generator=generator).to(device)
    ours = PRankEnsemble(d, 5, n_perceptrons=3, n_runs=2, tau=1.0, device=device, fused=fused)
    ours.partial_fit(x, y)
    for run in range(2):
        weights, thresholds = reference_stream(x[run], y[run], 3, 5, 1.0, torch.Generator(device=device))
        # summation order differs (addcmul vs +=): float32 rounding only
        torch.testing.assert_close(ours.weights[run], weights, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(ours.thresholds[run], thresholds, rtol=0, atol=0)


def path_name(device: torch.device, fused: bool) -> str:
    if not fused:
        return "tensor path"
    kernel = PRankEnsemble(1, 2, device=device)._kernel(None)
    return {None: "tensor path (no kernel here)", prank_triton.stream: "Triton kernel"}.get(kernel, "C++ kernel")


def time_ours(device, x, y, n, tau, fused: bool, steps: int) -> float:
    """Seconds of ``partial_fit`` over the first ``steps`` examples (warm-up first)."""
    r, d = x.shape[0], x.shape[2]
    PRankEnsemble(d, 5, n_perceptrons=n, n_runs=r, tau=tau, device=device, fused=fused).partial_fit(
        x[:, :100], y[:, :100]
    )
    ours = PRankEnsemble(d, 5, n_perceptrons=n, n_runs=r, tau=tau, device=device, fused=fused)
    return device_seconds(lambda: ours.partial_fit(x[:, :steps], y[:, :steps]), device)


def time_reference(device, x, y, n, tau, runs: int, steps: int) -> float:
    """Seconds per (run, example) of the one-run-at-a-time loop."""
    generator = torch.Generator(device=device).manual_seed(0)

    def run_all() -> None:
        for run in range(runs):
            reference_stream(x[run, :steps], y[run, :steps], n, 5, tau, generator)

    return device_seconds(run_all, device) / (runs * steps)


def stream_seconds(kind: str, device, x, y, args, timed_steps: int) -> float:
    """Seconds for the whole stream (R x T) of one path, extrapolated from ``timed_steps`` examples."""
    r, steps = x.shape[:2]
    if kind == "reference":
        per_example = time_reference(device, x, y, args.perceptrons, args.tau, args.reference_runs, timed_steps)
        return per_example * r * steps
    seconds = time_ours(device, x, y, args.perceptrons, args.tau, kind == "fused", timed_steps)
    return seconds * steps / timed_steps


def sweep(device: torch.device, x: torch.Tensor, y: torch.Tensor, n: int, tau: float) -> None:
    """Triton launch configurations on the whole stream (GPU time), best first."""
    r, steps, d = x.shape
    results = []
    for block_n in (8, 16, 32, 64, 128):
        for warps in (1, 2, 4):
            if block_n * prank_triton.launch_config(n, d, 5)["BLOCK_D"] < 32 * warps:
                continue
            ours = PRankEnsemble(d, 5, n_perceptrons=n, n_runs=r, tau=tau, device=device)
            presented = torch.rand(steps, r, n, device=device) < tau
            predictions = torch.empty(r, steps, n, dtype=torch.long, device=device).transpose(1, 2)

            def launch(ours=ours, presented=presented, predictions=predictions, block_n=block_n, warps=warps):
                for start in range(0, steps, perceptron.CHUNK):
                    stop = min(steps, start + perceptron.CHUNK)
                    prank_triton.stream(
                        x[:, start:stop],
                        y[:, start:stop],
                        presented[start:stop],
                        ours.weights,
                        ours.thresholds,
                        predictions[:, :, start:stop],
                        ours.mistakes,
                        ours.correct,
                        block_n=block_n,
                        num_warps=warps,
                    )

            launch()  # compile
            results.append((device_seconds(launch, device), block_n, warps))
    print(
        f"\nTriton launch sweep, R={r} N={n} T={steps} d={d} (kernel only, draws made beforehand), default "
        f"{prank_triton.launch_config(n, d, 5)}:\n"
    )
    print("| BLOCK_N | num_warps | GPU ms |")
    print("|---:|---:|---:|")
    for seconds, block_n, warps in sorted(results):
        print(f"| {block_n} | {warps} | {seconds * 1e3:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all", help="cuda: CPU rows too")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--perceptrons", type=int, default=100)
    parser.add_argument("--steps", type=int, default=50000)
    parser.add_argument("--dims", type=int, nargs="+", default=[6, 300])
    parser.add_argument("--tau", type=float, default=0.6)
    parser.add_argument("--reference-runs", type=int, default=2)
    parser.add_argument("--reference-steps", type=int, default=5000)
    parser.add_argument("--sweep", action="store_true", help="also time Triton launch configurations")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    devices = [torch.device("cpu")] + (
        [torch.device("cuda")] if args.device != "cpu" and torch.cuda.is_available() else []
    )
    r, n, steps = args.runs, args.perceptrons, args.steps
    updates = r * n * steps
    print(f"# {machine()}; R={r} N={n} T={steps} tau={args.tau}")
    print("# CUDA rows: GPU time from CUDA events; 'extrapolated' rows ran --reference-steps examples\n")
    print(
        "| d | device | path | examples timed | seconds for the stream | updates/s | vs reference | vs our CPU path |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    for d in args.dims:
        generator = torch.Generator().manual_seed(0)
        x_cpu = torch.randn(r, steps, d, generator=generator)
        y_cpu = torch.randint(0, 5, (r, steps), generator=generator)
        ref_steps = min(args.reference_steps, steps)
        measured = []  # (device label, path, examples timed, seconds for the whole stream)
        for device in devices:
            x, y = x_cpu.to(device), y_cpu.to(device)
            for fused in (False, True):
                check_agreement(device, d, fused)
            label = f"cuda {torch.cuda.get_device_name(device)}" if device.type == "cuda" else "cpu"
            rows = [
                (f"reference ({args.reference_runs} runs, one at a time)", "reference", ref_steps),
                ("tensor path", "tensor", ref_steps),
                (path_name(device, True), "fused", steps),
            ]
            for name, kind, timed_steps in rows:
                measured.append((label, name, timed_steps, stream_seconds(kind, device, x, y, args, timed_steps)))
        reference = measured[0][3]  # the CPU reference: every ratio is against it
        cpu_path = measured[2][3]  # the CPU path a user gets (the C++ kernel where it builds)
        for label, name, timed_steps, seconds in measured:
            note = "" if timed_steps == steps else " (extrapolated)"
            print(
                f"| {d} | {label} | {name} | {timed_steps:,} | {seconds:.3f}{note} | {updates / seconds:.3g} | "
                f"{reference / seconds:.1f}x | {cpu_path / seconds:.2f}x |",
                flush=True,
            )
        if any(device.type == "cuda" for device in devices) and args.sweep:
            sweep(torch.device("cuda"), x_cpu.cuda(), y_cpu.cuda(), n, args.tau)
    print(f"\nrun at {time.strftime('%Y-%m-%d %H:%M')}")


if __name__ == "__main__":
    main()
