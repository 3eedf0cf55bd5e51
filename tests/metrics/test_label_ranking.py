"""Label ranking metrics against scikit-learn (to 1e-6) and against slow loops written here."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy.stats import kendalltau
from sklearn import metrics as skm

from metrics.label_ranking import (
    average_precision,
    coverage,
    footrule_distance,
    hamming_loss,
    kendall_tau_distance,
    one_error,
    ranking_loss,
)

SKLEARN = [
    (ranking_loss, skm.label_ranking_loss),
    (coverage, skm.coverage_error),
    (average_precision, skm.label_ranking_average_precision_score),
    (hamming_loss, lambda y, s: skm.hamming_loss(y, s > 0)),
]


def random_case(seed: int, ties: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = (rng.random((300, 9)) < 0.3).astype(np.float64)
    y[:5] = 0  # no relevant label
    y[5:8] = 1  # all relevant
    s = rng.integers(-2, 3, y.shape).astype(np.float64) if ties else rng.normal(size=y.shape)
    return s, y


@pytest.mark.parametrize(("ours", "reference"), SKLEARN, ids=lambda f: getattr(f, "__name__", "ref"))
@pytest.mark.parametrize("ties", [False, True])
def test_equal_to_sklearn(ours, reference, ties):
    s, y = random_case(3, ties)
    value = ours(torch.tensor(s, dtype=torch.float32), torch.tensor(y)).double().mean().item()
    assert value == pytest.approx(reference(y, s), abs=1e-6)


@pytest.mark.parametrize("fn", [ranking_loss, coverage, average_precision, hamming_loss, one_error,
                                kendall_tau_distance, footrule_distance])  # fmt: skip
def test_padded_labels_never_count_and_never_make_nan(fn):
    s, y = random_case(4, ties=True)
    scores, labels = torch.tensor(s, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    padded_scores = torch.cat([scores, torch.full((300, 3), torch.nan)], 1)
    padded_labels = torch.cat([labels, torch.full((300, 3), torch.inf)], 1)
    mask = torch.arange(12) < 9
    mask = mask.expand(300, 12)
    torch.testing.assert_close(fn(padded_scores, padded_labels, mask), fn(scores, labels))
    empty = fn(padded_scores, padded_labels, torch.zeros_like(mask))
    assert torch.isfinite(empty).all()


def test_one_error_is_the_top_label_first_by_position():
    s, y = random_case(5, ties=True)
    expected = [0.0 if y[i, int(np.argmax(s[i]))] > 0 else 1.0 for i in range(len(y))]  # argmax: first maximum
    np.testing.assert_array_equal(one_error(torch.tensor(s), torch.tensor(y)).numpy(), expected)


def top_label_order(key: list[float]) -> list[int]:
    """Bucket index of each label: distinct positive keys strictly ordered, the rest one bucket."""
    positive = sorted({k for k in key if k > 0}, reverse=True)
    return [positive.index(k) if k > 0 else len(positive) for k in key]


def slow_predicted_keys(scores: list[float]) -> list[float]:
    """argsort+: positive scores by score, equal scores by index, as distinct keys; others 0."""
    positive = [i for i, s in enumerate(scores) if s > 0]
    ordered = sorted(positive, key=lambda i: (-scores[i], i))
    keys = [0.0] * len(scores)
    for place, i in enumerate(ordered):
        keys[i] = float(len(scores) - place)
    return keys


def slow_kendall(scores: list[float], labels: list[float], p: float) -> float:
    a, b = top_label_order(labels), top_label_order(slow_predicted_keys(scores))
    cost, pairs = 0.0, 0
    for i, j in itertools.combinations(range(len(scores)), 2):
        pairs += 1
        ta, tb = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
        cost += 1.0 if ta * tb < 0 else (p if (ta == 0) != (tb == 0) else 0.0)
    return cost / pairs


def slow_footrule(scores: list[float], labels: list[float]) -> float:
    def positions(bucket: list[int]) -> list[float]:
        out = []
        for b in bucket:
            before = sum(1 for c in bucket if c < b)
            tied = sum(1 for c in bucket if c == b)
            out.append(before + (tied + 1) / 2)
        return out

    pa = positions(top_label_order(labels))
    pb = positions(top_label_order(slow_predicted_keys(scores)))
    return sum(abs(x - y) for x, y in zip(pa, pb, strict=True)) / (len(scores) ** 2 // 2)


@pytest.mark.parametrize("penalty", [0.0, 0.5, 1.0])
def test_top_label_distances_equal_slow_loops(penalty):
    rng = np.random.default_rng(6)
    grades = np.zeros((60, 6))
    for row in grades:
        relevant = rng.permutation(6)[: rng.integers(0, 7)]
        row[relevant] = np.arange(len(relevant), 0, -1)
    s = rng.integers(-2, 4, grades.shape).astype(np.float64)
    ours_k = kendall_tau_distance(torch.tensor(s), torch.tensor(grades), penalty=penalty).numpy()
    ours_f = footrule_distance(torch.tensor(s), torch.tensor(grades)).numpy()
    for i in range(len(s)):
        assert ours_k[i] == pytest.approx(slow_kendall(list(s[i]), list(grades[i]), penalty), abs=1e-6)
        assert ours_f[i] == pytest.approx(slow_footrule(list(s[i]), list(grades[i])), abs=1e-6)


def test_kendall_distance_of_strict_rankings_is_scipys_tau():
    rng = np.random.default_rng(7)
    for _ in range(20):
        labels = rng.permutation(7) + 1.0  # every label relevant, strictly ranked
        scores = rng.random(7) + 0.1  # every score positive, distinct
        tau = kendalltau(labels, scores).statistic
        ours = kendall_tau_distance(torch.tensor(scores[None]), torch.tensor(labels[None])).item()
        assert ours == pytest.approx((1 - tau) / 2, abs=1e-6)
