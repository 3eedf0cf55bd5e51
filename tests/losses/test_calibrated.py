"""The calibrated constraint loss: a slow loop over the constraints, binary relevance's log loss, gradients."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from sklearn.metrics import log_loss

from losses import calibrated_ranking_loss


def surrogate(z: float, kind: str, margin: float) -> float:
    if kind == "logistic":
        return float(np.log1p(np.exp(margin - z)))
    hinge = max(0.0, margin - z)
    return hinge if kind == "hinge" else hinge**2


def slow_loss(scores, labels, kind, margin, pairs, calibration):
    """The constraints written out per instance, as Section 2 lists them."""
    total = []
    for s, y in zip(scores, labels, strict=True):
        grades = sorted(set(y), reverse=True)
        constraints = []
        for r, t in itertools.permutations(range(len(y)), 2):
            if y[r] > y[t] and (pairs == "all" or grades.index(y[t]) == grades.index(y[r]) + 1):
                constraints.append(s[r] - s[t])
        lowest = min((v for v in y if v > 0), default=None)
        zero = [(s[r] if y[r] > 0 else -s[r]) for r in range(len(y)) if y[r] == 0 or pairs == "all" or y[r] == lowest]
        pair_term = np.mean([surrogate(z, kind, margin) for z in constraints]) if constraints else 0.0
        total.append(pair_term + calibration * np.mean([surrogate(z, kind, margin) for z in zero]))
    return np.mean(total)


@pytest.mark.parametrize("kind", ["logistic", "hinge", "squared_hinge"])
@pytest.mark.parametrize("pairs", ["all", "adjacent"])
def test_equal_to_the_constraints_written_out(kind, pairs):
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(40, 5))
    labels = np.zeros((40, 5))
    for row in labels:
        relevant = rng.permutation(5)[: rng.integers(0, 6)]
        row[relevant] = np.arange(len(relevant), 0, -1)
    margin = 1.0 if kind != "logistic" else 0.5
    ours = calibrated_ranking_loss(
        torch.tensor(scores), torch.tensor(labels), surrogate=kind, margin=margin, pairs=pairs, calibration=0.7
    )
    assert ours.item() == pytest.approx(slow_loss(scores, labels, kind, margin, pairs, 0.7), rel=1e-5)


def test_its_calibration_term_alone_is_binary_relevances_log_loss():
    rng = np.random.default_rng(1)
    scores, labels = rng.normal(size=(50, 4)), (rng.random((50, 4)) < 0.4).astype(float)
    # weight the pair term out by giving every instance a single label per row view: compare the difference
    full = calibrated_ranking_loss(torch.tensor(scores), torch.tensor(labels), reduction="none")
    pairs_only = calibrated_ranking_loss(torch.tensor(scores), torch.tensor(labels), calibration=0.0, reduction="none")
    zero_point = (full - pairs_only).numpy()
    expected = [
        np.mean([log_loss([y], [1 / (1 + np.exp(-s))], labels=[0, 1]) for s, y in zip(srow, yrow, strict=True)])
        for srow, yrow in zip(scores, labels, strict=True)
    ]
    np.testing.assert_allclose(zero_point, expected, rtol=1e-6)


def test_padding_and_empty_batches_are_finite_with_zero_gradient():
    scores = torch.tensor([[2.0, -1.0, torch.nan, torch.inf]], requires_grad=True)
    labels = torch.tensor([[1.0, 0.0, torch.nan, 1.0]])
    mask = torch.tensor([[True, True, False, False]])
    loss = calibrated_ranking_loss(scores, labels, mask)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(scores.grad).all() and (scores.grad[0, 2:] == 0).all()
    expected = calibrated_ranking_loss(torch.tensor([[2.0, -1.0]]), torch.tensor([[1.0, 0.0]]))
    torch.testing.assert_close(loss.detach(), expected)
    empty = torch.zeros(2, 3, requires_grad=True)
    value = calibrated_ranking_loss(empty, torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.bool))
    value.backward()
    assert value.item() == 0.0 and (empty.grad == 0).all()


def test_gradient_equals_finite_differences():
    rng = np.random.default_rng(2)
    scores = torch.tensor(rng.normal(size=(6, 5)), requires_grad=True)
    labels = torch.tensor((rng.random((6, 5)) < 0.5) * rng.integers(1, 3, (6, 5)), dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda s: calibrated_ranking_loss(s, labels, pairs="adjacent"), (scores,))
