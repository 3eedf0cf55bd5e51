"""The memory budget readers size their arrays against: the smallest limit decides."""

from __future__ import annotations

import resource

from datamodules import memory


def test_the_cgroup_v2_limit_minus_its_usage(tmp_path):
    (tmp_path / "memory.max").write_text("4294967296\n")
    (tmp_path / "memory.current").write_text("1073741824\n")
    assert memory._cgroup_left(tmp_path) == 3 << 30
    (tmp_path / "memory.max").write_text("max\n")  # no limit
    assert memory._cgroup_left(tmp_path) is None


def test_the_cgroup_v1_limit_and_its_no_limit_value(tmp_path):
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text(str(2 << 30))
    (tmp_path / "memory" / "memory.usage_in_bytes").write_text(str(1 << 29))
    assert memory._cgroup_left(tmp_path) == (2 << 30) - (1 << 29)
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712")  # v1's "unlimited"
    assert memory._cgroup_left(tmp_path) is None


def test_the_smallest_limit_decides(monkeypatch):
    monkeypatch.setattr(memory, "_meminfo_available", lambda: 16 << 30)
    monkeypatch.setattr(memory, "_cgroup_left", lambda: 8 << 30)
    monkeypatch.setattr(memory, "_address_space_left", lambda: 2 << 30)
    assert memory.available_memory() == memory.MemoryBudget(2 << 30, "address-space limit (ulimit -v)")
    monkeypatch.setattr(memory, "_address_space_left", lambda: None)
    assert memory.available_memory().limited_by == "cgroup memory limit"


def test_the_address_space_room_is_the_limit_minus_what_is_mapped(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert memory._address_space_left() is None
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (1 << 50, resource.RLIM_INFINITY))
    left = memory._address_space_left()
    assert 0 < left < 1 << 50  # this process maps something
