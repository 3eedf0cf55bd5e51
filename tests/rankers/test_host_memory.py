"""``rankers.host_memory``: glibc keeps freed blocks while active (no fresh pages for a block freed and
taken again), restores its defaults after, and does nothing where the C library is not glibc."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rankers import host_memory
from rankers.host_memory import KeepFreedHostMemory, kept_freed_memory

pytestmark = pytest.mark.skipif(host_memory.glibc() is None, reason="not glibc")
ROOT = Path(__file__).resolve().parents[2]


# each case in a fresh process (glibc's thresholds, once set, stay set for the process). A round takes three
# 20 MB blocks from malloc, writes and frees them: 60 MB free at the heap's top, above the trim threshold
# glibc adjusts itself to (twice the largest block freed), so by default every round is fresh pages
CASE = """
import ctypes, resource, sys
from rankers import host_memory

libc = host_memory.glibc()
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]

def faults(rounds=10, size=20 << 20):
    counts = []
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        blocks = [libc.malloc(size) for _ in range(3)]
        for block in blocks:
            ctypes.memset(block, 1, size)
        for block in blocks:
            libc.free(block)
        counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return sum(counts[1:])

if sys.argv[1] == "default":
    print(faults())
else:  # kept, then after it (a later fit or the test phase in the same process)
    with host_memory.kept_freed_memory() as applied:
        assert applied
        print(faults())
    print(faults())
"""


def test_freed_blocks_are_reused_while_kept_where_glibc_alone_maps_them_afresh():
    """Minor page faults of rounds 2-10: every round by default, none while kept, and no more after."""
    processes = {
        case: subprocess.Popen([sys.executable, "-c", CASE, case], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        for case in ("default", "kept")
    }
    outputs = {case: [int(n) for n in process.communicate()[0].split()] for case, process in processes.items()}
    assert all(process.returncode == 0 for process in processes.values())
    (default,), (kept, after) = outputs["default"], outputs["kept"]
    round_pages = 3 * (20 << 20) // resource.getpagesize()
    assert default > 8 * round_pages  # fresh pages every round: the measure sees them
    assert kept < round_pages  # reused in place (another allocation may take the place once)
    assert after <= default


def test_nothing_where_the_c_library_is_not_glibc(monkeypatch):
    monkeypatch.setattr(host_memory, "glibc", lambda: None)
    with kept_freed_memory() as applied:
        assert not applied


class _Module:
    def __init__(self, device: str) -> None:
        self.device = torch.device(device)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_the_callback_holds_it_for_a_cpu_fit_only(device, monkeypatch):
    entered = []

    def kept():
        entered.append("in")
        yield True
        entered.append("out")

    monkeypatch.setattr(host_memory, "kept_freed_memory", host_memory.contextlib.contextmanager(kept))
    callback = KeepFreedHostMemory()
    callback.on_fit_start(None, _Module(device))
    assert entered == (["in"] if device == "cpu" else [])
    callback.on_exception(None, _Module(device), RuntimeError())
    callback.on_fit_end(None, _Module(device))  # after an exception: released once, not twice
    assert entered == (["in", "out"] if device == "cpu" else [])
