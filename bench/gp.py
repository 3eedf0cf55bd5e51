"""Batched preference-GP work (T tasks as one tensor program) vs a one-task-at-a-time loop.

    python -m bench.gp                        # CPU; T = 20 tasks, Boston's shape
    python -m bench.gp --device cuda          # GPU rows (CUDA-event timed) next to the CPU loop
    python -m bench.gp --tasks 100 --pairs 100

The unit of work is one step of Chu & Ghahramani's active learning (experiment=chu2005_boston) for
each of T trials: the Laplace fit of K labelled pairs over n items (Newton, warm start from zero),
the posterior of every item's utility, and eq. (10)'s entropy gain of P pool pairs. Rows:

* loop: for each task, the same functions on a batch of one (what one writes first);
* batched: all T tasks in one call (``[T, K, K]`` Newton systems, ``[T, K, P]`` pool scores).

Both get the same data and are checked equal before timing. Prints seconds per step and the ratio.
"""

from __future__ import annotations

import argparse

import torch

from bench.timing import device_seconds, machine, median_ms
from rankers.gp import active
from rankers.gp.kernels import rbf
from rankers.gp.preference import fit, predict_pairs, scatter_pairs


def make_tasks(tasks: int, items: int, pairs: int, pool: int, dims: int, seed: int, device, dtype):
    """A shared prior over ``items`` points and per-task labelled pairs and pools."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(items, dims, generator=g, dtype=dtype)
    target = x[:, 0] + 0.5 * torch.sin(2 * x[:, 1]) + 0.1 * torch.randn(items, generator=g, dtype=dtype)
    prior = rbf(x, x, 0.0625, 0.0625)

    def draw(count: int) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.randint(0, items, (tasks, count), generator=g)
        b = (a + torch.randint(1, items, (tasks, count), generator=g)) % items
        first = target[a] > target[b]
        return torch.where(first, a, b), torch.where(first, b, a)

    v, u = draw(pairs)
    cand_v, cand_u = draw(pool)
    return tuple(t.to(device) for t in (prior, v, u, cand_v, cand_u))


def step(prior, v, u, cand_v, cand_u, sigma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One active-learning step for a batch of tasks: utilities ``[T, n]`` and pool gains ``[T, P]``."""
    state = fit(prior, v, u, sigma)
    latent = (prior @ scatter_pairs(state.alpha, v, u, prior.shape[-1])[..., None])[..., 0]
    mu, s2, _ = predict_pairs(state, prior, v, u, cand_v, cand_u, sigma)
    return latent, active.expected_entropy_gain(mu, s2, sigma)


def loop(prior, v, u, cand_v, cand_u, sigma: float) -> tuple[torch.Tensor, torch.Tensor]:
    parts = [
        step(prior, v[t : t + 1], u[t : t + 1], cand_v[t : t + 1], cand_u[t : t + 1], sigma) for t in range(len(v))
    ]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--items", type=int, default=506)
    parser.add_argument("--pairs", type=int, default=50)
    parser.add_argument("--pool", type=int, default=1000)
    parser.add_argument("--dims", type=int, default=13)
    parser.add_argument("--sigma", type=float, default=0.001**0.5)
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch threads on CPU (default: torch's)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    data = make_tasks(args.tasks, args.items, args.pairs, args.pool, args.dims, 0, device, getattr(torch, args.dtype))
    batched = step(*data, args.sigma)
    looped = loop(*data, args.sigma)
    for a, b in zip(batched, looped):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8)
    loop_ms = median_ms(lambda: loop(*data, args.sigma), device, repeats=args.repeats, warmup=1)
    batch_ms = median_ms(lambda: step(*data, args.sigma), device, repeats=args.repeats, warmup=1)
    once = device_seconds(lambda: step(*data, args.sigma), device)
    print(f"machine: {machine()}; device {device}, {args.dtype}")
    print(f"T={args.tasks} tasks, n={args.items} items, K={args.pairs} pairs, P={args.pool} pool pairs, d={args.dims}")
    print(f"loop    (one task at a time): {loop_ms:9.1f} ms per step")
    print(f"batched (one tensor program): {batch_ms:9.1f} ms per step  (single timed call {1e3 * once:.1f} ms)")
    print(f"ratio loop / batched: {loop_ms / batch_ms:.1f}x")
    return {"loop_ms": loop_ms, "batched_ms": batch_ms, "ratio": loop_ms / batch_ms}


if __name__ == "__main__":
    main()
