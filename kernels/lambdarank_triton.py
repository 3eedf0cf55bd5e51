"""The logistic pairwise losses (RankNet, LambdaRank, LambdaLoss) on CUDA as one Triton kernel that
tiles the pairs and never stores them.

Why it exists: the tensor path of ``losses.pairwise.pairwise_sums`` writes about ten ``[B, rows, L]``
temporaries per block (difference, sign, softplus, sigmoid, weight, products) and reads them back;
for long lists that traffic, not the arithmetic, is the cost. Here a program owns ``BLOCK_I`` ranked
rows of one query, walks the columns in ``BLOCK_J`` tiles, computes each pair's cost and push in
registers, sums the rows' pushes in registers and adds the columns' into the gradient with atomics:
forward and backward in one pass, O(B·L) memory, O(B·min(k, L)·L) work. Reference: the tensor path
(same pairs, weights and formulas as ``kernels.lambdarank_cpu``); parity tests in
``tests/kernels/test_lambdarank_triton.py`` run it on CPU through Triton's interpreter
(``TRITON_INTERPRET=1``) and on CUDA when present.

Inputs are ranked by score (``sort_by_scores``: real documents first), as the tensor path ranks them.
The scaffold uses it for the pair functions and weights ``losses.pairwise.fused_weighting`` names
(RankNet, LambdaRank, LambdaLoss's three schemes) on float32 CUDA tensors outside autograd and
``torch.compile``; ``LTR_TRITON_KERNELS=0`` turns it off. Untested on GPU hardware so far (no
session had one): the interpreter parity tests pass, it compiles for sm_90, and ``pytest -m gpu``
checks it on the first GPU.
"""

from __future__ import annotations

import os
import warnings

import torch
from torch import Tensor

from kernels._triton import TritonKernel, interpret_requested, tl, triton
from kernels._triton import available as available  # re-exported: callers ask the kernel's module


def _logistic_pairs_kernel(
    s_ptr,
    y_ptr,
    g_ptr,
    n_ptr,
    cut_ptr,
    full_ptr,
    inv_ptr,
    grad_ptr,
    cost_ptr,
    count_ptr,
    L,
    top,
    sigma,
    rho,
    delta,
    scale,
    UNIT: tl.constexpr,
    BLOCK_I: tl.constexpr,
    BLOCK_J: tl.constexpr,
):
    # rows [first, first + BLOCK_I) of query `b`, every column j > i of the query's n real documents
    b = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    n = tl.load(n_ptr + b).to(tl.int32)
    row_ok = rows < tl.minimum(n, top)
    base = b * L
    s_i = tl.load(s_ptr + base + rows, mask=row_ok, other=0.0)
    y_i = tl.load(y_ptr + base + rows, mask=row_ok, other=0.0)
    g_i = tl.load(g_ptr + base + rows, mask=row_ok, other=0.0)
    cut_i = tl.load(cut_ptr + rows, mask=row_ok, other=0.0)
    inverse_ideal = tl.load(inv_ptr + b)
    row_push = tl.full([BLOCK_I], 0.0, tl.float32)
    row_cost = tl.full([BLOCK_I], 0.0, tl.float32)
    row_count = tl.full([BLOCK_I], 0.0, tl.float32)
    for start in range(0, L, BLOCK_J):
        cols = start + tl.arange(0, BLOCK_J)
        col_ok = cols < n
        s_j = tl.load(s_ptr + base + cols, mask=col_ok, other=0.0)
        y_j = tl.load(y_ptr + base + cols, mask=col_ok, other=0.0)
        pair = row_ok[:, None] & col_ok[None, :] & (cols[None, :] > rows[:, None])
        gap = y_i[:, None] - y_j[None, :]
        sign = tl.where(pair, (gap > 0.0).to(tl.float32) - (gap < 0.0).to(tl.float32), 0.0)
        x = sign * sigma * (s_i[:, None] - s_j[None, :])
        e = tl.exp(-tl.abs(x))
        softplus_minus_x = tl.maximum(-x, 0.0) + tl.log(1.0 + e)
        sigmoid_minus_x = tl.where(x >= 0.0, e, 1.0) / (1.0 + e)
        weight = tl.abs(sign)
        if not UNIT:
            g_j = tl.load(g_ptr + base + cols, mask=col_ok, other=0.0)
            cut_j = tl.load(cut_ptr + cols, mask=col_ok, other=0.0)
            # LambdaLoss's delta: |D_{j-i-1} - D_{j-i}| over the rank gap (only pairs with j > i count)
            apart = tl.maximum(cols[None, :] - rows[:, None], 1)
            near = tl.load(full_ptr + apart - 1, mask=pair, other=0.0)
            far = tl.load(full_ptr + apart, mask=pair, other=0.0)
            position = rho * tl.abs(cut_i[:, None] - cut_j[None, :]) + delta * tl.abs(near - far)
            weight = weight * tl.abs(g_i[:, None] - g_j[None, :]) * inverse_ideal * position
        push = -scale * sigmoid_minus_x * weight * sign * sigma
        row_cost += tl.reduce(scale * weight * softplus_minus_x, 1, tl.standard._sum_combine)
        row_push += tl.reduce(push, 1, tl.standard._sum_combine)
        row_count += tl.reduce(tl.abs(sign), 1, tl.standard._sum_combine)
        tl.atomic_add(grad_ptr + base + cols, -tl.reduce(push, 0, tl.standard._sum_combine), mask=col_ok)
    tl.atomic_add(grad_ptr + base + rows, row_push, mask=row_ok)
    tl.atomic_add(cost_ptr + b, tl.reduce(row_cost, 0, tl.standard._sum_combine))
    tl.atomic_add(count_ptr + b, tl.reduce(row_count, 0, tl.standard._sum_combine))


_kernel = TritonKernel(_logistic_pairs_kernel)


_FAILED: list[str] = []  # the first launch error, after which the scaffold keeps to the tensor path


def enabled() -> bool:
    """Whether the pairwise scaffold may use the kernel on CUDA (``LTR_TRITON_KERNELS=0`` says no,
    and so does a launch that failed once)."""
    return os.environ.get("LTR_TRITON_KERNELS", "1") != "0" and not _FAILED


def try_logistic_pairs(*args, **kwargs) -> tuple[Tensor, Tensor, Tensor] | None:
    """``logistic_pairs``, or None (warning once, then never again) if the kernel fails to compile
    or launch, so that a training run falls back to the tensor path instead of stopping."""
    try:
        return logistic_pairs(*args, **kwargs)
    except Exception as error:  # a Triton / driver version this kernel was never compiled with
        _FAILED.append(f"{type(error).__name__}: {error}"[:300])
        warnings.warn(f"pairwise Triton kernel failed, using the tensor path: {_FAILED[0]}", stacklevel=2)
        return None


def compile_for_gpu(capability: int = 90, *, unit: bool = False, block_i: int = 16, block_j: int = 64):
    """Compile ahead of time for a CUDA compute capability with Triton's toolchain, no GPU needed
    (``python -m kernels.build --triton-sm 90``); ``unit``: RankNet's variant."""
    pointers = dict.fromkeys(("s_ptr", "y_ptr", "g_ptr"), "*fp32") | {"n_ptr": "*i32"}
    pointers |= dict.fromkeys(("cut_ptr", "full_ptr", "inv_ptr", "grad_ptr", "cost_ptr", "count_ptr"), "*fp32")
    scalars = {"L": "i32", "top": "i32"} | dict.fromkeys(("sigma", "rho", "delta", "scale"), "fp32")
    constexprs = {"UNIT": unit, "BLOCK_I": block_i, "BLOCK_J": block_j}
    signature = {**pointers, **scalars, **dict.fromkeys(constexprs, "constexpr")}
    return _kernel.compile_for(signature, constexprs, capability)


def logistic_pairs(
    scores: Tensor,
    labels: Tensor,
    gains: Tensor,
    lengths: Tensor,
    cut: Tensor,
    full: Tensor,
    inverse_ideal: Tensor,
    *,
    unit: bool,
    rho: float,
    delta: float,
    scale: float,
    sigma: float,
    top: int,
    block_i: int = 16,
    block_j: int = 64,
    num_warps: int = 4,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(cost [B], grad [B, L], count [B])`` in ranked order.

    ``scores, labels, gains [B, L]`` ranked by score with the ``lengths [B]`` real documents first;
    ``cut`` / ``full`` ``[L + 1]`` the discounts with / without the cut at k; ``inverse_ideal [B]``;
    pairs have a row among the first ``top`` ranks. Weights as ``kernels.lambdarank_cpu.logistic_pairs``
    (``unit``: RankNet; else ``rho``, ``delta``), ``scale`` on cost and lambdas. Block sizes and warps
    are a starting point, not tuned on hardware.
    """
    if triton is None:
        raise RuntimeError("triton is not installed")
    batch, length = scores.shape
    as_f32 = [t.to(torch.float32).contiguous() for t in (scores, labels, gains)]
    grad = torch.zeros_like(as_f32[0])
    cost = torch.zeros(batch, dtype=torch.float32, device=scores.device)
    count = torch.zeros_like(cost)
    rows = max(1, min(top, length))
    grid = (batch, triton.cdiv(rows, block_i))
    interpret = scores.device.type == "cpu" or interpret_requested()
    options = {"UNIT": bool(unit), "BLOCK_I": block_i, "BLOCK_J": block_j}
    if not interpret:  # the interpreter ignores launch options
        options["num_warps"] = num_warps
    _kernel(interpret)[grid](
        *as_f32,
        lengths.to(torch.int32).contiguous(),
        cut.to(torch.float32).contiguous(),
        full.to(torch.float32).contiguous(),
        inverse_ideal.to(torch.float32).contiguous(),
        grad,
        cost,
        count,
        length,
        int(top),
        float(sigma),
        float(rho),
        float(delta),
        float(scale),
        **options,
    )
    return cost, grad, count
