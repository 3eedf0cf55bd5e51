"""bench/letor_synthetic.py: the file reads back as the generator's split, --raw changes only scales."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from bench.letor_synthetic import raw_scales, write
from bench.train_throughput import mslr_like
from datamodules.letor_io import read_letor


def test_a_written_split_reads_back_as_generated(tmp_path):
    data = mslr_like(5, seed=3)
    write(data, str(tmp_path / "f.txt"))
    back = read_letor(str(tmp_path / "f.txt"))
    np.testing.assert_allclose(back.features, data.features, rtol=1e-6)
    np.testing.assert_array_equal(back.labels, data.labels)
    np.testing.assert_array_equal(back.offsets, data.offsets)


def test_raw_scales_are_monotone_per_feature_and_leave_the_rest():
    x = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)
    raw = raw_scales(x)
    for column in range(8):
        order = np.argsort(x[:, column], kind="stable")
        assert np.all(np.diff(raw[order, column]) >= 0)  # a tree or a rank sees the same order
    np.testing.assert_array_equal(raw[:, 3], x[:, 3])  # odd columns but every fourth: untouched
    np.testing.assert_allclose(raw[:, 1], x[:, 1] * 1000 + 5000)


def test_raw_is_refused_for_the_letor4_kind(tmp_path):
    command = [sys.executable, "-m", "bench.letor_synthetic", "--kind", "letor4", "--queries", "2", "--raw"]
    result = subprocess.run([*command, "--out", str(tmp_path / "x.txt")], capture_output=True, text=True)
    assert result.returncode == 2 and "--raw applies to --kind mslr" in result.stderr
