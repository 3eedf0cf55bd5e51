"""What every Triton kernel here shares: the optional import, the interpreter switch, a launcher that
compiles for CUDA or runs in Triton's interpreter, and an ahead-of-time compile for a GPU target.

``TRITON_INTERPRET=1`` runs a kernel on CPU tensors (the CI tests); without Triton installed the
kernels are unavailable and their callers keep to the tensor path.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the C++ loops and the tensor paths still run
    triton = None

    class tl:  # stands in for triton.language so the kernels' annotations evaluate
        constexpr = None


def interpret_requested() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def available(device: torch.device) -> bool:
    """Triton is installed and can run on ``device``: CUDA, or CPU under ``TRITON_INTERPRET=1``."""
    if triton is None:
        return False
    return device.type == "cuda" or (device.type == "cpu" and interpret_requested())


def status() -> str:
    if triton is None:
        return "triton not installed (CUDA runs take the tensor path)"
    where = "CUDA" if torch.cuda.is_available() else "no CUDA device here; TRITON_INTERPRET=1 runs it on CPU"
    return f"triton {triton.__version__} ({where})"


class TritonKernel:
    """A ``@triton.jit``-able function, compiled for the GPU or run by the interpreter (built once each)."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        self._built: dict[bool, object] = {}

    def __call__(self, interpret: bool):
        """The launchable kernel (``kernel(interpret)[grid](...)``)."""
        if triton is None:
            raise RuntimeError("triton is not installed")
        if interpret not in self._built:
            if interpret:
                from triton.runtime.interpreter import InterpretedFunction

                self._built[interpret] = InterpretedFunction(self.fn)
            else:
                from triton.runtime.jit import JITFunction

                self._built[interpret] = JITFunction(self.fn)
        return self._built[interpret]

    def compile_for(self, signature: dict[str, str], constexprs: dict[str, object], capability: int = 90):
        """Compile ahead of time for a CUDA compute capability (90: H100/H200) with Triton's own
        toolchain, no GPU needed; returns the compiled kernel (``.asm`` holds ``ptx`` and ``cubin``)."""
        if triton is None:
            raise RuntimeError("triton is not installed")
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from triton.runtime.jit import JITFunction

        source = ASTSource(fn=JITFunction(self.fn), signature=signature, constexprs=constexprs)
        return triton.compile(source, target=GPUTarget("cuda", capability, 32))
