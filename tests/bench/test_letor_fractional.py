"""bench/letor_fractional.py: fractional grades as the mean of noisy assessors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bench.letor_fractional import fractional_grades, rewrite
from datamodules.letor_io import read_letor


def test_grades_are_means_of_rounded_clipped_judgements_on_the_same_scale():
    grades = np.repeat(np.arange(5.0), 400)
    new = fractional_grades(grades, np.random.default_rng(0), assessors=3, noise=0.7)
    assert new.min() >= 0 and new.max() <= 4
    assert np.allclose(new * 3, np.round(new * 3))  # thirds
    assert len(np.unique(new)) > 5  # fractions, not the five grades
    means = [new[grades == g].mean() for g in range(5)]
    assert all(a < b for a, b in itertools.pairwise(means))  # the order of the grades survives
    assert np.array_equal(fractional_grades(grades, np.random.default_rng(0), assessors=3, noise=0.0), grades)


def test_rewrite_keeps_features_and_queries_and_is_seeded(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("2 qid:1 1:0.5 2:3 # d1\n0 qid:1 1:0.1 2:7 # d2\n4 qid:2 1:0.9 2:1 # d3\n")
    rewrite(source, tmp_path / "a.txt", seed=3, assessors=3, noise=0.7)
    rewrite(source, tmp_path / "b.txt", seed=3, assessors=3, noise=0.7)
    assert (tmp_path / "a.txt").read_text() == (tmp_path / "b.txt").read_text()
    before, after = read_letor(source), read_letor(tmp_path / "a.txt")
    assert np.array_equal(before.features, after.features) and np.array_equal(before.offsets, after.offsets)
    bad = tmp_path / "bad.txt"
    bad.write_text("2 qid:1 1:0.5\nqid:1 1:0.1\n")
    with pytest.raises(ValueError, match=r"bad\.txt:2: no numeric label"):
        rewrite(bad, tmp_path / "c.txt", seed=0, assessors=3, noise=0.7)
