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

Build: ``pip install -e .`` (``setup.py``), or the first use compiles it (announced on stderr); where
it comes from and the fallback without a compiler: ``kernels._native``. Compiled for the building
machine (``-march=native``), which the hash does not cover: do not share an install or the cache
between CPU types.
"""

from __future__ import annotations

import ctypes
import os

import torch
from torch import Tensor

from kernels._native import KERNELS, NativeKernel, pointer

KERNEL = NativeKernel(KERNELS["lambdarank_cpu"])
_I64, _PTR, _F64 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double
SIGNATURE = [_I64, _I64] + [_PTR] * 6 + [ctypes.c_bool] + [_F64] * 4 + [_I64] + [_PTR] * 3 + [ctypes.c_int]


def enabled() -> bool:
    """Whether ``pairwise_sums`` may use the kernel (``LTR_CPU_KERNELS=0`` says no)."""
    return os.environ.get("LTR_CPU_KERNELS", "1") != "0"


def kernel() -> ctypes.CDLL | None:
    """The loaded library (``ltr_logistic_pairs``), or None (with one warning) where it cannot be built."""
    library = KERNEL.kernel()
    if library is not None and library.ltr_logistic_pairs.argtypes is None:
        library.ltr_logistic_pairs.argtypes = SIGNATURE
        library.ltr_logistic_pairs.restype = ctypes.c_int
    return library


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
    library = kernel()
    if library is None:
        return None
    as_f32 = [t.to(torch.float32).contiguous() for t in (scores, labels, gains)]
    real = mask.to(torch.bool).contiguous()
    discounts = [t.to(torch.float32).contiguous() for t in (cut, full)]
    batch, length = as_f32[0].shape
    if any(t.shape != (batch, length) for t in (*as_f32, real)) or any(t.numel() != length + 1 for t in discounts):
        raise ValueError(f"scores, labels, gains, mask [B, L] and discounts [L + 1]; got {scores.shape}, {cut.shape}")
    grad = torch.zeros(batch, length)
    cost, count = torch.zeros(batch), torch.zeros(batch)
    options = (bool(unit), float(rho), float(delta), float(scale), float(sigma), int(top))
    inputs = (pointer(t) for t in (*as_f32, real, *discounts))
    outputs = (pointer(t) for t in (grad, cost, count))
    if library.ltr_logistic_pairs(batch, length, *inputs, *options, *outputs, torch.get_num_threads()) != 0:
        raise MemoryError("the LambdaRank CPU kernel could not allocate a query's buffers")
    return cost, grad, count
