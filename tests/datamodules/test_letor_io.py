"""LETOR reader: parsing, errors naming file and line, cache, property round-trip."""

from __future__ import annotations

import bz2
import gzip
import logging
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamodules.letor_io import LetorFormatError, read_doc_ids, read_letor
from tests.conftest import ROOT

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
    "qid beyond int64": ("1 qid:1 1:1\n0 qid:99999999999999999999 1:0.5\n", 2, "does not fit in a 64-bit integer"),
    "value beyond float32": ("1 qid:1 1:1\n0 qid:1 3:1e39\n", 2, "'1e39' of feature 3 is finite but too large"),
    "label beyond float32": ("1e39 qid:1 1:1\n", 1, "'1e39' of label is finite but too large for float32"),
    "header line": ("label qid features\n0 qid:1 1:0.5\n", 1, "looks like a header line"),
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


def test_lines_end_at_lone_carriage_returns_as_everywhere_else(tmp_path):
    path = tmp_path / "cr.txt"
    path.write_bytes(b"0 qid:1 1:0.5 # a\r1 qid:1 1:0.7 # b\r2 qid:2 1:0.1 # c\r")
    data = read_letor(path)
    np.testing.assert_array_equal(data.labels, [0, 1, 2])
    np.testing.assert_array_equal(data.offsets, [0, 2, 3])
    # mixed endings: the parser's rows and read_doc_ids' ids are the same lines
    path.write_bytes(b"0 qid:1 1:1 # docid = A\r\n1 qid:1 1:2 # docid = B\r2 qid:2 1:3 # docid = C\n")
    np.testing.assert_array_equal(read_letor(path).features[:, 0], [1, 2, 3])
    assert read_doc_ids(path) == ["A", "B", "C"]


def test_a_stray_carriage_return_in_a_comment_is_a_line_end_reported_by_number(tmp_path):
    path = tmp_path / "stray.txt"
    path.write_bytes(b"0 qid:1 1:1 # docid = A\n1 qid:1 1:2 # docid = B\rjunk\n2 qid:2 1:3 # docid = C\n")
    with pytest.raises(LetorFormatError, match=r"stray.txt:3: label 'junk' is not a number"):
        read_letor(path)


def test_a_byte_order_mark_is_not_data(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbf2 qid:1 1:0.5 # docid = A\n0 qid:1 1:0.25 # docid = B\n")
    data = read_letor(path)
    np.testing.assert_array_equal(data.labels, [2, 0])
    assert read_doc_ids(path) == ["A", "B"]


@pytest.mark.parametrize("name", ["f.txt.gz", "f.txt.bz2"])
def test_truncated_compressed_files_name_the_file(tmp_path, name):
    whole = write(tmp_path, GOOD * 200, name).read_bytes()
    path = tmp_path / ("cut-" + name)
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(LetorFormatError, match=rf"cut-{name}: compressed data is truncated or corrupt"):
        read_letor(path)


def test_binary_input_gets_a_short_error(tmp_path):
    path = tmp_path / "binary.txt"
    path.write_bytes(bytes(np.random.default_rng(0).integers(0, 256, 4_000_000, dtype=np.uint8)))
    with pytest.raises(LetorFormatError) as error:
        read_letor(path)
    assert str(error.value).startswith(f"{path}:") and len(str(error.value)) < 300


def test_a_huge_feature_index_is_refused_before_allocating(tmp_path):
    lines = [f"1 qid:{q} 1:0.5 2:0.25" for q in range(50)]
    lines.insert(7, "0 qid:7 3:1 10000000:0.5")
    path = write(tmp_path, "\n".join(lines) + "\n")
    with pytest.raises(LetorFormatError, match=r"f.txt:8: feature index 10000000 makes the dense feature matrix"):
        read_letor(path, max_dense_bytes=100 << 20)
    assert read_letor(path, max_dense_bytes=4 << 30).num_features == 10_000_000  # within a given limit


def test_labels_whose_exp2_gain_overflows_are_refused_at_load_time(tmp_path):
    from datamodules.letor import LetorDataModule

    path = write(tmp_path, "1 qid:1 1:0.5\n0 qid:1 1:0.1\n\n130 qid:2 1:0.2\n0 qid:2 1:0.3\n")
    with pytest.raises(LetorFormatError, match=r"f.txt:4: label 130 has gain 2\*\*130 - 1 under gain='exp2'"):
        LetorDataModule(str(path), str(path), gain="exp2").setup()
    linear = LetorDataModule(str(path), str(path), gain="linear")
    linear.setup()
    assert linear.splits["train"].labels.max() == 130


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300), st.sampled_from(["f.txt", "f.txt.gz", "f.txt.bz2"]))
def test_random_bytes_give_a_letor_error_or_data(tmp_path_factory, blob, name):
    path = tmp_path_factory.mktemp("fuzz") / name
    if name.endswith(".gz"):
        blob = gzip.compress(blob)[: max(1, len(blob))]  # often cut: a truncated stream
    elif name.endswith(".bz2"):
        blob = bz2.compress(blob)[: max(1, len(blob))]
    path.write_bytes(blob)
    try:
        data = read_letor(path)
    except LetorFormatError as error:
        assert str(path) in str(error) and len(str(error)) < 600
    else:
        assert len(read_doc_ids(path)) == len(data.labels) and np.isfinite(data.features).all()


@settings(max_examples=40, deadline=None)
@given(
    letor_files(),
    st.sampled_from(["\n", "\r\n", "\r"]),
    st.booleans(),
    st.sampled_from(["f.txt", "f.txt.gz", "f.txt.bz2"]),
)
def test_round_trip_with_any_line_end_mark_and_compression(tmp_path_factory, spec, newline, bom, name):
    n_features, rows = spec
    lines = ["# generated"]
    for number, (label, qid, values) in enumerate(rows):
        pairs = " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(values) if v != 0.0)
        lines += [f"{label} qid:{qid} {pairs} # docid = d{number}", ""]
    text = ("\ufeff" if bom else "") + newline.join(lines) + newline
    path = write(tmp_path_factory.mktemp("rt"), text, name)
    data = read_letor(path).with_num_features(n_features)
    np.testing.assert_array_equal(data.features, np.array([r[2] for r in rows], dtype=np.float32))
    np.testing.assert_array_equal(data.labels, [r[0] for r in rows])
    assert read_doc_ids(path) == [f"d{number}" for number in range(len(rows))]


def test_the_size_guard_respects_the_address_space_limit(tmp_path):
    """Under ``ulimit -v`` (RLIMIT_AS), as batch schedulers set it, the guard measures what this
    process may still map, not the machine's RAM: an error naming line, index and the fix, not a
    bare MemoryError."""
    lines = [f"{q % 3} qid:{q} 1:0.5 2:0.25" for q in range(200)]
    lines.insert(26, "0 qid:26 3:1 10000000:0.5")
    path = write(tmp_path, "\n".join(lines) + "\n")  # 201 x 10M float32 = 7.5 GiB dense
    script = (
        "import os, resource, sys\n"
        "from datamodules.letor_io import read_letor\n"
        "used = int(open('/proc/self/statm').read().split()[0]) * os.sysconf('SC_PAGE_SIZE')\n"
        "resource.setrlimit(resource.RLIMIT_AS, (used + (1 << 30), resource.RLIM_INFINITY))\n"
        f"read_letor({str(path)!r})\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("datamodules.letor_io.LetorFormatError: ") and "MemoryError" not in done.stderr
    assert f"{path}:27: feature index 10000000" in last and "address-space limit (ulimit -v)" in last
    assert "data.max_features=3" in last


def test_max_features_drops_higher_indices_and_counts_them(tmp_path, caplog):
    path = write(tmp_path, "1 qid:1 1:0.5 2:0.25\n0 qid:1 1:0.1 9:3 12:1\n1 qid:2 2:0.5 12:4\n")
    with caplog.at_level(logging.WARNING):
        data = read_letor(path, max_features=2)
    assert data.num_features == 2
    np.testing.assert_array_equal(data.features, np.float32([[0.5, 0.25], [0.1, 0], [0, 0.5]]))
    assert "max_features=2 drops 3 value(s) of higher feature indices (the first on line 2)" in caplog.text
    assert read_letor(path, max_features=20).num_features == 12  # nothing above: nothing dropped
