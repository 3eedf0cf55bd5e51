"""bench/train_throughput.py's rows switch the CPU MLP path they name, and nothing else."""

from __future__ import annotations

import pytest
import torch

from bench import train_throughput
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
