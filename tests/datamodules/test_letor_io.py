"""LETOR reader: parsing, errors naming file and line, cache, property round-trip."""

from __future__ import annotations

import bz2
import gzip
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamodules.letor_io import LetorFormatError, read_doc_ids, read_letor

GOOD = """# a header comment
2 qid:10 1:0.5 3:1.5 # docid = A
0 qid:10 2:-1 # docid = B

1 qid:7 1:1 2:2 3:3 4:4
# a comment line between queries
0 qid:7 4:0.25
"""


def write(tmp_path, text, name="f.txt"):
    path = tmp_path / name
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    elif name.endswith(".bz2"):
        path.write_bytes(bz2.compress(text.encode()))
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["f.txt", "f.txt.gz", "f.txt.bz2"])
def test_sparse_dense_comments_blank_lines(tmp_path, name):
    data = read_letor(write(tmp_path, GOOD, name))
    expected = np.array([[0.5, 0, 1.5, 0], [0, -1, 0, 0], [1, 2, 3, 4], [0, 0, 0, 0.25]], dtype=np.float32)
    np.testing.assert_array_equal(data.features, expected)
    np.testing.assert_array_equal(data.labels, [2, 0, 1, 0])
    np.testing.assert_array_equal(data.qids, [10, 10, 7, 7])
    np.testing.assert_array_equal(data.offsets, [0, 2, 4])
    assert read_doc_ids(write(tmp_path, GOOD, name)) == ["A", "B", "line5", "line7"]


BAD = {
    "malformed pair": ("1 qid:1 1:0.5\n0 qid:1 1:0.5 7\n", 2, "not of the form index:value"),
    "non-numeric value": ("1 qid:1 1:0.5\n1 qid:1 1:abc\n", 2, "'abc' of feature 1 is not a number"),
    "non-numeric label": ("x qid:1 1:0.5\n", 1, "label 'x' is not a number"),
    "nan": ("1 qid:1 1:0.5\n\n0 qid:1 1:nan\n", 3, "NaN or infinite"),
    "inf": ("1 qid:1 1:inf\n", 1, "NaN or infinite"),
    "not contiguous": ("1 qid:1 1:1\n0 qid:2 1:1\n1 qid:1 1:0\n", 3, "qid 1 are not contiguous"),
    "missing qid": ("1 qid:1 1:1\n0 1:1\n", 2, "expected 'qid:<integer>'"),
    "index 0 in a one-based file": ("1 qid:1 0:1\n", 1, "below 1"),
    "unsorted indices": ("1 qid:1 3:1 2:1\n", 1, "must increase"),
    "negative label": ("1 qid:1 1:1\n-1 qid:1 1:1\n", 2, "negative label"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_names_file_and_line(tmp_path, case):
    text, line, message = BAD[case]
    path = write(tmp_path, text)
    with pytest.raises(LetorFormatError) as error:
        read_letor(path)
    assert f"{path}:{line}:" in str(error.value) and message in str(error.value)


def test_empty_and_comment_only_files(tmp_path):
    with pytest.raises(LetorFormatError, match="empty file"):
        read_letor(write(tmp_path, "", "empty.txt"))
    with pytest.raises(LetorFormatError, match="no data lines"):
        read_letor(write(tmp_path, "# nothing\n\n", "comments.txt"))
    with pytest.raises(FileNotFoundError):
        read_letor(tmp_path / "missing.txt")


def test_cache_gives_same_data_and_follows_file_changes(tmp_path):
    path = write(tmp_path, GOOD)
    cache = tmp_path / "cache"
    first = read_letor(path, cache_dir=cache)
    assert len(list(cache.glob("*/done"))) == 1
    second = read_letor(path, cache_dir=cache)
    for name in ("features", "labels", "qids", "offsets"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
    time.sleep(0.01)
    path.write_text(GOOD.replace("2 qid:10", "3 qid:10"))
    assert read_letor(path, cache_dir=cache).labels[0] == 3  # new size/mtime: a new cache entry


@st.composite
def letor_files(draw):
    n_queries = draw(st.integers(1, 5))
    n_features = draw(st.integers(1, 6))
    rows = []
    for q in range(n_queries):
        for _ in range(draw(st.integers(1, 4))):
            label = draw(st.integers(0, 4))
            values = draw(
                st.lists(
                    st.one_of(st.just(0.0), st.floats(-1e3, 1e3, width=32)), min_size=n_features, max_size=n_features
                )
            )
            rows.append((label, q * 3 + 1, values))
    return n_features, rows


@settings(max_examples=40, deadline=None)
@given(letor_files(), st.booleans())
def test_round_trip_of_generated_files(tmp_path_factory, spec, comments):
    n_features, rows = spec
    lines = []
    for label, qid, values in rows:
        pairs = " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(values) if v != 0.0)
        lines.append(f"{label} qid:{qid} {pairs}" + (" # docid = x" if comments else ""))
    path = tmp_path_factory.mktemp("rt") / "f.txt"
    path.write_text("\n".join(lines) + "\n")
    data = read_letor(path).with_num_features(n_features)
    np.testing.assert_array_equal(data.features, np.array([r[2] for r in rows], dtype=np.float32))
    np.testing.assert_array_equal(data.labels, [r[0] for r in rows])
    assert data.num_queries == len({r[1] for r in rows})
