"""The pairwise perceptron / Committee Perceptron stream on CPU as one C++ loop per run
(``pairwise_perceptron_cpu.cpp``), built once and cached like ``kernels.prank_cpu``.

Why it exists: on CPU the tensor path (``rankers.pairwise_perceptron.PairwisePerceptron``, the
reference) pays about twenty op dispatches per pair whatever the arithmetic; this loop does the
pair's few hundred flops and nothing else, one run per core. Parity test (bit-identical state):
``tests/rankers/test_committee_perceptron.py``.

Build: ``pip install -e .`` (``setup.py``), or the first use compiles it (announced on stderr); where
it comes from and the fallback without a compiler: ``kernels._native``.
"""

from __future__ import annotations

import ctypes

import torch

from kernels._native import KERNELS, NativeKernel, pointer

KERNEL = NativeKernel(KERNELS["pairwise_perceptron_cpu"])
ENTRY = {torch.float32: "ltr_pairwise_stream_f32", torch.float64: "ltr_pairwise_stream_f64"}
SIGNATURE = [ctypes.c_int64] * 4 + [ctypes.c_void_p] * 12 + [ctypes.c_int]
STATE = ("weights", "weighted_sum", "committee", "counts", "births", "successes", "hypotheses")


def kernel() -> ctypes.CDLL | None:
    """The loaded library (``ltr_pairwise_stream_f32`` / ``_f64``), or None (with one warning) where it
    cannot be built."""
    library = KERNEL.kernel()
    if library is not None:
        for name in ENTRY.values():
            getattr(library, name).argtypes = SIGNATURE
            getattr(library, name).restype = None
    return library


def stream(
    features: torch.Tensor,
    pairs: torch.Tensor,
    eta: torch.Tensor,
    order: torch.Tensor,
    state: dict[str, torch.Tensor],
) -> torch.Tensor:
    """Stream each run's pairs ``order [R, T]`` in place; returns the mistakes ``[R, T]`` bool.

    ``features [N, d]``, ``pairs [P, 2]`` (preferred document first), ``eta [P]``; ``state``: the
    learner's contiguous CPU tensors ``weights``, ``weighted_sum``, ``committee`` ``[R, K + 1, d]``,
    ``counts``, ``births``, ``successes``, ``hypotheses`` (see ``PairwisePerceptron``).
    """
    library = kernel()
    if library is None:
        raise RuntimeError("the pairwise perceptron CPU kernel is not available (see the warning above)")
    dtype = state["weights"].dtype
    if dtype not in ENTRY:
        raise ValueError(f"the pairwise perceptron CPU kernel streams float32 or float64, not {dtype}")
    features, eta = features.to(dtype).contiguous(), eta.to(dtype).contiguous()
    pairs, order = pairs.contiguous(), order.contiguous()
    mistakes = torch.empty(order.shape, dtype=torch.bool)
    runs, d = state["weights"].shape
    steps, slots = order.shape[1], state["committee"].shape[1]
    n_pairs = pairs.shape[0]
    shapes = {
        "features": (features, (features.shape[0], d), dtype),
        "pairs": (pairs, (n_pairs, 2), torch.int64),
        "eta": (eta, (n_pairs,), dtype),
        "order": (order, (runs, steps), torch.int64),
        "weights": (state["weights"], (runs, d), dtype),
        "weighted_sum": (state["weighted_sum"], (runs, d), dtype),
        "committee": (state["committee"], (runs, slots, d), dtype),
        "counts": (state["counts"], (runs, slots), torch.int64),
        "births": (state["births"], (runs, slots), torch.int64),
        "successes": (state["successes"], (runs,), torch.int64),
        "hypotheses": (state["hypotheses"], (runs,), torch.int64),
    }
    for name, (tensor, shape, kind) in shapes.items():
        if tuple(tensor.shape) != shape or tensor.dtype != kind or not tensor.is_contiguous():
            got = f"{tensor.dtype} {list(tensor.shape)}"
            raise ValueError(f"{name}: expected contiguous {kind} {list(shape)}, got {got}")
    if pairs.numel() and not 0 <= int(pairs.min()) <= int(pairs.max()) < features.shape[0]:
        raise ValueError("pairs index documents outside features")
    if order.numel() and not 0 <= int(order.min()) <= int(order.max()) < n_pairs:
        raise ValueError("order indexes pairs outside pairs")
    getattr(library, ENTRY[dtype])(
        runs, steps, d, slots - 1,
        *(pointer(tensor) for tensor in (features, pairs, eta, order)),
        *(pointer(state[name]) for name in STATE),
        pointer(mistakes),
        torch.get_num_threads(),
    )  # fmt: skip
    return mistakes
