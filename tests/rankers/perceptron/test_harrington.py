"""Table 1's experiment (rankers/perceptron/harrington.py): the C++ paths against the tensor paths on
the same seeds, and the Student-t quantile of its intervals against scipy."""

from __future__ import annotations

import pytest
import torch
from scipy.special import stdtrit

from kernels import prank_cpu
from rankers.perceptron import harrington


@pytest.mark.parametrize("df", [*range(1, 41), 59, 99, 499, 1000, 1001, 4000])
def test_t_quantile_is_scipys(df):
    for confidence in (0.5, 0.9, 0.95, 0.99, 0.999):
        expected = float(stdtrit(df, 0.5 + confidence / 2))
        assert harrington.t_quantile(confidence, df) == pytest.approx(expected, rel=1e-12, abs=0)


def test_student_t_interval_of_known_values():
    values = torch.tensor([1.0, 2.0, 3.0, 4.0])
    mean, half = harrington.student_t_interval(values)
    assert mean == 2.5
    assert half == pytest.approx(float(stdtrit(3, 0.975)) * values.double().std().item() / 2, rel=1e-12)
    with pytest.raises(ValueError):
        harrington.t_quantile(1.0, 3)


def test_table1_through_the_cpp_loops_is_the_tensor_paths(monkeypatch):
    """The same seeds give the same Table 1 on the C++ loops (PRank with its voted history,
    Widrow-Hoff, OAP, the draws, the voted evaluation) and on the tensor paths (the kernel
    unavailable): every trial's test rank loss, to float rounding."""
    assert prank_cpu.kernel() is not None
    setting = dict(trials=2, n_train=1500, n_test=200, n_perceptrons=8, seed=3)
    fused = harrington.table1(**setting)
    monkeypatch.setattr(prank_cpu, "kernel", lambda: None)
    tensor = harrington.table1(**setting)
    assert fused.keys() == tensor.keys()
    for name in fused:
        assert fused[name]["per_trial"] == pytest.approx(tensor[name]["per_trial"], abs=1e-6), name


@pytest.mark.parametrize(("confidence", "df"), [(0.0, 5), (1.0, 5), (0.95, 0)])
def test_t_quantile_refuses_what_has_no_quantile(confidence, df):
    with pytest.raises(ValueError, match="need 0 < confidence < 1 and df >= 1"):
        harrington.t_quantile(confidence, df)
