"""How much more memory this process may use: the smallest of what the machine has free, what the
process's address-space limit leaves (``ulimit -v``, as batch schedulers set it) and what its cgroup
leaves (containers, SLURM's cgroup plugin). Readers size their dense arrays against it, so that a
stray feature index becomes an error naming its line instead of a bare ``MemoryError``.

Example:
    >>> budget = available_memory()
    >>> budget.bytes > 0 and budget.limited_by in ("free memory", "address-space limit (ulimit -v)",
    ...     "cgroup memory limit", "physical memory")
    True
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class MemoryBudget:
    """``bytes`` this process may still allocate, and which limit decides it."""

    bytes: int
    limited_by: str


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _address_space_left() -> int | None:
    """``RLIMIT_AS`` minus this process's current virtual size, or None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[0])
        used = pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        used = 0
    return max(soft - used, 0)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (v2) means no limit


def _cgroup_left(root: Path = CGROUP_ROOT) -> int | None:
    """The cgroup's memory limit minus its usage (cgroup v2, else v1), or None when unlimited."""
    for limit_file, usage_file in (
        (root / "memory.max", root / "memory.current"),
        (root / "memory" / "memory.limit_in_bytes", root / "memory" / "memory.usage_in_bytes"),
    ):
        limit = _read_int(limit_file)
        if limit is not None and limit < 1 << 60:  # v1 reports "no limit" as a huge number
            return max(limit - (_read_int(usage_file) or 0), 0)
    return None


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 32 << 30


def available_memory() -> MemoryBudget:
    """The smallest of the free memory, the address-space limit's room and the cgroup's room."""
    candidates = [
        (_meminfo_available(), "free memory"),
        (_address_space_left(), "address-space limit (ulimit -v)"),
        (_cgroup_left(), "cgroup memory limit"),
    ]
    known = [(size, name) for size, name in candidates if size is not None]
    if not known:
        return MemoryBudget(_physical_memory(), "physical memory")
    size, name = min(known)
    return MemoryBudget(size, name)
