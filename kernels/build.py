"""Build the C++ kernels ahead of time: ``python -m kernels.build`` (CI runs it before the tests).

Prints where each build lives and whether Triton (the CUDA kernels) is importable. Exits non-zero
if a C++ kernel cannot be built, so a missing compiler is loud here rather than a silent fallback
to the slower tensor path at run time.
"""

from __future__ import annotations

import sys
import time

from kernels import lambdarank_cpu, pairwise_perceptron_cpu, prank_cpu, prank_triton
from kernels._cpp import CppKernel


def _build(kernel: CppKernel) -> bool:
    start = time.perf_counter()
    cached = kernel.is_built()
    try:
        kernel.load_kernel()
    except Exception as error:
        print(f"{kernel.label}: build FAILED: {error}", file=sys.stderr)
        return False
    state = "cached" if cached else f"built in {time.perf_counter() - start:.0f} s"
    print(f"{kernel.label}: {state}: {kernel.library_path()}")
    return True


def main() -> int:
    kernels = (prank_cpu.KERNEL, pairwise_perceptron_cpu.KERNEL, lambdarank_cpu.KERNEL)
    built = [_build(kernel) for kernel in kernels]
    print(f"PRank Triton kernel: {prank_triton.status()}")
    return 0 if all(built) else 1


if __name__ == "__main__":
    sys.exit(main())
