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


def kernel() -> ctypes.CDLL | None:
    """The loaded library (``ltr_prank_stream``), or None (with one warning) where it cannot be built."""
    library = KERNEL.kernel()
    if library is not None and library.ltr_prank_stream.argtypes is None:
        library.ltr_prank_stream.argtypes = SIGNATURE
        library.ltr_prank_stream.restype = None
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
