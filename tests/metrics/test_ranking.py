"""The shared ranking math (metrics.ranking): label/gain checks, and non-finite padding in every metric."""

from __future__ import annotations

import math

import pytest
import torch

from metrics import functional as F
from metrics import ranking as R
from tests.metrics.test_functional_properties import METRICS


@pytest.mark.parametrize("fill", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("name", METRICS)
def test_non_finite_padding_never_reaches_a_metric(name, fill):
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(3, 6, generator=g)
    labels = torch.randint(0, 4, (3, 6), generator=g).float()
    expected = METRICS[name](scores, labels, None)
    padded_scores = torch.cat([scores, torch.full((3, 2), fill)], 1)
    padded_labels = torch.cat([labels, torch.full((3, 2), fill)], 1)
    mask = torch.arange(8)[None].expand(3, 8) < 6
    torch.testing.assert_close(METRICS[name](padded_scores, padded_labels, mask), expected)


def test_exp2_label_that_overflows_float32_raises_naming_label_and_gain():
    with pytest.raises(ValueError, match=r"label 128\.0 .*gain='exp2'"):
        F.ndcg(torch.randn(1, 3), torch.tensor([[128.0, 0, 0]]))
    with pytest.raises(ValueError, match="gain='linear'"):
        F.ndcg(torch.randn(1, 3), torch.tensor([[float("nan"), 0, 0]]), gain="linear")
    with pytest.raises(ValueError, match=r"label 1000000000\.0 "):
        R.check_labels(torch.tensor([[1.0, 127.5, 1e9]]), "exp2")  # 127.5 is fine, 1e9 is named
    R.check_labels(torch.tensor([[127.0, 0.0]]), "exp2")  # 2**127 - 1 is a finite float32


def test_linear_gain_accepts_any_finite_label_and_matches_a_loop():
    labels = torch.tensor([[300.0, 1000.0, 0.0]])
    scores = torch.tensor([[0.1, 0.3, 0.2]])
    expected = (1000 + 0 / math.log2(3) + 300 / 2) / (1000 + 300 / math.log2(3))
    assert F.ndcg(scores, labels, gain="linear").item() == pytest.approx(expected, rel=1e-6)


def test_padding_labels_are_not_checked():
    mask = torch.tensor([[True, True, False]])
    value = F.ndcg(torch.randn(1, 3), torch.tensor([[1.0, 0.0, 500.0]]), mask)
    assert torch.isfinite(value).all()
    R.check_labels(torch.tensor([[1.0, float("inf")]]), "exp2", torch.tensor([[True, False]]))


def test_shared_math_matches_loops():
    labels = torch.tensor([[2.0, 0.0, 3.0, 1.0]])
    mask = torch.tensor([[True, True, True, False]])
    expected = (2**3 - 1) / 1 + (2**2 - 1) / math.log2(3)
    assert R.ideal_dcg(labels, mask).item() == pytest.approx(expected)
    assert R.ideal_dcg(labels, mask, k=1).item() == pytest.approx(7.0)
    torch.testing.assert_close(R.discounts(3), torch.tensor([1.0, 1 / math.log2(3), 0.5]))
    scores = torch.tensor([[1.0, float("-inf"), 1.0, 5.0]])
    assert R.sort_by_scores(scores, mask).tolist() == [[0, 2, 1, 3]]  # tie by position, -inf real before padding
    assert R.ranks_of(scores, mask).tolist() == [[0, 2, 1, 3]]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: F.ndcg(torch.zeros(2, 3), torch.zeros(2, 4)), r"must both be \[B, L\]"),
        (lambda: F.ndcg(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 4, dtype=torch.bool)), "differ"),
        (lambda: F.ndcg(torch.zeros(2, 3), torch.zeros(2, 3), gain="log"), "gain must be"),
        (lambda: R.ideal_dcg(torch.ones(2, 3), k=0), "k must be >= 1"),
    ],
)
def test_bad_shapes_gain_and_cutoff_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()
