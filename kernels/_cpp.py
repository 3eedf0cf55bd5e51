"""One loader for the C++ CPU kernels: built once per (source, flags, torch version), cached, announced.

Each kernel (``kernels.prank_cpu``, ``kernels.pairwise_perceptron_cpu``) is a ``CppKernel`` over its
``.cpp`` file. The build goes into ``torch.utils.cpp_extension``'s cache directory
(``TORCH_EXTENSIONS_DIR`` or ``~/.cache/torch_extensions``) under a name that carries the hash of the
source, the flags and the torch version: two versions of the source never share a build, and a
cached build is imported without calling the compiler. Without a compiler (or ninja), ``kernel()``
warns once and returns None, and callers run their tensor path.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import torch


class CppKernel:
    """A C++ extension compiled on first use (or by ``python -m kernels.build``) and imported from cache.

    Args:
        source: the ``.cpp`` file.
        prefix: the extension's name before the hash, e.g. ``ltr_prank_cpu``.
        label: how messages name it, e.g. ``"PRank CPU kernel"``.
        cflags, ldflags: compiler and linker flags (part of the hash).
    """

    def __init__(
        self, source: Path, *, prefix: str, label: str, cflags: Sequence[str], ldflags: Sequence[str] = ()
    ) -> None:
        self.source, self.prefix, self.label = source, prefix, label
        self.cflags, self.ldflags = tuple(cflags), tuple(ldflags)
        self.compile_message = f"compiling the {label} once (~30 s; `python -m kernels.build` does it ahead)..."
        self._module: ModuleType | None = None
        self._tried = False

    def extension_name(self) -> str:
        """``<prefix>_<hash>``: the hash covers the source, the flags and the torch version."""
        digest = hashlib.sha256()
        for part in (
            self.source.read_bytes(),
            " ".join(self.cflags + self.ldflags).encode(),
            torch.__version__.encode(),
        ):
            digest.update(part)
        return f"{self.prefix}_{digest.hexdigest()[:12]}"

    def build_directory(self) -> Path:
        from torch.utils.cpp_extension import _get_build_directory

        return Path(_get_build_directory(self.extension_name(), verbose=False))

    def library_path(self) -> Path:
        return self.build_directory() / f"{self.extension_name()}.so"

    def is_built(self) -> bool:
        return self.library_path().is_file()

    def _import_library(self, path: Path) -> ModuleType:
        spec = importlib.util.spec_from_file_location(self.extension_name(), path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def _compile(self) -> ModuleType:
        from torch.utils.cpp_extension import load

        return load(
            name=self.extension_name(),
            sources=[str(self.source)],
            extra_cflags=list(self.cflags),
            extra_ldflags=list(self.ldflags),
            build_directory=str(self.build_directory()),
            verbose=False,
        )

    def load_kernel(self) -> ModuleType:
        """Import the cached build, or compile it (saying so on stderr). Raises if it cannot be built."""
        if self.is_built():
            try:
                return self._import_library(self.library_path())
            except ImportError:  # a stale or truncated build: compile again
                pass
        print(self.compile_message, file=sys.stderr, flush=True)
        start = time.perf_counter()
        module = self._compile()
        print(f"{self.label} built in {time.perf_counter() - start:.0f} s: {self.library_path()}", file=sys.stderr)
        return module

    def kernel(self) -> ModuleType | None:
        """The compiled module, or None (with one warning) where it cannot be built."""
        if not self._tried:
            self._tried = True
            try:
                self._module = self.load_kernel()
            except Exception as error:  # no compiler, no ninja, read-only cache: the tensor path still works
                reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
                warnings.warn(
                    f"{self.label} unavailable, using the tensor path ({reason}); `python -m kernels.build` "
                    "shows the whole error",
                    stacklevel=3,
                )
                self._module = None
        return self._module
