"""Every benchmark is a module of the ``bench`` package (``python -m bench.<name>``): it imports
without a ``sys.path`` edit and without running (import only: nothing is timed here)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHES = sorted(p.stem for p in (ROOT / "bench").glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("name", BENCHES)
def test_every_benchmark_imports_as_a_module_of_the_package(name):
    module = importlib.import_module(f"bench.{name}")
    assert module.__file__ == str(ROOT / "bench" / f"{name}.py")


def test_no_benchmark_edits_the_import_path():
    edits = [p.name for p in (ROOT / "bench").glob("*.py") if "sys.path" in p.read_text()]
    assert edits == []


def test_a_benchmark_runs_as_a_module_from_the_repository_root():
    done = subprocess.run(
        [sys.executable, "-m", "bench.trees", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
