"""bench/train_throughput.py's rows switch the CPU MLP path they name, and nothing else."""

from __future__ import annotations

import argparse
import subprocess

import pytest
import torch

from bench import train_throughput
from kernels import mlp_cpu
from rankers.neural import mkl_mlp, onednn_mlp
from rankers.scorers import MLPScorer


@pytest.mark.parametrize(("backend", "runs"), [("onednn", "onednn"), ("mkl", "mkl"), ("generic", None)])
def test_a_rows_mlp_backend_is_the_path_that_runs(backend, runs):
    if backend == "onednn" and not onednn_mlp.available():
        pytest.skip("no oneDNN linear op in this torch build")
    scorer, features = MLPScorer(4, hidden=(8,)), torch.randn(2, 3, 4)
    with train_throughput.row_patches(train_throughput.Row("resident", mlp=backend)):
        taken = [name for name, path in (("onednn", onednn_mlp), ("mkl", mkl_mlp)) if path.applies(scorer, features)]
    assert taken == ([runs] if runs else [])


def test_the_per_product_row_turns_the_kernel_off_and_only_there():
    with train_throughput.row_patches(train_throughput.Row("resident", mlp="per-product")):
        assert not mlp_cpu.available()
    with train_throughput.row_patches(train_throughput.Row("resident", mlp="mkl")):
        assert mlp_cpu.available() == (mlp_cpu.blas() is not None and mlp_cpu.kernel() is not None)


def test_the_fast_rows_mirror_their_configs():
    """trainer=cpu_fast: 4 steps a Lightning step; gpu_fast: 16; other rows: 1."""
    fast, resident = train_throughput.Row("fast"), train_throughput.Row("resident")
    assert (fast.steps("cpu"), fast.steps("cuda"), resident.steps("cpu")) == (4, 16, 1)
    assert train_throughput.Row("fast", steps_per_batch=1).steps("cpu") == 1


def test_an_ablation_run_that_fails_says_so_with_its_error(monkeypatch):
    """A child run that exits non-zero (or prints no result) is an error carrying its stderr, not a figure."""
    failed = subprocess.CompletedProcess([], 1, stdout="", stderr="KeyError: 'no-such-change'")
    monkeypatch.setattr(train_throughput.subprocess, "run", lambda *args, **kwargs: failed)
    args = argparse.Namespace(queries=10, batch_size=4, warmup=1, batches=2, threads=None)
    with pytest.raises(RuntimeError, match="no-such-change"):
        train_throughput._isolated_run("no-such-change", "row", args)
    silent = subprocess.CompletedProcess([], 0, stdout="no result line\n", stderr="")
    monkeypatch.setattr(train_throughput.subprocess, "run", lambda *args, **kwargs: silent)
    with pytest.raises(RuntimeError, match="failed"):
        train_throughput._isolated_run("no-buffers", "row", args)
