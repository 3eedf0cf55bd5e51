"""PRank / OAP stream on CUDA as one Triton kernel: each program owns a block of perceptrons of one
run and streams every example of the chunk with their weights and thresholds in registers.

Why it exists: the stream is sequential, so the tensor path launches about a dozen kernels per
example (hundreds of thousands for Harrington's Table 1); this kernel launches once per chunk and
never leaves the chip between examples. Reference: the tensor path
``rankers.perceptron.PRankEnsemble(fused=False)`` (and the scalar Algorithm 1 of the tests);
parity tests in ``tests/kernels/`` run it on CPU through Triton's interpreter
(``TRITON_INTERPRET=1``) and on CUDA when present.

Same contract as ``kernels.prank_cpu.stream``: R runs each with its own stream ``x [R, T, d]``,
``y [R, T]`` and Bernoulli draws ``presented [T, R, N]``; any d (padded to a power of two in
registers, so a block holds ``BLOCK_N * next_pow2(d)`` weights: meant for d up to a few thousand).
"""

import torch

from kernels._triton import TritonKernel, interpret_requested, tl, triton
from kernels._triton import available as available  # re-exported: callers ask the kernel's module
from kernels._triton import status as status


def _prank_stream_kernel(
    x_ptr,
    y_ptr,
    shown_ptr,
    w_ptr,
    c_ptr,
    out_ptr,
    missed_ptr,
    right_ptr,
    T,
    N,
    D,
    K,
    sx_r,
    sx_t,
    sy_r,
    sh_t,
    sh_r,
    sw_r,
    sw_n,
    sw_d,
    sc_r,
    sc_n,
    sc_k,
    so_r,
    so_n,
    so_t,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # Algorithm 1 (Crammer & Singer) for perceptrons [first, first + BLOCK_N) of run `run`.
    # Sums are tl.reduce with tl.sum's combine function: the same code once compiled, and Triton's
    # interpreter runs it as one numpy sum instead of a nested jit call per use (100x faster there).
    run = tl.program_id(0).to(tl.int64)  # 64-bit offsets: R * N * T exceeds 2^31 at Table 2's size
    n = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    j = tl.arange(0, BLOCK_D)
    q = tl.arange(0, BLOCK_K)
    n_ok, j_ok, q_ok = n < N, j < D, q < K
    w_at = w_ptr + run * sw_r + n[:, None] * sw_n + j[None, :] * sw_d
    c_at = c_ptr + run * sc_r + n[:, None] * sc_n + q[None, :] * sc_k
    w = tl.load(w_at, mask=n_ok[:, None] & j_ok[None, :], other=0.0)
    c = tl.load(c_at, mask=n_ok[:, None] & q_ok[None, :], other=0.0)
    missed = tl.full([BLOCK_N], 0.0, tl.float32)
    right = tl.full([BLOCK_N], 0.0, tl.float32)
    x_run = x_ptr + run * sx_r
    y_run = y_ptr + run * sy_r
    shown_run = shown_ptr + run * sh_r + n
    out_run = out_ptr + run * so_r + n * so_n
    # example t+1 is loaded while t is computed: its loads do not depend on the state
    x = tl.load(x_run + j, mask=j_ok, other=0.0)
    label = tl.load(y_run).to(tl.int32)
    shown = tl.load(shown_run, mask=n_ok, other=0) != 0
    for t in range(0, T):
        ahead = tl.minimum(t + 1, T - 1)
        x_next = tl.load(x_run + ahead * sx_t + j, mask=j_ok, other=0.0)
        label_next = tl.load(y_run + ahead).to(tl.int32)
        shown_next = tl.load(shown_run + ahead * sh_t, mask=n_ok, other=0) != 0

        score = tl.reduce(w * x[None, :], 1, tl.standard._sum_combine)  # [BLOCK_N], as tl.sum
        margin = score[:, None] - c  # [BLOCK_N, BLOCK_K]
        # thresholds stay ordered (Lemma 1): the rank is the count of thresholds <= score
        predicted = tl.reduce(((margin >= 0.0) & q_ok[None, :]).to(tl.int32), 1, tl.standard._sum_combine)
        tl.store(out_run + t * so_t, predicted.to(tl.int64), mask=n_ok)
        mistake = shown & (predicted != label)
        missed += mistake.to(tl.float32)
        right += (shown & (predicted == label)).to(tl.float32)
        sign = tl.where(q[None, :] >= label, -1.0, 1.0)  # l(r) = -1 where y <= r (line 4)
        step = tl.where((margin * sign <= 0.0) & mistake[:, None] & q_ok[None, :], sign, 0.0)  # a(r), lines 6-8
        c = c - step
        w = w + tl.reduce(step, 1, tl.standard._sum_combine)[:, None] * x[None, :]

        x, label, shown = x_next, label_next, shown_next
    tl.store(w_at, w, mask=n_ok[:, None] & j_ok[None, :])
    tl.store(c_at, c, mask=n_ok[:, None] & q_ok[None, :])
    counter = run * N + n
    tl.store(missed_ptr + counter, tl.load(missed_ptr + counter, mask=n_ok, other=0.0) + missed, mask=n_ok)
    tl.store(right_ptr + counter, tl.load(right_ptr + counter, mask=n_ok, other=0.0) + right, mask=n_ok)


_kernel = TritonKernel(_prank_stream_kernel)


def _pow2(value: int) -> int:
    return max(2, 1 << max(0, value - 1).bit_length())


def launch_config(n: int, d: int, k: int) -> dict[str, int]:
    """Block sizes and warps: up to 32 perceptrons a program (more programs when R is small),
    fewer for wide d so a block's weights (``BLOCK_N * BLOCK_D``) stay near 4K registers.
    A starting point, not tuned on hardware (``bench/perceptron.py --sweep`` times others)."""
    block_d, block_k = _pow2(d), _pow2(k - 1)
    block_n = max(2, min(_pow2(n), 32, _pow2(max(1, 4096 // block_d))))
    warps = max(1, min(8, block_n * block_d // 256))
    return {"BLOCK_N": block_n, "BLOCK_D": block_d, "BLOCK_K": block_k, "num_warps": warps}


def compile_for_gpu(capability: int = 90, d: int = 6, k: int = 5):
    """Compile ahead of time for a CUDA compute capability with Triton's toolchain, no GPU needed
    (``python -m kernels.build --triton-sm 90``), at ``launch_config``'s blocks for N=100, d, k."""
    config = launch_config(100, d, k)
    config.pop("num_warps")
    pointers = {"x_ptr": "*fp32", "y_ptr": "*i64", "shown_ptr": "*u8", "w_ptr": "*fp32", "c_ptr": "*fp32"}
    pointers |= {"out_ptr": "*i64", "missed_ptr": "*fp32", "right_ptr": "*fp32"}
    sizes = [
        "T",
        "N",
        "D",
        "K",
        "sx_r",
        "sx_t",
        "sy_r",
        "sh_t",
        "sh_r",
        "sw_r",
        "sw_n",
        "sw_d",
        "sc_r",
        "sc_n",
        "sc_k",
        "so_r",
        "so_n",
        "so_t",
    ]
    signature = {**pointers, **dict.fromkeys(sizes, "i32"), **dict.fromkeys(config, "constexpr")}
    return _kernel.compile_for(signature, config, capability)


def stream(
    x: torch.Tensor,
    y: torch.Tensor,
    presented: torch.Tensor,
    weights: torch.Tensor,
    thresholds: torch.Tensor,
    predictions: torch.Tensor,
    mistakes: torch.Tensor,
    correct: torch.Tensor,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> None:
    """Stream one chunk in place; the arguments are those of ``kernels.prank_cpu.stream``.

    ``weights`` and ``predictions`` may have any strides (the ensemble stores weights d-major).
    ``block_n`` / ``num_warps`` override ``launch_config`` (for sweeps).
    """
    if triton is None:
        raise RuntimeError("triton is not installed")
    runs, steps, d = x.shape
    n, k_minus_1 = thresholds.shape[1], thresholds.shape[2]
    if steps == 0:
        return
    x = x if x.stride(2) == 1 else x.contiguous()
    y = y if y.stride(1) == 1 else y.contiguous()
    presented = presented.contiguous().view(torch.uint8)
    if not (mistakes.is_contiguous() and correct.is_contiguous()):
        raise ValueError("the counters must be contiguous")
    config = launch_config(n, d, k_minus_1 + 1)
    if block_n is not None:
        config["BLOCK_N"] = block_n
    if num_warps is not None:
        config["num_warps"] = num_warps
    interpret = x.device.type == "cpu" or interpret_requested()
    if interpret:  # the interpreter ignores launch options
        config.pop("num_warps")
    grid = (runs, triton.cdiv(n, config["BLOCK_N"]))
    _kernel(interpret)[grid](
        x,
        y,
        presented,
        weights,
        thresholds,
        predictions,
        mistakes,
        correct,
        steps,
        n,
        d,
        k_minus_1,
        x.stride(0),
        x.stride(1),
        y.stride(0),
        presented.stride(0),
        presented.stride(1),
        weights.stride(0),
        weights.stride(1),
        weights.stride(2),
        thresholds.stride(0),
        thresholds.stride(1),
        thresholds.stride(2),
        predictions.stride(0),
        predictions.stride(1),
        predictions.stride(2),
        **config,
    )
