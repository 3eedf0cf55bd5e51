"""``rankers.host_memory``: glibc keeps freed blocks while active (no fresh pages for a block freed and
taken again), restores its defaults after, and does nothing where the C library is not glibc."""

from __future__ import annotations

import resource

import pytest
import torch

from rankers import host_memory
from rankers.host_memory import KeepFreedHostMemory, kept_freed_memory

pytestmark = pytest.mark.skipif(host_memory.glibc() is None, reason="not glibc")


def _faults_of_reuse(megabytes: int, rounds: int = 6) -> list[int]:
    """Minor page faults of each round of allocating, writing and freeing one block."""
    faults = []
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        block = torch.empty(megabytes << 18)  # float32: megabytes MB
        block.fill_(1.0)
        del block
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return faults


ROUNDS = 10


def test_a_freed_block_is_taken_again_without_fresh_pages():
    """Ten rounds of a 24 MB block: at most a few are fresh pages (another allocation may take the freed
    place once), not every one."""
    with kept_freed_memory() as applied:
        assert applied
        faults = _faults_of_reuse(24, ROUNDS)
    assert sum(faults[1:]) < 3 * (24 << 20) // resource.getpagesize(), faults


def test_the_measure_sees_fresh_pages():
    """A 40 MB block, above the mmap threshold's 32 MB cap, is mapped afresh every round whatever the
    settings: the page-fault measure of the test above is not vacuous."""
    with kept_freed_memory():
        faults = _faults_of_reuse(40, ROUNDS)
    assert sum(faults[1:]) > (ROUNDS - 2) * (40 << 20) // resource.getpagesize(), faults


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
