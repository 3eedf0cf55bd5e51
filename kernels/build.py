"""Build the C++ kernels ahead of time: ``python -m kernels.build`` (CI runs it before the tests).

Prints where each build lives and whether Triton (the CUDA kernels) is importable. Exits non-zero
if a C++ kernel cannot be built, so a missing compiler is loud here rather than a silent fallback
to the slower tensor path at run time.
"""

from __future__ import annotations

import sys
import time

from kernels import pairwise_perceptron_cpu, prank_cpu, prank_triton


def main() -> int:
    start = time.perf_counter()
    cached = prank_cpu.is_built()
    try:
        prank_cpu.load_kernel()
    except Exception as error:
        print(f"PRank CPU kernel: build FAILED: {error}", file=sys.stderr)
        return 1
    state = "cached" if cached else f"built in {time.perf_counter() - start:.0f} s"
    print(f"PRank CPU kernel: {state}: {prank_cpu.library_path()}")
    print(f"PRank Triton kernel: {prank_triton.status()}")
    cached = pairwise_perceptron_cpu.is_built()
    try:
        pairwise_perceptron_cpu.load_kernel()
    except Exception as error:
        print(f"pairwise perceptron CPU kernel: build FAILED: {error}", file=sys.stderr)
        return 1
    state = "cached" if cached else "built"
    print(f"pairwise perceptron CPU kernel: {state}: {pairwise_perceptron_cpu.library_path()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
