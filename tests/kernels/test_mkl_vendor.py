"""kernels.mkl_vendor: where it applies, that it acts only before torch loads, and that MKL's
AVX-512 kernels it unlocks compute the same products (against float64, in a fresh process)."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from kernels import mkl_vendor
from kernels._native import NativeKernel

ROOT = Path(__file__).resolve().parents[2]

AMD = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n"
INTEL = "vendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n"
AMD_AVX2 = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 fma\n"


@pytest.mark.parametrize(("cpuinfo", "expected"), [(AMD, True), (INTEL, False), (AMD_AVX2, False), ("", False)])
def test_it_applies_to_amd_cpus_with_avx512_only(cpuinfo, expected):
    assert mkl_vendor.amd_with_avx512(cpuinfo) is expected


def test_it_is_off_when_the_environment_says_so(monkeypatch):
    monkeypatch.setenv("LTR_MKL_VENDOR_SHIM", "0")
    assert not mkl_vendor.wanted()


def test_it_does_nothing_once_torch_is_loaded(monkeypatch):
    import torch  # noqa: F401  (loaded here, as in every test process)

    monkeypatch.setattr(mkl_vendor, "wanted", lambda: True)  # on any CPU: the torch check is what refuses
    assert not mkl_vendor.activate()
    assert not mkl_vendor.active()


def test_the_shim_answers_that_the_cpu_may_run_mkls_intel_paths():
    library = mkl_vendor.KERNEL.load()
    library.mkl_serv_intel_cpu_true.restype = ctypes.c_int
    assert library.mkl_serv_intel_cpu_true() == 1


@pytest.mark.parametrize(("mkl_took_it", "onednn_runs"), [(True, False), (False, True)])
def test_onednn_steps_aside_only_where_mkl_took_the_shims_answer(monkeypatch, mkl_took_it, onednn_runs):
    from rankers.neural import onednn_mlp

    if not onednn_mlp.available():
        pytest.skip("no oneDNN linear op in this torch build")
    monkeypatch.delenv("LTR_CPU_KERNELS", raising=False)
    assert onednn_mlp.enabled()  # this process loaded torch first: no shim
    monkeypatch.setattr(mkl_vendor, "_LOADED", True)
    monkeypatch.setattr(mkl_vendor, "_CONFIRMED", None)
    monkeypatch.setattr(mkl_vendor, "mkl_cpu_type", lambda: 7 if mkl_took_it else 0)
    assert onednn_mlp.enabled() is onednn_runs


# A fresh process: activate() first, then torch; every product an MLP's training makes (the forward,
# the weight gradient g^T h from transposed views, the input gradient) against float64.
PRODUCTS = """
import json, sys
from kernels import mkl_vendor
from kernels._native import NativeKernel
active = mkl_vendor.activate()
import torch
from rankers.neural import onednn_mlp
torch.manual_seed(0)
errors = {}
for n, i, o in [(6286, 136, 256), (6286, 256, 128), (333, 64, 1), (2048, 2048, 2048)]:
    h, w, g = torch.randn(n, i), torch.randn(o, i), torch.randn(n, o)
    products = {
        "forward h W^T": (torch.nn.functional.linear(h, w), h.double() @ w.double().T),
        "weight gradient g^T h": (g.t() @ h, g.double().T @ h.double()),
        "input gradient g W": (g @ w, g.double() @ w.double()),
    }
    for name, (value, exact) in products.items():
        scale = exact.abs().max().item()
        errors[f"{name} {n}x{i}x{o}"] = (value.double() - exact).abs().max().item() / scale
backends = {"onednn": onednn_mlp.enabled(), "available": onednn_mlp.available()}
backends["mkl_cpu_type"] = mkl_vendor.mkl_cpu_type()
print(json.dumps({"active": active and mkl_vendor.active(), **backends, "errors": errors}))
"""


def _last_line(script: str, **env: str) -> str:
    """The last line a fresh interpreter prints running ``script`` from the repository root
    (``LTR_CPU_KERNELS`` not inherited: the backends are what these tests look at)."""
    inherited = {name: value for name, value in os.environ.items() if name != "LTR_CPU_KERNELS"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**inherited, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def _products(**env: str) -> dict:
    return json.loads(_last_line(PRODUCTS, **env))


@pytest.mark.skipif(not mkl_vendor.wanted(), reason="not an AMD CPU with AVX-512: MKL's own choice is its best here")
def test_mkls_avx512_kernels_compute_the_same_products():
    shim, plain = _products(), _products(LTR_MKL_VENDOR_SHIM="0")
    assert shim["active"] and not plain["active"]
    assert shim["mkl_cpu_type"] > 0 and plain["mkl_cpu_type"] == 0  # MKL's own detection: the shim took
    assert not shim["onednn"] and plain["onednn"] == plain["available"]  # oneDNN steps aside only with the shim
    for name, error in shim["errors"].items():
        # float32 products of these sizes: relative to the largest entry, within float32's rounding
        assert error < 2e-6, (name, error, plain["errors"][name])


@pytest.mark.skipif(not mkl_vendor.wanted(), reason="not an AMD CPU with AVX-512")
def test_train_py_activates_it_before_torch_loads():
    assert _last_line("import train\nfrom kernels import mkl_vendor\nprint(mkl_vendor.active())") == "True"


def test_without_a_compiler_or_a_build_it_warns_that_mkl_keeps_its_own_dispatch(tmp_path, monkeypatch):
    spec = mkl_vendor.KERNEL.spec
    shutil.copy(spec.source, tmp_path / spec.source.name)
    monkeypatch.setenv("LTR_KERNELS_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    kernel = NativeKernel(dataclasses.replace(spec, directory=tmp_path))
    with pytest.warns(UserWarning, match="MKL vendor shim unavailable, using MKL's own dispatch"):
        assert kernel.kernel() is None


def test_importing_it_does_not_load_torch():
    # what lets train.py call activate() before torch: nothing it imports may load torch first
    assert _last_line("import sys\nfrom kernels import mkl_vendor\nprint('torch' in sys.modules)") == "False"


def test_mkl_cpu_type_is_0_where_torch_has_no_such_mkl(tmp_path, monkeypatch):
    """A torch whose libtorch_cpu cannot be opened (or exports no ``mkl_serv_cpu_detect``): 0, so the
    shim is not taken to be active and oneDNN's MLP keeps running."""
    fake = types.ModuleType("torch")
    fake.__file__ = str(tmp_path / "torch" / "__init__.py")
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert mkl_vendor.mkl_cpu_type() == 0
    monkeypatch.setattr(mkl_vendor, "_LOADED", True)
    monkeypatch.setattr(mkl_vendor, "_CONFIRMED", None)
    assert not mkl_vendor.active()
