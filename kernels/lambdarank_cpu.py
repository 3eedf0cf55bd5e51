"""LambdaRank's cost and lambdas on CPU as one fused pass per ranked row (``lambdarank_cpu.cpp``).

Why it exists: over all pairs (``k=None``) the tensor path of ``losses.pairwise.pairwise_sums``
writes and reads about ten ``[B, rows, L]`` temporaries per block (difference, sign, softplus,
sigmoid, weight, products) and sorts, gathers and scatters around them; the kernel ranks each
query, takes its ideal DCG and computes each pair once in registers (vectorized), with no
temporaries, skipping padding, one query per thread. ``pairwise_sums`` uses it for ``logistic_pair`` with
``delta_ndcg_weight`` on float32 CPU tensors when no graph is recorded (the loss's forward, which
also yields the gradient). Parity with the tensor path (value, lambdas, pair counts; with k, ties,
padding): ``tests/losses/test_lambdarank_cpu.py``. ``LTR_CPU_KERNELS=0`` turns it off.

Build: ``python -m kernels.build``, or the first use compiles it (announced on stderr); caching and
the fallback without a compiler: ``kernels._cpp``. Compiled for the building machine
(``-march=native``), which the cache key does not cover: do not share the cache between CPU types.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

from kernels._cpp import CppKernel

KERNEL = CppKernel(
    Path(__file__).with_name("lambdarank_cpu.cpp"),
    prefix="ltr_lambdarank_cpu",
    label="LambdaRank CPU kernel",
    # -ffast-math lets GCC call libmvec's vector expf / log1pf; -fopenmp: the simd pragma and at::parallel_for
    cflags=("-O3", "-march=native", "-ffast-math", "-fopenmp"),
    ldflags=("-fopenmp",),
)


def enabled() -> bool:
    """Whether ``pairwise_sums`` may use the kernel (``LTR_CPU_KERNELS=0`` says no)."""
    return os.environ.get("LTR_CPU_KERNELS", "1") != "0"


def kernel() -> ModuleType | None:
    """The compiled module (``lambdarank_pairs``), or None (with one warning) where it cannot be built."""
    return KERNEL.kernel()


def lambdarank_pairs(
    scores: Tensor, labels: Tensor, gains: Tensor, mask: Tensor, discount: Tensor, *, sigma: float, top: int
) -> tuple[Tensor, Tensor, Tensor] | None:
    """``(cost [B], grad [B, L], count [B])`` in list order, or None without the kernel.

    ``scores, labels, gains [B, L]`` in list order (gains 0 for padding), ``mask [B, L]`` bool;
    ``discount [L + 1]`` (0 at ranks >= k); pairs have a row among the first ``top`` ranks. Each
    query is ranked by score (ties by position), and its ideal DCG taken, inside the kernel.
    """
    module = kernel()
    if module is None:
        return None
    as_f32 = [t.to(torch.float32).contiguous() for t in (scores, labels, gains)]
    real = mask.to(torch.bool).contiguous()
    discount = discount.to(torch.float32).contiguous()
    return tuple(module.lambdarank_pairs(*as_f32, real, discount, float(sigma), int(top)))
