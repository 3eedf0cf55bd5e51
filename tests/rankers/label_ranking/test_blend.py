"""The blend of Algorithm 1 with the calibration constraints' logistic solution, and its CV choice."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_multilabel_classification
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import hamming_loss, label_ranking_loss

from rankers.label_ranking.blend import blend, choose_share, fit_online


@pytest.fixture(scope="module")
def planted() -> tuple[np.ndarray, np.ndarray]:
    x, y = make_multilabel_classification(n_samples=240, n_features=8, n_classes=4, random_state=0)
    return x / x.max(0), y


def test_a_blend_is_one_linear_function_of_both_parts_with_the_same_zero_point(planted):
    x, _ = planted
    rng = np.random.default_rng(1)
    first, second = (rng.normal(size=(4, 8)), rng.normal(size=4)), (rng.normal(size=(4, 8)), rng.normal(size=4))
    weight, bias = blend(first, second, x, 0.3)
    scores = lambda part: x @ part[0].T + part[1]  # noqa: E731
    rms = lambda part: np.sqrt(np.mean(scores(part) ** 2))  # noqa: E731
    expected = 0.7 * scores(first) / rms(first) + 0.3 * scores(second) / rms(second)
    np.testing.assert_allclose(x @ weight.T + bias, expected, rtol=1e-12)
    # share 0 and 1: each part alone, rescaled by a positive number (its order and its cut)
    for share, part in ((0.0, first), (1.0, second)):
        w, b = blend(first, second, x, share)
        np.testing.assert_allclose(x @ w.T + b, scores(part) / rms(part), rtol=1e-12)
    with pytest.raises(ValueError, match="share"):
        blend(first, second, x, 1.5)


def test_the_cv_table_matches_sklearn_on_the_same_folds_and_the_choice_follows_the_rule(planted):
    x, y = planted
    share, table = choose_share(
        x, y, [0.25, 1.0], base=0.1, margin=0.0, folds=3, seed=5, online={"epochs": 2, "n_runs": 2}
    )
    # share 0 is binary relevance: recompute it with scikit-learn alone on the folds choose_share draws
    order = np.random.default_rng(5).permutation(len(x))
    expected = np.zeros(2)
    for held in np.array_split(order, 3):
        train = np.setdiff1d(order, held)
        scores = np.column_stack(
            [LogisticRegression().fit(x[train], y[train, j]).decision_function(x[held]) for j in range(y.shape[1])]
        )
        expected += [label_ranking_loss(y[held], scores) / 3, hamming_loss(y[held], scores > 0) / 3]
    np.testing.assert_allclose(table[0.0], expected, rtol=1e-5, atol=1e-7)
    assert set(table) == {0.0, 0.1, 0.25, 1.0}
    # the rule, recomputed from the table: a larger share only if it beats the base on both measures
    worse = {s: max(np.array(table[s]) / np.array(table[0.1])) for s in (0.25, 1.0)}
    best = min(worse, key=worse.get)
    base_costs = max(np.array(table[0.1]) / np.array(table[0.0])) > 1.0
    assert share == (best if worse[best] < 1.0 else 0.0 if base_costs else 0.1)
    # a margin no share can clear keeps the base
    kept, _ = choose_share(x, y, [0.25, 1.0], base=0.1, margin=1.0, folds=3, seed=5, online={"epochs": 2, "n_runs": 2})
    assert kept == 0.1


def test_a_base_share_that_costs_the_cut_falls_back_to_binary_relevance(monkeypatch):
    """With an Algorithm 1 part that calls every label relevant, whatever x, any share of it costs the cut."""
    import rankers.label_ranking.blend as blend_module

    x, y = make_multilabel_classification(n_samples=150, n_features=6, n_classes=3, random_state=2)
    x = x / x.max(0)

    def adversary(features, relevant, **options):
        return np.zeros((relevant.shape[1], features.shape[1])), np.ones(relevant.shape[1])

    monkeypatch.setattr(blend_module, "fit_online", adversary)
    share, table = choose_share(x, y, [0.5], base=0.1, margin=0.02, folds=3, seed=0)
    assert share == 0.0 and max(np.array(table[0.1]) / np.array(table[0.0])) > 1.02


def test_fit_online_separates_a_separable_problem():
    x = np.eye(4)
    y = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]])
    weight, bias = fit_online(x, y, epochs=10, n_runs=3, seed=0)
    assert ((x @ weight.T + bias) > 0).astype(int).tolist() == y.tolist()
