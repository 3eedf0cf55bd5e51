"""One loader for the C++ CPU kernels: plain C-ABI shared libraries, built by ``pip install -e .``.

Each kernel (``kernels.prank_cpu``, ``kernels.pairwise_perceptron_cpu``, ``kernels.lambdarank_cpu``)
is one ``.cpp`` file with ``extern "C"`` entry points over raw pointers (no torch or pybind11
headers: a build takes about a second, not the ~30 s of a torch extension), loaded with ``ctypes``.

Where a library comes from, first found wins:

1. the package: ``setup.py`` builds every kernel at install time (``pip install -e .`` puts
   ``kernels/_<name>.<EXT_SUFFIX>`` beside its source), so a first run compiles nothing;
2. the user cache (``LTR_KERNELS_DIR``, else ``~/.cache/ltr-framework/kernels``), under a name that
   carries the build's hash;
3. a build into that cache with the system C++ compiler (``CXX``, else ``c++``), announced on
   stderr: for a checkout used without ``pip install -e .``, or a source edited since the install.

Every library carries the hash of its source and flags (``ltr_kernel_hash()``), checked on load,
so a library built from another version of the source is never used. Without a compiler,
``kernel()`` warns once and returns None, and callers run their tensor path.

This module imports neither torch nor the package: ``setup.py`` reads ``KERNELS`` from it.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class KernelSpec:
    """A kernel's source and flags: what ``setup.py`` builds and what the hash covers.

    Args:
        name: the source's stem (``prank_cpu`` -> ``prank_cpu.cpp``, library ``_prank_cpu``).
        label: how messages name it.
        cflags, ldflags: compiler and linker flags besides ``-shared -fPIC -std=c++17``.
        directory: where the source and the installed library live (this package).
        global_symbols: open it with ``RTLD_GLOBAL``, so that libraries loaded after it resolve its
            symbols (``kernels.mkl_vendor``); the kernels proper keep theirs to themselves.
        fallback: what runs without it (the warning says so).
    """

    name: str
    label: str
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...] = ()
    directory: Path = HERE
    global_symbols: bool = False
    fallback: str = "the tensor path"

    @property
    def source(self) -> Path:
        return self.directory / f"{self.name}.cpp"

    @property
    def library_name(self) -> str:
        return f"_{self.name}"


# -fopenmp: the `omp simd` pragmas and the `omp parallel for` over runs / queries. At run time the
# library shares the OpenMP runtime torch already loaded (the same soname, libgomp.so.1).
KERNELS: dict[str, KernelSpec] = {
    spec.name: spec
    for spec in (
        # -fno-trapping-math: lets GCC turn the stream's masked updates into SIMD selects (no value
        # changes: nothing here traps); no fused multiply-adds, as the tensor path rounds each product
        KernelSpec(
            "prank_cpu",
            "PRank CPU kernel",
            ("-O3", "-ffp-contract=off", "-fno-trapping-math", "-fopenmp"),
            ("-fopenmp",),
        ),
        # no contraction into fused multiply-adds: the tensor path rounds each product and each sum
        KernelSpec(
            "pairwise_perceptron_cpu",
            "pairwise perceptron CPU kernel",
            ("-O3", "-ffp-contract=off", "-fopenmp"),
            ("-fopenmp",),
        ),
        # -ffast-math lets GCC call libmvec's vector expf / log1pf. -march=native: for the machine that
        # builds it, which is the machine that installs the package (the hash does not cover the CPU)
        KernelSpec(
            "lambdarank_cpu",
            "LambdaRank CPU kernel",
            ("-O3", "-march=native", "-ffast-math", "-fopenmp"),
            ("-fopenmp",),
        ),
        # no -ffast-math: the z-score divides as FeatureNormalizer does (bit for bit); -march=native as above
        KernelSpec(
            "mlp_cpu",
            "MLP CPU kernel",
            ("-O3", "-march=native", "-fopenmp"),
            ("-fopenmp",),
            fallback="the MLP's per-product path",
        ),
        KernelSpec("mkl_vendor", "MKL vendor shim", ("-O2",), global_symbols=True, fallback="MKL's own dispatch"),
    )
}
BASE_CFLAGS = ("-std=c++17", "-fPIC")


def kernel_hash(spec: KernelSpec) -> str:
    """16 hex digits over the source and the flags: two versions of either never share a library."""
    digest = hashlib.sha256(spec.source.read_bytes())
    digest.update(" ".join(BASE_CFLAGS + spec.cflags + spec.ldflags).encode())
    return digest.hexdigest()[:16]


def hash_define(spec: KernelSpec) -> str:
    """The ``-D`` flag that stamps the hash into the library (read back by ``ltr_kernel_hash()``)."""
    return f'-DLTR_KERNEL_HASH="{kernel_hash(spec)}"'


def package_library(spec: KernelSpec) -> Path:
    """Where ``pip install`` puts the library: beside the source, named as a Python extension."""
    return spec.directory / f"{spec.library_name}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"


def cache_directory() -> Path:
    configured = os.environ.get("LTR_KERNELS_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "ltr-framework" / "kernels"


def cache_library(spec: KernelSpec) -> Path:
    return cache_directory() / f"{spec.name}_{kernel_hash(spec)}.so"


def compiler() -> list[str]:
    return shlex.split(os.environ.get("CXX") or "c++")


def compile_command(spec: KernelSpec, output: Path) -> list[str]:
    return [
        *compiler(),
        "-shared",
        *BASE_CFLAGS,
        *spec.cflags,
        hash_define(spec),
        str(spec.source),
        "-o",
        str(output),
        *spec.ldflags,
    ]


def compile_library(spec: KernelSpec, output: Path) -> None:
    """Build ``spec`` into ``output`` (written under a temporary name, then renamed: a concurrent
    process never loads a half-written file). Raises RuntimeError with the compiler's message."""
    output.parent.mkdir(parents=True, exist_ok=True)
    descriptor, partial = tempfile.mkstemp(dir=output.parent, prefix=f".{output.stem}-", suffix=".so")
    os.close(descriptor)
    try:
        command = compile_command(spec, Path(partial))
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False)
        except OSError as error:  # no compiler at all
            raise RuntimeError(f"cannot run {command[0]!r}: {error}") from error
        if done.returncode != 0:
            raise RuntimeError(f"`{shlex.join(command)}` failed:\n{done.stderr.strip()}")
        os.replace(partial, output)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


@dataclass
class NativeKernel:
    """A kernel's library, loaded once: from the package, the cache, or built into the cache."""

    spec: KernelSpec
    _library: ctypes.CDLL | None = field(default=None, init=False, repr=False)
    _tried: bool = field(default=False, init=False, repr=False)
    origin: str | None = field(default=None, init=False)

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def compile_message(self) -> str:
        return (
            f"compiling the {self.label} once (a few seconds; `pip install -e .` builds it at install time): "
            f"{cache_library(self.spec)}"
        )

    def _open(self, path: Path) -> ctypes.CDLL | None:
        """The library at ``path`` if it exists and carries this source's hash, else None."""
        if not path.is_file():
            return None
        try:
            library = ctypes.CDLL(str(path))  # local first: a stale build's symbols must not reach others
            stamp = library.ltr_kernel_hash
        except (OSError, AttributeError):  # truncated, foreign, or built before the hash existed
            return None
        stamp.restype = ctypes.c_char_p
        if stamp().decode() != kernel_hash(self.spec):
            return None
        if self.spec.global_symbols:  # the same library, its symbols now visible to later loads
            library = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL | os.RTLD_NOLOAD)
        return library

    def built(self) -> Path | None:
        """The library that ``load`` would use without compiling, or None."""
        for path in (package_library(self.spec), cache_library(self.spec)):
            if self._open(path) is not None:
                return path
        return None

    def load(self) -> ctypes.CDLL:
        """The library, compiling it into the cache if neither a package nor a cached build matches
        (saying so on stderr). Raises RuntimeError if it cannot be built."""
        for origin, path in (("package", package_library(self.spec)), ("cache", cache_library(self.spec))):
            library = self._open(path)
            if library is not None:
                self.origin = f"{origin}: {path}"
                return library
        print(self.compile_message, file=sys.stderr, flush=True)
        start = time.perf_counter()
        path = cache_library(self.spec)
        compile_library(self.spec, path)
        library = self._open(path)
        if library is None:
            raise RuntimeError(f"{path} was built but does not load or carries another hash")
        print(f"{self.label} built in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
        self.origin = f"built now: {path}"
        return library

    def kernel(self) -> ctypes.CDLL | None:
        """The loaded library, or None (with one warning) where it cannot be built."""
        if not self._tried:
            self._tried = True
            try:
                self._library = self.load()
            except Exception as error:  # no compiler, read-only cache: the tensor path still works
                reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
                warnings.warn(
                    f"{self.label} unavailable, using {self.spec.fallback} ({reason}); `python -m kernels.build` "
                    "shows the whole error",
                    stacklevel=3,
                )
                self._library = None
        return self._library


def pointer(tensor) -> int:
    """A CPU tensor's data address for a ``c_void_p`` argument (``tensor`` is a torch.Tensor)."""
    return tensor.data_ptr()
