"""The pairwise perceptron / Committee Perceptron stream on CPU as one C++ loop per run
(``pairwise_perceptron_cpu.cpp``), built once and cached like ``kernels.prank_cpu``.

Why it exists: on CPU the tensor path (``rankers.pairwise_perceptron.PairwisePerceptron``, the
reference) pays about twenty op dispatches per pair whatever the arithmetic; this loop does the
pair's few hundred flops and nothing else, one run per core. Parity test (bit-identical state):
``tests/rankers/test_committee_perceptron.py``.

Build: ``python -m kernels.build``, or the first use compiles it (announced on stderr); caching and
the fallback without a compiler: ``kernels._cpp``.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import torch

from kernels._cpp import CppKernel

KERNEL = CppKernel(
    Path(__file__).with_name("pairwise_perceptron_cpu.cpp"),
    prefix="ltr_pairwise_perceptron_cpu",
    label="pairwise perceptron CPU kernel",
    # no contraction into fused multiply-adds: the tensor path rounds each product and each sum;
    # -fopenmp: without it at::parallel_for runs the runs one after another on one thread
    cflags=("-O3", "-ffp-contract=off", "-fopenmp"),
    ldflags=("-fopenmp",),
)


def kernel() -> ModuleType | None:
    """The compiled module (``pairwise_stream``), or None (with one warning) where it cannot be built."""
    return KERNEL.kernel()


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
    module = kernel()
    if module is None:
        raise RuntimeError("the pairwise perceptron CPU kernel is not available (see the warning above)")
    mistakes = torch.empty(order.shape, dtype=torch.bool)
    dtype = state["weights"].dtype
    module.pairwise_stream(
        features.to(dtype).contiguous(),
        pairs.contiguous(),
        eta.to(dtype).contiguous(),
        order.contiguous(),
        *(state[name] for name in ("weights", "weighted_sum", "committee", "counts", "births")),
        state["successes"],
        state["hypotheses"],
        mistakes,
    )
    return mistakes
