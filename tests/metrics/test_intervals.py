"""metrics.intervals: the Student-t quantile and interval against scipy."""

from __future__ import annotations

import pytest
import torch
from scipy.special import stdtrit

from metrics.intervals import student_t_interval, t_quantile


@pytest.mark.parametrize("df", [*range(1, 41), 59, 99, 499, 1000, 1001, 4000])
def test_t_quantile_is_scipys(df):
    for confidence in (0.5, 0.9, 0.95, 0.99, 0.999):
        expected = float(stdtrit(df, 0.5 + confidence / 2))
        assert t_quantile(confidence, df) == pytest.approx(expected, rel=1e-12, abs=0)


def test_student_t_interval_of_known_values():
    values = torch.tensor([1.0, 2.0, 3.0, 4.0])
    mean, half = student_t_interval(values)
    assert mean == 2.5
    assert half == pytest.approx(float(stdtrit(3, 0.975)) * values.double().std().item() / 2, rel=1e-12)


def test_one_value_has_no_interval():
    assert student_t_interval(torch.tensor([0.5])) == (0.5, None)


@pytest.mark.parametrize(("confidence", "df"), [(0.0, 5), (1.0, 5), (0.95, 0)])
def test_t_quantile_refuses_what_has_no_quantile(confidence, df):
    with pytest.raises(ValueError, match="need 0 < confidence < 1 and df >= 1"):
        t_quantile(confidence, df)
