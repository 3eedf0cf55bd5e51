"""PRank / OAP stream on CPU as one C++ loop (``prank_cpu.cpp``), built once and cached.

Why it exists: on CPU the tensor path pays a dozen op dispatches per example whatever the
arithmetic; this loop keeps a block of perceptrons of one run in cache for the whole stream and
spreads the (run, block) items over the cores. Reference: the tensor path
``rankers.perceptron.PRankEnsemble(fused=False)``; parity tests in ``tests/kernels/``.

Build: ``pip install -e .`` compiles it (``setup.py``); a checkout used without installing compiles
it once on first use (a second, announced on stderr). Where it comes from, the source-hash check and
the fallback without a compiler: ``kernels._native``.
"""

from __future__ import annotations

import ctypes

import torch

from kernels._native import KERNELS, NativeKernel, pointer

KERNEL = NativeKernel(KERNELS["prank_cpu"])
_I64, _PTR = ctypes.c_int64, ctypes.c_void_p
SIGNATURE = [_I64] * 5 + [_PTR] * 6 + [_I64] * 3 + [_PTR] * 2 + [ctypes.c_int]


VOTED_SIGNATURE = [_I64] * 4 + [_PTR] * 7 + [ctypes.c_int]


def kernel() -> ctypes.CDLL | None:
    """The loaded library (``ltr_prank_stream``, ``ltr_prank_voted``), or None (with one warning)
    where it cannot be built."""
    library = KERNEL.kernel()
    if library is not None and library.ltr_prank_stream.argtypes is None:
        library.ltr_prank_stream.argtypes = SIGNATURE
        library.ltr_prank_stream.restype = None
        library.ltr_prank_voted.argtypes = VOTED_SIGNATURE
        library.ltr_prank_voted.restype = None
    return library


def stream(
    x: torch.Tensor,
    y: torch.Tensor,
    presented: torch.Tensor,
    weights: torch.Tensor,
    thresholds: torch.Tensor,
    predictions: torch.Tensor,
    mistakes: torch.Tensor,
    correct: torch.Tensor,
) -> None:
    """Stream one chunk in place (the contract shared with ``kernels.prank_triton.stream``).

    Args:
        x: ``[R, T, d]`` float32; y: ``[R, T]`` long, 0-based ranks.
        presented: ``[T, R, N]`` bool, Algorithm 2's Bernoulli draws (True = the perceptron sees it).
        weights: ``[R, N, d]`` float32 and thresholds ``[R, N, k-1]`` float32, updated in place.
        predictions: ``[R, N, T]`` long (any strides), written with the rank each perceptron
            predicted before its update.
        mistakes, correct: ``[R, N]`` float32, incremented by the presented examples it
            mispredicted / predicted right.
    """
    library = kernel()
    if library is None:
        raise RuntimeError("the PRank CPU kernel is not available (see the warning above)")
    w, c = weights.contiguous(), thresholds.contiguous()
    x, y, presented = x.contiguous(), y.contiguous(), presented.contiguous()
    r, n, d = w.shape
    k, t = c.shape[2], x.shape[1]
    _check(x, (r, t, d), torch.float32, "x")
    _check(y, (r, t), torch.int64, "y")
    _check(presented, (t, r, n), torch.bool, "presented")
    _check(c, (r, n, k), torch.float32, "thresholds")
    _check(w, (r, n, d), torch.float32, "weights")
    _check(predictions, (r, n, t), torch.int64, "predictions", contiguous=False)
    for name, counter in (("mistakes", mistakes), ("correct", correct)):
        _check(counter, (r, n), torch.float32, name)
    arrays = (pointer(tensor) for tensor in (x, y, presented, w, c, predictions))
    counters = (pointer(mistakes), pointer(correct))
    library.ltr_prank_stream(r, n, d, k, t, *arrays, *predictions.stride(), *counters, torch.get_num_threads())
    if w.data_ptr() != weights.data_ptr():
        weights.copy_(w)
    if c.data_ptr() != thresholds.data_ptr():
        thresholds.copy_(c)


def _check(tensor: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype, name: str, *, contiguous: bool = True):
    """The C loop trusts its pointers: refuse what would make it read or write out of bounds."""
    if tuple(tensor.shape) != shape or tensor.dtype != dtype or tensor.device.type != "cpu":
        raise ValueError(f"{name}: expected {dtype} {list(shape)} on the CPU, got {tensor.dtype} {list(tensor.shape)}")
    if contiguous and not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous")


def voted(
    weights: torch.Tensor,
    thresholds: torch.Tensor,
    survival: torch.Tensor,
    run: torch.Tensor,
    row: torch.Tensor,
    xt: torch.Tensor,
    total: torch.Tensor,
) -> None:
    """Add the voted perceptron's votes of M stored hypotheses to ``total`` in place.

    ``weights [M, d]``, ``thresholds [M, k-1]``, ``survival [M]`` (the votes), ``run [M]`` (whose
    test points each hypothesis ranks, given feature-major: ``xt [R, d, T]`` float32 contiguous,
    i.e. ``x.transpose(1, 2).contiguous()`` once for all calls) and ``row [M]`` (the row of
    ``total [rows, T]`` float64 it votes in): ``total[row[m], t] += survival[m] * rank_m(x[run[m],
    t])``, ranks counted as ``rank_of`` does. The reference is the tensor path of
    ``PRankEnsemble.mean_rank(..., "voted")`` with ``fused=False``.
    """
    library = kernel()
    if library is None:
        raise RuntimeError("the PRank CPU kernel is not available (see the warning above)")
    weights, thresholds = weights.to(torch.float32).contiguous(), thresholds.to(torch.float32).contiguous()
    survival, run, row = (t.contiguous() for t in (survival.double(), run.long(), row.long()))
    m, d = weights.shape
    runs, t = xt.shape[0], xt.shape[2]
    _check(thresholds, (m, thresholds.shape[1]), torch.float32, "thresholds")
    _check(xt, (runs, d, t), torch.float32, "xt")
    _check(total, (total.shape[0], t), torch.float64, "total")
    for name, index, size in (("survival", survival, None), ("run", run, runs), ("row", row, total.shape[0])):
        if index.shape != (m,):
            raise ValueError(f"{name} must be [M={m}], got {list(index.shape)}")
        if size is not None and m and not 0 <= int(index.min()) <= int(index.max()) < size:
            raise ValueError(f"{name} must index 0..{size - 1}")
    arrays = (pointer(tensor) for tensor in (weights, thresholds, survival, run, row, xt, total))
    library.ltr_prank_voted(m, t, d, thresholds.shape[1], *arrays, torch.get_num_threads())
