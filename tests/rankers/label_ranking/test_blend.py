"""The blend of Algorithm 1 with the calibration constraints' logistic solution, and its CV choice."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_multilabel_classification
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import hamming_loss, label_ranking_loss

from rankers.label_ranking.blend import blend, choose_blend, fit_online


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
    candidates = [(0.3, 0.0), (1.0, 0.25), (3.0, 0.25), (1.0, 1.0)]
    chosen, table = choose_blend(x, y, candidates, folds=3, seed=5, online={"epochs": 2, "n_runs": 2})
    # share 0 is binary relevance: recompute it with scikit-learn alone on the folds choose_blend draws
    order = np.random.default_rng(5).permutation(len(x))
    for C in (0.3, 1.0):
        expected = np.zeros(2)
        for held in np.array_split(order, 3):
            train = np.setdiff1d(order, held)
            fitted = [LogisticRegression(C=C, tol=1e-10, max_iter=10_000).fit(x[train], y[train, j]) for j in range(4)]
            scores = np.column_stack([model.decision_function(x[held]) for model in fitted])
            expected += [label_ranking_loss(y[held], scores) / 3, hamming_loss(y[held], scores > 0) / 3]
        np.testing.assert_allclose(table[C, 0.0], expected, rtol=1e-5, atol=1e-7)
    assert set(table) == {*candidates, (1.0, 0.0)}  # the reference, binary relevance at C=1, is always scored
    # the rule, recomputed from the table: the lowest worse ratio to the reference over both measures
    worse = {c: max(np.array(table[c]) / np.array(table[1.0, 0.0])) for c in candidates}
    assert worse[chosen] == min(worse.values())


def test_an_algorithm_1_part_that_costs_the_cut_is_not_taken(monkeypatch):
    """With an Algorithm 1 part that calls every label relevant, whatever x, any share of it costs the cut."""
    import rankers.label_ranking.blend as blend_module

    x, y = make_multilabel_classification(n_samples=150, n_features=6, n_classes=3, random_state=2)
    x = x / x.max(0)

    def adversary(features, relevant, **options):
        return np.zeros((relevant.shape[1], features.shape[1])), np.ones(relevant.shape[1])

    monkeypatch.setattr(blend_module, "fit_online", adversary)
    (_, share), table = choose_blend(x, y, [(1.0, 0.0), (1.0, 0.5), (1.0, 1.0)], folds=3, seed=0)
    assert share == 0.0 and table[1.0, 1.0][1] > 1.5 * table[1.0, 0.0][1]


def test_a_tie_goes_to_the_reference_c_then_the_smaller_share(monkeypatch):
    import rankers.label_ranking.blend as blend_module

    x, y = make_multilabel_classification(n_samples=90, n_features=5, n_classes=3, random_state=4)
    monkeypatch.setattr(blend_module, "ranking_and_hamming", lambda part, features, relevant: np.ones(2))
    candidates = [(3.0, 0.5), (0.3, 0.2), (1.0, 0.7), (1.0, 0.2)]
    assert choose_blend(x, y, candidates, online={"epochs": 1, "n_runs": 1})[0] == (1.0, 0.2)


def test_fit_online_separates_a_separable_problem():
    x = np.eye(4)
    y = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]])
    weight, bias = fit_online(x, y, epochs=10, n_runs=3, seed=0)
    assert ((x @ weight.T + bias) > 0).astype(int).tolist() == y.tolist()
