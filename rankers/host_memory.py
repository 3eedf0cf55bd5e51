"""Freed host memory kept in the process while a model trains on CPU (glibc's malloc settings).

Why it exists: a CPU training step allocates and frees tensors of megabytes (a 256-query batch's
features are 15 MB). glibc's malloc maps such blocks fresh (above its mmap threshold), or takes them
from the heap and gives the heap's top back to the kernel once more than the trim threshold is free;
either way the next step's block is new pages that the kernel maps and zeroes on first touch, every
step. ``kept_freed_memory()`` raises the mmap threshold to glibc's 64-bit maximum (32 MB) and the trim
threshold to 1 GB while it is active, so freed blocks are reused in place. Once set, glibc never goes
back to adjusting its thresholds itself, so on exit they stay where that adjustment tops out (mmap 32 MB,
trim 64 MB: what a process that freed a 32 MB block has anyway), not at the 128 KB start, which would
map every later block afresh; then the heap is trimmed. ``trainer=cpu_fast`` turns it on through
``KeepFreedHostMemory``.
Measured by ``python bench/train_throughput.py --ablations --changes freed-memory-returned``
(docs/benchmarks.md). Elsewhere than glibc (macOS, musl) it does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
from collections.abc import Iterator

import pytorch_lightning as pl

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc's malloc.h
KEPT = {M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 1 << 30, M_TOP_PAD: 64 << 20}
# after: glibc's dynamic thresholds at their ceiling (mmap 32 MB, trim twice that), its default top pad
AFTER = {M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 64 << 20, M_TOP_PAD: 128 << 10}


@functools.cache
def glibc() -> ctypes.CDLL | None:
    """The C library if it is glibc (it has ``mallopt`` and ``malloc_trim``), else None."""
    try:
        library = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        library.gnu_get_libc_version, library.mallopt, library.malloc_trim  # noqa: B018  (glibc's own)
    except (OSError, AttributeError):
        return None
    return library


def _set(settings: dict[int, int]) -> bool:
    """Every setting applied (mallopt returns 1), or none left changed: False."""
    library = glibc()
    if library is None:
        return False
    if all(library.mallopt(option, value) == 1 for option, value in settings.items()):
        return True
    for option, value in AFTER.items():
        library.mallopt(option, value)
    return False


@contextlib.contextmanager
def kept_freed_memory() -> Iterator[bool]:
    """While active, glibc keeps freed blocks up to 32 MB for reuse instead of returning them; yields
    whether the settings took (False where the C library is not glibc)."""
    applied = _set(KEPT)
    try:
        yield applied
    finally:
        if applied:
            _set(AFTER)
            glibc().malloc_trim(0)


class KeepFreedHostMemory(pl.Callback):
    """``kept_freed_memory()`` from the start of ``fit`` to its end (or its exception), for a CPU run."""

    def __init__(self) -> None:
        self._stack: contextlib.ExitStack | None = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if pl_module.device.type == "cpu" and self._stack is None:
            self._stack = contextlib.ExitStack()
            self._stack.enter_context(kept_freed_memory())

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._release()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._release()

    def _release(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None
