"""Usunier et al.'s bound: eq. (1)'s d against brute force, the risks against loops, and the bound's
coverage on synthetic data whose true risk is known (Monte Carlo on a large independent sample)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from bench.selection_bound import coverage
from rankers.selection.bound import (
    bipartite_risk,
    certified_bound,
    disagreement,
    mcdiarmid_radius,
    permutation_ranks,
    worst_case_ranks,
)


def delta_of(labels: list[int], ranks: list[int]) -> float:
    """The paper's Delta by its double sum (relevant i above irrelevant j)."""
    rel = [i for i, y in enumerate(labels) if y > 0]
    irr = [j for j, y in enumerate(labels) if y <= 0]
    return sum(ranks[i] > ranks[j] for i in rel for j in irr) / (len(rel) * len(irr))


def brute_d(ranks: list[int], other: list[int]) -> float:
    """max over p + q = K of 1/(pq) times the largest sum of p differences, by enumerating subsets."""
    k = len(ranks)
    gaps = [a - b for a, b in zip(ranks, other, strict=True)]
    best = 0.0
    for p in range(1, k):
        top = max(sum(gaps[i] for i in subset) for subset in itertools.combinations(range(k), p))
        best = max(best, top / (p * (k - p)))
    return best


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6, 7])
def test_d_is_the_brute_force_maximum_over_p_q_and_bounds_every_labelling(k):
    rng = np.random.default_rng(k)
    for _ in range(25):
        ranks, other = rng.permutation(k).tolist(), rng.permutation(k).tolist()
        d = float(disagreement(torch.tensor([ranks]), torch.tensor([other]))[0])
        assert d == pytest.approx(brute_d(ranks, other), abs=1e-6)
        # eq. (1): Delta(y, f) - Delta(y, f') <= d for every labelling, with equality for some
        gaps = [
            delta_of(list(y), ranks) - delta_of(list(y), other)
            for y in itertools.product([0, 1], repeat=k)
            if 0 < sum(y) < k
        ]
        assert max(gaps) <= d + 1e-6  # d is float32
        assert max(gaps) == pytest.approx(d, abs=1e-6)


def test_d_on_padded_batches_matches_each_list_alone():
    rng = np.random.default_rng(0)
    lengths = [1, 2, 5, 8]
    ranks = torch.zeros(4, 8, dtype=torch.long)
    other = torch.zeros(4, 8, dtype=torch.long)
    mask = torch.zeros(4, 8, dtype=torch.bool)
    expected = []
    for row, n in enumerate(lengths):
        a, b = rng.permutation(n), rng.permutation(n)
        ranks[row, :n], other[row, :n], mask[row, :n] = torch.from_numpy(a), torch.from_numpy(b), True
        ranks[row, n:], other[row, n:] = 99, -99  # padding holds anything
        expected.append(brute_d(a.tolist(), b.tolist()) if n > 1 else 0.0)
    assert disagreement(ranks, other, mask).tolist() == pytest.approx(expected, abs=1e-6)


def tie_breakings(scores: list[float]) -> list[list[int]]:
    """Every ranking (0-based positions) consistent with descending ``scores``, ties in any order."""
    k = len(scores)
    out = []
    for order in itertools.permutations(range(k)):
        if all(scores[order[i]] >= scores[order[i + 1]] for i in range(k - 1)):
            positions = [0] * k
            for position, doc in enumerate(order):
                positions[doc] = position
            out.append(positions)
    return out


def test_worst_case_tie_breaking_maximizes_d_and_pessimistic_risk_maximizes_delta():
    rng = np.random.default_rng(1)
    for _ in range(40):
        k = int(rng.integers(2, 7))
        scores = rng.integers(0, 3, k).astype(float).tolist()  # many ties
        other = rng.permutation(k).tolist()
        candidates = tie_breakings(scores)
        worst = worst_case_ranks(torch.tensor([scores]), torch.tensor([other]))
        assert worst[0].tolist() in candidates
        d = float(disagreement(worst, torch.tensor([other]))[0])
        assert d == pytest.approx(max(brute_d(c, other) for c in candidates), abs=1e-6)
        labels = rng.integers(0, 2, k).tolist()
        if 0 < sum(labels) < k:
            risk, defined = bipartite_risk(
                permutation_ranks(torch.tensor([scores])),
                torch.tensor([labels], dtype=torch.float32),
                scores=torch.tensor([scores]),
            )
            assert bool(defined[0])
            assert float(risk[0]) == pytest.approx(max(delta_of(labels, c) for c in candidates), abs=1e-6)


def test_bipartite_risk_matches_the_double_sum_and_marks_queries_without_a_pair():
    rng = np.random.default_rng(2)
    scores = torch.from_numpy(rng.normal(size=(6, 9)).astype(np.float32))
    labels = torch.from_numpy(rng.integers(0, 3, (6, 9)).astype(np.float32))
    labels[:4, 0], labels[:4, 1] = 0.0, 1.0  # a pair in each of the first four
    labels[4] = 0.0  # no relevant document
    labels[5] = 2.0  # no irrelevant document
    mask = torch.ones(6, 9, dtype=torch.bool)
    mask[1, 6:] = False
    scores[1, 6:] = float("nan")  # padding holds anything
    ranks = permutation_ranks(scores, mask)
    risk, defined = bipartite_risk(ranks, labels, mask)
    assert defined.tolist() == [True, True, True, True, False, False]
    for row in range(4):
        n = int(mask[row].sum())
        order = ranks[row, :n].tolist()
        assert float(risk[row]) == pytest.approx(delta_of(labels[row, :n].tolist(), order), abs=1e-6)
    assert risk[4:].tolist() == [0.0, 0.0]


def test_certified_bound_adds_the_mcdiarmid_terms_of_eq_2():
    risks = [torch.tensor([0.1, 0.3, 0.0]), torch.tensor([0.2, 0.2, 0.5])]
    defined = [torch.tensor([True, True, False]), torch.tensor([True, True, True])]
    d = torch.tensor([0.1, 0.2, 0.3, 0.0])
    parts = certified_bound(risks, defined, d, training_pairs=torch.tensor([True, True, True, False]), delta=0.1)
    held = ((0.2 + mcdiarmid_radius(2, 0.1 / 4)) + (0.3 + mcdiarmid_radius(3, 0.1 / 4))) / 2
    assert parts.held_out_bound == pytest.approx(held)
    held_all = ((0.4 / 3 + mcdiarmid_radius(3, 0.1 / 4)) + (0.3 + mcdiarmid_radius(3, 0.1 / 4))) / 2
    assert parts.held_out_bound_all_queries == pytest.approx(held_all)
    assert parts.disagreement_bound == pytest.approx(0.15 + math.sqrt(math.log(40) / 8))
    pi = 0.75 - mcdiarmid_radius(4, 0.1 / 4)
    assert parts.bound == pytest.approx(min(1.0, held + parts.disagreement_bound / pi))
    with pytest.raises(ValueError, match="no query with both"):
        no_pairs = [torch.zeros(3, dtype=torch.bool)] * 2
        certified_bound(risks, no_pairs, d, training_pairs=torch.ones(4, dtype=torch.bool))


# ---------------------------------------------------------------- coverage on synthetic data


def test_the_bound_holds_in_at_least_one_minus_delta_of_repeated_draws():
    delta = 0.1
    parts, truths = coverage(40, n=300, m=300, docs=12, folds=5, delta=delta, truth_queries=4000)
    bounds = np.array([p.bound for p in parts])
    held = float(np.mean(truths <= bounds))
    assert held >= 1 - delta
    assert bounds.max() < 1.0  # not vacuous on this data: the statement is about a real number
    assert float(np.mean(bounds - truths)) > 0
