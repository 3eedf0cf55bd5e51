"""bench/letor_rescale.py: an increasing heavy-tailed map per feature, the file otherwise kept."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file

from bench.letor_rescale import heavy_tail, heavy_tail_maps, rescale_file

LINES = [
    "2 qid:1 1:0.0 2:0.5 3:1.0 # doc a",
    "0 qid:1 1:0.25 2:0.75 3:0.1",
    "1 qid:2 2:0.2 3:0.9 # doc c",
]


def test_each_feature_keeps_the_order_of_its_values_and_spans_zero_to_its_scale():
    curvature, scale = heavy_tail_maps(4, seed=3)
    values = np.linspace(0.0, 1.0, 101)[:, None].repeat(4, 1)
    mapped = heavy_tail(values, curvature, scale)
    assert np.all(np.diff(mapped, axis=0) > 0)
    np.testing.assert_allclose(mapped[0], 0.0, atol=1e-12)
    np.testing.assert_allclose(mapped[-1], scale, rtol=1e-12)
    # the heavy tail: with a_f large, the middle value is a tiny share of the top one
    steep = curvature.argmax()
    assert mapped[50, steep] / mapped[-1, steep] < np.exp(-curvature[steep] / 2) * 1.01


def test_the_maps_depend_on_the_seed_alone():
    first, second, other = heavy_tail_maps(6, seed=1), heavy_tail_maps(6, seed=1), heavy_tail_maps(6, seed=2)
    np.testing.assert_array_equal(first[0], second[0])
    assert not np.allclose(first[0], other[0])


def test_a_file_keeps_labels_queries_comments_and_the_map_of_each_value(tmp_path):
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(LINES) + "\n")
    assert rescale_file(source, target, seed=7, n_features=3) == 3
    before, labels, queries = load_svmlight_file(str(source), n_features=3, query_id=True)
    after, labels_after, queries_after = load_svmlight_file(str(target), n_features=3, query_id=True)
    np.testing.assert_array_equal(labels, labels_after)
    np.testing.assert_array_equal(queries, queries_after)
    expected = heavy_tail(before.toarray(), *heavy_tail_maps(3, seed=7))
    np.testing.assert_allclose(after.toarray(), expected, rtol=1e-5)
    text = target.read_text().splitlines()
    assert text[0].endswith("# doc a") and text[2].endswith("# doc c")


def test_a_feature_beyond_the_stated_count_is_refused_with_its_line(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text(LINES[0] + "\n1 qid:1 4:0.3\n")
    with pytest.raises(ValueError, match=r"in.txt:2: feature 4 outside 1..3"):
        rescale_file(source, tmp_path / "out.txt", seed=0, n_features=3)


def test_a_value_that_is_not_a_number_is_refused_with_its_line(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text(LINES[0] + "\n" + LINES[1] + "\n1 qid:2 2:abc\n")
    with pytest.raises(ValueError, match=r"in.txt:3: feature 2 has no number: 'abc'"):
        rescale_file(source, tmp_path / "out.txt", seed=0, n_features=3)
