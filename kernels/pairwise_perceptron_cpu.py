"""The pairwise perceptron / Committee Perceptron stream on CPU as one C++ loop per run
(``pairwise_perceptron_cpu.cpp``), built once and cached like ``kernels.prank_cpu``.

Why it exists: on CPU the tensor path (``rankers.pairwise_perceptron.PairwisePerceptron``, the
reference) pays about twenty op dispatches per pair whatever the arithmetic; this loop does the
pair's few hundred flops and nothing else, one run per core. Parity test (bit-identical state):
``tests/rankers/test_committee_perceptron.py``.

Build: ``python -m kernels.build``, or the first use compiles it (announced on stderr) into
``torch.utils.cpp_extension``'s cache under a name carrying the hash of the source, the flags and
the torch version. Without a compiler ``kernel()`` warns once and returns None (the tensor path runs).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import time
import warnings
from pathlib import Path
from types import ModuleType

import torch

SOURCE = Path(__file__).with_name("pairwise_perceptron_cpu.cpp")
# no contraction into fused multiply-adds: the tensor path rounds each product and each sum
CFLAGS = ("-O3", "-ffp-contract=off")
NAME = "ltr_pairwise_perceptron_cpu"

_KERNEL: ModuleType | None = None
_TRIED = False


def extension_name() -> str:
    """``ltr_pairwise_perceptron_cpu_<hash>`` of the source, the flags and the torch version."""
    digest = hashlib.sha256()
    for part in (SOURCE.read_bytes(), " ".join(CFLAGS).encode(), torch.__version__.encode()):
        digest.update(part)
    return f"{NAME}_{digest.hexdigest()[:12]}"


def library_path() -> Path:
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory(extension_name(), verbose=False)) / f"{extension_name()}.so"


def is_built() -> bool:
    return library_path().is_file()


def load_kernel() -> ModuleType:
    """Import the cached build, or compile it (saying so on stderr). Raises if it cannot be built."""
    path = library_path()
    if path.is_file():
        try:
            spec = importlib.util.spec_from_file_location(extension_name(), path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        except ImportError:  # a stale or truncated build: compile again
            pass
    from torch.utils.cpp_extension import load

    print("compiling the pairwise perceptron CPU kernel (`python -m kernels.build` does it ahead)", file=sys.stderr)
    start = time.perf_counter()
    module = load(
        name=extension_name(),
        sources=[str(SOURCE)],
        extra_cflags=list(CFLAGS),
        build_directory=str(path.parent),
        verbose=False,
    )
    print(f"pairwise perceptron CPU kernel built in {time.perf_counter() - start:.0f} s: {path}", file=sys.stderr)
    return module


def kernel() -> ModuleType | None:
    """The compiled module (``pairwise_stream``), or None (with one warning) where it cannot be built."""
    global _KERNEL, _TRIED
    if not _TRIED:
        _TRIED = True
        try:
            _KERNEL = load_kernel()
        except Exception as error:  # no compiler, no ninja, read-only cache: the tensor path still works
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
            warnings.warn(f"pairwise perceptron CPU kernel unavailable, using the tensor path ({reason})", stacklevel=2)
    return _KERNEL


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
