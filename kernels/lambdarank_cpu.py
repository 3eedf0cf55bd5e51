"""The logistic pairwise losses (RankNet, LambdaRank, LambdaLoss) on CPU as one fused pass per ranked
row (``lambdarank_cpu.cpp``).

Why it exists: over all pairs (``k=None``) the tensor path of ``losses.pairwise.pairwise_sums``
writes and reads about ten ``[B, rows, L]`` temporaries per block (difference, sign, softplus,
sigmoid, weight, products) and sorts, gathers and scatters around them; the kernel ranks each
query, takes its ideal DCG and computes each pair once in registers (vectorized), with no
temporaries, skipping padding, one query per thread. ``pairwise_sums`` uses it on float32 CPU
tensors when no graph is recorded (the loss's forward, which also yields the gradient) for RankNet
(``logistic_pair``, no weight), LambdaRank (``logistic_pair``, ``delta_ndcg_weight``) and LambdaLoss
(``binary_logistic_pair`` with ``ndcg_loss2_weight``, ``ndcg_loss2pp_weight(mu)`` or
``delta_ndcg_weight``). Parity with the tensor path (value, lambdas, pair counts; with k, ties,
padding): ``tests/kernels/test_lambdarank_cpu.py``. ``LTR_CPU_KERNELS=0`` turns it off.

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
    """The compiled module (``logistic_pairs``), or None (with one warning) where it cannot be built."""
    return KERNEL.kernel()


def logistic_pairs(
    scores: Tensor,
    labels: Tensor,
    gains: Tensor,
    mask: Tensor,
    cut: Tensor,
    full: Tensor,
    *,
    unit: bool,
    rho: float,
    delta: float,
    scale: float,
    sigma: float,
    top: int,
) -> tuple[Tensor, Tensor, Tensor] | None:
    """``(cost [B], grad [B, L], count [B])`` in list order, or None without the kernel.

    ``scores, labels, gains [B, L]`` in list order (gains 0 for padding), ``mask [B, L]`` bool;
    ``cut`` / ``full`` ``[L + 1]`` the discounts with / without the cut at k; pairs have a row among
    the first ``top`` ranks. Weights: ``unit`` (RankNet), else ``|g_i - g_j| / IDCG (rho |cut_i -
    cut_j| + delta |full_{j-i-1} - full_{j-i}|)``; ``scale`` multiplies cost and lambdas. Each query
    is ranked by score (ties by position), and its ideal DCG taken, inside the kernel.
    """
    module = kernel()
    if module is None:
        return None
    as_f32 = [t.to(torch.float32).contiguous() for t in (scores, labels, gains)]
    discounts = [t.to(torch.float32).contiguous() for t in (cut, full)]
    options = (bool(unit), float(rho), float(delta), float(scale), float(sigma), int(top))
    return tuple(module.logistic_pairs(*as_f32, mask.to(torch.bool).contiguous(), *discounts, *options))
