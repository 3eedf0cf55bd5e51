"""Check (and if need be build) the C++ kernels: ``python -m kernels.build`` (CI runs it before the tests).

``pip install -e .`` builds them (``setup.py``); this says where each library comes from (the
package, the user cache, or built now into the cache) and whether Triton (the CUDA kernels) is
importable. Exits non-zero if a C++ kernel cannot be built, so a missing compiler is loud here
rather than a silent fallback to the slower tensor path at run time.

``python -m kernels.build --require-installed`` also fails if a library is not the one ``pip install``
built (CI: a compiler that setup.py could not use is an error there, not a silent build on first use).

``python -m kernels.build --triton-sm 90`` also compiles every Triton kernel for that CUDA compute
capability (90: H100/H200) with Triton's own toolchain, without a GPU, and prints what it produced.
"""

from __future__ import annotations

import argparse
import sys
import time

from kernels import (
    lambdarank_cpu,
    lambdarank_triton,
    mkl_vendor,
    mlp_cpu,
    pairwise_perceptron_cpu,
    prank_cpu,
    prank_triton,
)
from kernels._native import NativeKernel


def _build(kernel: NativeKernel, *, require_installed: bool = False) -> bool:
    start = time.perf_counter()
    try:
        kernel.load()
    except Exception as error:
        print(f"{kernel.label}: build FAILED: {error}", file=sys.stderr)
        return False
    print(f"{kernel.label}: {kernel.origin} ({time.perf_counter() - start:.1f} s)")
    if require_installed and not kernel.origin.startswith("package"):
        print(f"{kernel.label}: not built by `pip install -e .` (see its output with -v)", file=sys.stderr)
        return False
    return True


def _compile_triton(capability: int) -> bool:
    """Every Triton kernel (each variant) compiled for ``sm_<capability>``; False if one fails."""
    variants = {
        "PRank stream (d=6, k=5)": lambda: prank_triton.compile_for_gpu(capability),
        "pairwise losses, weighted (LambdaRank, LambdaLoss)": lambda: lambdarank_triton.compile_for_gpu(capability),
        "pairwise losses, unit (RankNet)": lambda: lambdarank_triton.compile_for_gpu(capability, unit=True),
    }
    ok = True
    for name, compile_one in variants.items():
        try:
            compiled = compile_one()
        except Exception as error:
            print(f"Triton {name}: sm_{capability} compile FAILED: {error}", file=sys.stderr)
            ok = False
            continue
        cubin, ptx = compiled.asm.get("cubin", b""), compiled.asm.get("ptx", "")
        print(
            f"Triton {name}: sm_{capability} cubin {len(cubin)} bytes, {len(ptx.splitlines())} PTX lines, "
            f"{compiled.metadata.shared} bytes shared memory"
        )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triton-sm", type=int, help="also compile the Triton kernels for this compute capability")
    parser.add_argument(
        "--require-installed", action="store_true", help="fail unless every C++ kernel is the one pip install built"
    )
    args = parser.parse_args()
    kernels = (
        prank_cpu.KERNEL,
        pairwise_perceptron_cpu.KERNEL,
        lambdarank_cpu.KERNEL,
        mlp_cpu.KERNEL,
        mkl_vendor.KERNEL,
    )
    built = [_build(kernel, require_installed=args.require_installed) for kernel in kernels]
    print(f"Triton kernels: {prank_triton.status()}")
    if args.triton_sm is not None:
        built.append(_compile_triton(args.triton_sm))
    return 0 if all(built) else 1


if __name__ == "__main__":
    sys.exit(main())
