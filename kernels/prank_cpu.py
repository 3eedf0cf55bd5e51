"""PRank / OAP stream on CPU as one C++ loop (``prank_cpu.cpp``), built once and cached.

Why it exists: on CPU the tensor path pays a dozen op dispatches per example whatever the
arithmetic; this loop keeps a block of perceptrons of one run in cache for the whole stream and
spreads the (run, block) items over the cores. Reference: the tensor path
``rankers.perceptron.PRankEnsemble(fused=False)``; parity tests in ``tests/kernels/``.

Build: ``python -m kernels.build`` compiles it ahead of time; otherwise the first use compiles it
(about 30 s, announced on stderr). Caching and the fallback without a compiler: ``kernels._cpp``.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import torch

from kernels._cpp import CppKernel

KERNEL = CppKernel(
    Path(__file__).with_name("prank_cpu.cpp"),
    prefix="ltr_prank_cpu",
    label="PRank CPU kernel",
    cflags=("-O3", "-fopenmp"),
    ldflags=("-fopenmp",),
)


def kernel() -> ModuleType | None:
    """The compiled module (``prank_stream``), or None (with one warning) where it cannot be built."""
    return KERNEL.kernel()


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
    module = kernel()
    if module is None:
        raise RuntimeError("the PRank CPU kernel is not available (see the warning above)")
    w, c = weights.contiguous(), thresholds.contiguous()
    module.prank_stream(x.contiguous(), y.contiguous(), presented.contiguous(), w, c, predictions, mistakes, correct)
    if w.data_ptr() != weights.data_ptr():
        weights.copy_(w)
    if c.data_ptr() != thresholds.data_ptr():
        thresholds.copy_(c)
