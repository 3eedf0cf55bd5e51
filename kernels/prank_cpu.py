"""PRank / OAP stream on CPU as one C++ loop (``prank_cpu.cpp``), built once and cached.

Why it exists: on CPU the tensor path pays a dozen op dispatches per example whatever the
arithmetic; this loop keeps a block of perceptrons of one run in cache for the whole stream and
spreads the (run, block) items over the cores. Reference: the tensor path
``rankers.perceptron.PRankEnsemble(fused=False)``; parity tests in ``tests/kernels/``.

Build: ``python -m kernels.build`` compiles it ahead of time. Otherwise the first use compiles it
(about 30 s, announced on stderr) into ``torch.utils.cpp_extension``'s cache directory
(``TORCH_EXTENSIONS_DIR`` or ``~/.cache/torch_extensions``) under a name that carries the hash of
the source, the flags and the torch version: two versions of the source never share a build, and
a cached build is imported without calling the compiler. If no compiler (or ninja) is available,
``kernel()`` warns once and returns None, and callers run the tensor path.
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

SOURCE = Path(__file__).with_name("prank_cpu.cpp")
CFLAGS = ("-O3", "-fopenmp")
LDFLAGS = ("-fopenmp",)
COMPILE_MESSAGE = "compiling the PRank CPU kernel once (~30 s; `python -m kernels.build` does it ahead)..."

_KERNEL: ModuleType | None = None
_TRIED = False


def extension_name() -> str:
    """``ltr_prank_cpu_<hash>``: the hash covers the source, the flags and the torch version."""
    digest = hashlib.sha256()
    for part in (SOURCE.read_bytes(), " ".join(CFLAGS + LDFLAGS).encode(), torch.__version__.encode()):
        digest.update(part)
    return f"ltr_prank_cpu_{digest.hexdigest()[:12]}"


def build_directory() -> Path:
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory(extension_name(), verbose=False))


def library_path() -> Path:
    return build_directory() / f"{extension_name()}.so"


def is_built() -> bool:
    return library_path().is_file()


def _import_library(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(extension_name(), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile() -> ModuleType:
    from torch.utils.cpp_extension import load

    return load(
        name=extension_name(),
        sources=[str(SOURCE)],
        extra_cflags=list(CFLAGS),
        extra_ldflags=list(LDFLAGS),
        build_directory=str(build_directory()),
        verbose=False,
    )


def load_kernel() -> ModuleType:
    """Import the cached build, or compile it (saying so on stderr). Raises if it cannot be built."""
    if is_built():
        try:
            return _import_library(library_path())
        except ImportError:  # a stale or truncated build: compile again
            pass
    print(COMPILE_MESSAGE, file=sys.stderr, flush=True)
    start = time.perf_counter()
    module = _compile()
    print(f"PRank CPU kernel built in {time.perf_counter() - start:.0f} s: {library_path()}", file=sys.stderr)
    return module


def kernel() -> ModuleType | None:
    """The compiled module (``prank_stream``), or None (with one warning) where it cannot be built."""
    global _KERNEL, _TRIED
    if not _TRIED:
        _TRIED = True
        try:
            _KERNEL = load_kernel()
        except Exception as error:  # no compiler, no ninja, read-only cache: the tensor path still works
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
            warnings.warn(
                f"PRank CPU kernel unavailable, using the tensor path ({reason}); `python -m kernels.build` "
                "shows the whole error",
                stacklevel=2,
            )
            _KERNEL = None
    return _KERNEL


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
