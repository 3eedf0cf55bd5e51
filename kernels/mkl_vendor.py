"""MKL's AVX-512 kernels on AMD CPUs: ``activate()`` before torch is imported.

Why it exists: PyTorch's x86 wheels do float32 matmuls (``nn.Linear``, ``torch.mm``) in MKL, and MKL
asks ``mkl_serv_intel_cpu_true()`` before it picks a kernel: on an AMD CPU the answer is no and it
runs a generic AVX2 path, whatever the CPU supports. On the 2-core AMD EPYC (AVX-512) of
docs/benchmarks.md that is under half the rate MKL reaches with the shim, and below oneDNN's
(``python -m bench.mkl_vendor`` measures both ways in two processes). MKL's environment switches
(``MKL_ENABLE_INSTRUCTIONS``, ``MKL_CBWR``, ``MKL_DEBUG_CPU_TYPE``) changed nothing there.

How: ``kernels/mkl_vendor.cpp`` defines ``mkl_serv_intel_cpu_true`` to answer yes, and is opened
with ``RTLD_GLOBAL`` before libtorch is loaded, so libtorch's calls resolve to it (after torch is
imported the answer is already bound, and ``activate`` does nothing). MKL still chooses by the
features cpuid reports, so it runs only instructions the CPU has. Results are float32 matmuls
summed in another order: equal to a float64 product within float32 rounding, as before
(``tests/kernels/test_mkl_vendor.py``).

Where it runs: ``train.py`` and ``bench/train_throughput.py`` call ``activate()`` first; it applies
on Linux x86-64 AMD CPUs with AVX-512 (elsewhere MKL's own choice is already the CPU's best), and
``LTR_MKL_VENDOR_SHIM=0`` turns it off (``LTR_CPU_KERNELS`` does not: this is no kernel). While it is
active (loaded, and MKL's own ``mkl_serv_cpu_detect()`` reports a CPU-specific path), the oneDNN MLP
(``rankers.neural.onednn_mlp``) steps aside for MKL in reused buffers (``rankers.neural.mkl_mlp``):
MKL reads the transposed operands in place, and oneDNN's linear copies them first.

This module and ``kernels._native`` import nothing that loads torch.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from pathlib import Path

from kernels._native import KERNELS, NativeKernel

KERNEL = NativeKernel(KERNELS["mkl_vendor"])
_LOADED = False
_CONFIRMED: bool | None = None  # MKL's detection, read once torch is loaded


def amd_with_avx512(cpuinfo: str) -> bool:
    """Whether ``/proc/cpuinfo``'s text describes an AMD CPU with AVX-512 (``avx512f``)."""
    vendor, flags = None, set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id" and vendor is None:
            vendor = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return vendor == "AuthenticAMD" and "avx512f" in flags


def wanted() -> bool:
    """Whether this machine gains from it: Linux x86-64, AMD with AVX-512, not turned off."""
    if os.environ.get("LTR_MKL_VENDOR_SHIM", "1") == "0":
        return False
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return False
    try:
        return amd_with_avx512(Path("/proc/cpuinfo").read_text())
    except OSError:
        return False


def activate() -> bool:
    """Load the shim where it is wanted and torch is not imported yet; whether it is loaded now."""
    global _LOADED
    if _LOADED or not wanted() or "torch" in sys.modules:
        return _LOADED
    _LOADED = KERNEL.kernel() is not None  # without a compiler: a warning, and MKL as it was
    return _LOADED


def active() -> bool:
    """Whether this process's MKL takes its CPU-specific kernels through the shim: loaded, and (once
    torch is) MKL's own detection says so, since a torch build that binds the symbol internally, or
    has no MKL, would ignore it (and oneDNN's MLP should then keep running)."""
    global _CONFIRMED
    if not _LOADED:
        return False
    if _CONFIRMED is None and "torch" in sys.modules:
        _CONFIRMED = mkl_cpu_type() > 0
    return _CONFIRMED is not False


def mkl_cpu_type() -> int:
    """MKL's ``mkl_serv_cpu_detect()`` in the loaded libtorch: 0 for its generic path (any CPU it does
    not treat as Intel's), above 0 for a CPU-specific one (7: AVX-512); 0 where torch has no such MKL."""
    torch = sys.modules.get("torch")
    if torch is None:
        return 0
    try:
        detect = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so")).mkl_serv_cpu_detect
    except (OSError, AttributeError):
        return 0
    detect.restype = ctypes.c_int
    return int(detect())
