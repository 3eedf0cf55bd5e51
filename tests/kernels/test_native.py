"""How the C++ kernels are built and found (kernels._native, setup.py): at install time, from the cache,
or compiled once on first use; never a library built from another version of the source."""

from __future__ import annotations

import ctypes
import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernels import _native
from kernels._native import KERNELS, NativeKernel, cache_library, kernel_hash, package_library

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def spec(tmp_path, monkeypatch):
    """The PRank kernel's spec over a copy of its source in an empty directory, with an empty cache."""
    shutil.copy(KERNELS["prank_cpu"].source, tmp_path / "prank_cpu.cpp")
    monkeypatch.setenv("LTR_KERNELS_DIR", str(tmp_path / "cache"))
    return dataclasses.replace(KERNELS["prank_cpu"], directory=tmp_path)


def stamp(library: ctypes.CDLL) -> str:
    library.ltr_kernel_hash.restype = ctypes.c_char_p
    return library.ltr_kernel_hash().decode()


def test_first_use_compiles_once_then_loads_from_the_cache(spec, capsys):
    first = NativeKernel(spec)
    library = first.kernel()
    assert library is not None and stamp(library) == kernel_hash(spec)
    assert first.compile_message in capsys.readouterr().err
    assert first.origin == f"built now: {cache_library(spec)}"
    again = NativeKernel(spec)
    assert again.load() is not None and again.origin == f"cache: {cache_library(spec)}"
    assert capsys.readouterr().err == ""


def test_the_installed_library_comes_first_and_a_stale_one_is_never_used(spec, capsys):
    _native.compile_library(spec, package_library(spec))  # what setup.py leaves beside the source
    installed = NativeKernel(spec)
    assert installed.load() is not None and installed.origin == f"package: {package_library(spec)}"
    assert NativeKernel(spec).built() == package_library(spec)
    capsys.readouterr()
    spec.source.write_text(spec.source.read_text() + "\n// edited after the install\n")
    edited = NativeKernel(spec)
    assert edited.built() is None  # the installed library carries the old source's hash
    library = edited.load()
    assert edited.origin == f"built now: {cache_library(spec)}" and stamp(library) == kernel_hash(spec)
    assert edited.compile_message in capsys.readouterr().err


def test_the_hash_follows_the_source_and_the_flags(spec):
    before = kernel_hash(spec)
    assert kernel_hash(dataclasses.replace(spec, cflags=(*spec.cflags, "-g"))) != before
    spec.source.write_text(spec.source.read_text() + "\n// changed\n")
    assert kernel_hash(spec) != before
    assert cache_library(spec).name == f"prank_cpu_{kernel_hash(spec)}.so"


def test_without_a_compiler_load_says_why_and_kernel_warns(spec, monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    with pytest.raises(RuntimeError, match="cannot run"):
        NativeKernel(spec).load()
    with pytest.warns(UserWarning, match="PRank CPU kernel unavailable, using the tensor path"):
        assert NativeKernel(spec).kernel() is None
    assert not list((tmp_path / "cache").glob("*.so"))  # no half-written library left behind


def test_a_compile_error_names_the_command_and_the_message(spec, monkeypatch):
    spec.source.write_text("this is not C++\n")
    with pytest.raises(RuntimeError, match="failed:") as raised:
        NativeKernel(spec).load()
    assert "prank_cpu.cpp" in str(raised.value)


@pytest.mark.slow
def test_setup_py_builds_every_kernel_as_the_loader_expects(tmp_path):
    """What `pip install -e .` runs (setup.py's build_ext, through setuptools' compiler and flags):
    each library lands where the loader looks and carries its source's hash."""
    done = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path), "--build-temp", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for spec in KERNELS.values():
        here = dataclasses.replace(spec, directory=tmp_path / "kernels")
        shutil.copy(spec.source, here.source)
        kernel = NativeKernel(here)
        assert kernel.load() is not None and kernel.origin == f"package: {package_library(here)}", spec.name


def test_a_global_library_exports_its_symbols_only_once_its_hash_is_checked(tmp_path, monkeypatch):
    """``global_symbols``: a stale build is opened locally and refused, so its symbols never reach the
    libraries loaded after it; the matching build's do."""
    symbol = f"ltr_probe_{tmp_path.name.replace('-', '_')}"
    source = tmp_path / "probe.cpp"
    body = (
        f'extern "C" {{ const char* ltr_kernel_hash() {{ return LTR_KERNEL_HASH; }} int {symbol}() {{ return 1; }} }}\n'
    )
    source.write_text(body)
    monkeypatch.setenv("LTR_KERNELS_DIR", str(tmp_path / "cache"))
    spec = _native.KernelSpec("probe", "probe", ("-O0",), directory=tmp_path, global_symbols=True)
    stale_path = cache_library(spec)
    _native.compile_library(spec, stale_path)  # built, not loaded; then the source moves on
    source.write_text(body + "// edited\n")
    assert NativeKernel(spec)._open(stale_path) is None
    with pytest.raises(AttributeError):
        getattr(ctypes.CDLL(None), symbol)  # the process's global scope
    NativeKernel(spec).load()
    assert getattr(ctypes.CDLL(None), symbol)() == 1
