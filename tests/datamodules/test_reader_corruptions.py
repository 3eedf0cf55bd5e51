"""Every reader, fed a valid small file with a random corruption, either reads exactly what the
corrupted file says (each data line becomes one record: nothing dropped silently) or raises the
project's ``DataError`` naming the file. Nothing else: no bare IndexError, KeyError or ValueError
from inside, no NaN."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from datamodules.errors import DataError
from datamodules.letor_io import read_letor
from datamodules.multilabel_io import read_arff, read_svmlight_multilabel
from datamodules.ratings_io import read_ratings
from datamodules.tabular import read_numeric_table


def letor_file(draw) -> bytes:
    n_queries = draw(st.integers(1, 3))
    lines = []
    for qid in range(n_queries):
        for _ in range(draw(st.integers(1, 3))):
            values = draw(st.lists(st.floats(-5, 5, width=32, allow_subnormal=False), min_size=1, max_size=4))
            pairs = " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(values))
            lines.append(f"{draw(st.integers(0, 4))} qid:{qid + 1} {pairs}")
    return ("\n".join(lines) + "\n").encode()


def ratings_file(draw) -> bytes:
    rows = draw(st.lists(st.tuples(st.integers(1, 6), st.integers(1, 9), st.integers(1, 5)), min_size=1, max_size=8))
    unique = {(user, item): rating for user, item, rating in rows}  # one rating per (user, item)
    return "".join(f"{u}\t{i}\t{r}\n" for (u, i), r in unique.items()).encode()


@st.composite
def corrupted(draw, valid: Callable) -> bytes:
    """A valid file, then one random corruption: a byte replaced, inserted or deleted, the file cut,
    a line repeated, a BOM or CRLF line ends."""
    data = bytearray(valid(draw))
    kind = draw(st.sampled_from(["replace", "insert", "delete", "cut", "repeat", "bom", "crlf", "none"]))
    at = draw(st.integers(0, max(len(data) - 1, 0)))
    byte = draw(st.sampled_from(b" \t\n\r:#,.-+e0123456789qidnaf\x00\xff\xc3"))
    if kind == "replace" and data:
        data[at] = byte
    elif kind == "insert":
        data.insert(at, byte)
    elif kind == "delete" and data:
        del data[at]
    elif kind == "cut":
        data = data[:at]
    elif kind == "repeat":
        lines = bytes(data).split(b"\n")
        data = bytearray(b"\n".join([*lines[:1], *lines]))
    elif kind == "bom":
        data = bytearray(b"\xef\xbb\xbf" + data)
    elif kind == "crlf":
        data = bytearray(bytes(data).replace(b"\n", b"\r\n"))
    return bytes(data)


def data_lines(data: bytes, comment: bytes = b"#") -> int:
    text = data.removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return sum(1 for line in text.split(b"\n") if line.strip() and not line.strip().startswith(comment))


def outcome(path: Path, read: Callable) -> object | None:
    """What ``read(path)`` gives, or None after checking its error names the file."""
    try:
        return read(path)
    except DataError as error:
        assert path.name in str(error), str(error)
        return None


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(data=corrupted(letor_file))
def test_a_corrupted_letor_file_reads_whole_or_is_refused_by_name(tmp_path, data):
    path = tmp_path / "corrupt.txt"
    path.write_bytes(data)
    read = outcome(path, read_letor)
    if read is not None:
        assert len(read.labels) == data_lines(data)  # every data line is a document
        assert np.isfinite(read.features).all() and np.isfinite(read.labels).all()


@SETTINGS
@given(data=corrupted(ratings_file))
def test_a_corrupted_ratings_file_reads_whole_or_is_refused_by_name(tmp_path, data):
    path = tmp_path / "corrupt.tsv"
    path.write_bytes(data)
    table = outcome(path, lambda p: read_ratings(p, duplicates="first"))
    if table is not None:
        # a repeated line is a counted duplicate, a header line is reported as one: nothing else vanishes
        assert len(table) + table.duplicates_dropped + (table.statistics["header"] is not None) == data_lines(data)
        assert np.isfinite(table.ratings).all()


def arff_file(draw) -> bytes:
    """A dense MULAN ARFF file: two 0/1 labels around numeric features."""
    n_features = draw(st.integers(1, 3))
    header = ["@relation r", "@attribute L1 {0,1}"]
    header += [f"@attribute x{j} numeric" for j in range(n_features)] + ["@attribute L2 {0,1}", "@data"]
    rows = []
    for _ in range(draw(st.integers(1, 4))):
        values = draw(
            st.lists(st.floats(-5, 5, width=32, allow_subnormal=False), min_size=n_features, max_size=n_features)
        )
        rows.append(",".join([str(draw(st.integers(0, 1))), *map(repr, values), str(draw(st.integers(0, 1)))]))
    return ("\n".join(header + rows) + "\n").encode()


def svmlight_multilabel_file(draw) -> bytes:
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        labels = ",".join(map(str, sorted(draw(st.sets(st.integers(0, 3), max_size=3)))))
        values = draw(st.lists(st.floats(-5, 5, width=32, allow_subnormal=False), min_size=1, max_size=3))
        lines.append(f"{labels} " + " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(values)))
    return ("\n".join(lines) + "\n").encode()


def arff_data_rows(data: bytes) -> int:
    """Data lines after ``@data`` (ARFF comments start with %)."""
    text = data.removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    after = text.lower().split(b"@data", 1)[-1].split(b"\n")[1:]
    return sum(1 for line in after if line.strip() and not line.strip().startswith(b"%"))


@SETTINGS
@given(data=corrupted(arff_file))
# liac-arff raised a bare ValueError on a tab after @relation (found by this test)
@example(data=b"@relation\tr\n@attribute L1 {0,1}\n@attribute x0 numeric\n@attribute L2 {0,1}\n@data\n0,0.0,0\n")
def test_a_corrupted_arff_file_reads_whole_or_is_refused_by_name(tmp_path, data):
    path = tmp_path / "corrupt.arff"
    path.write_bytes(data)
    read = outcome(path, lambda p: read_arff(p, labels=["L1", "L2"]))
    if read is not None:
        assert len(read.labels) == arff_data_rows(data)  # every data row is an instance
        assert set(np.unique(read.labels).tolist()) <= {0.0, 1.0}
        assert np.isfinite(read.features).all()


@SETTINGS
@given(data=corrupted(svmlight_multilabel_file))
@example(data=b" 1:0.\r 2:0.0\n")  # a lone \r: two lines, which sklearn's parser read as one
def test_a_corrupted_svmlight_multilabel_file_reads_whole_or_is_refused_by_name(tmp_path, data):
    path = tmp_path / "corrupt.svm"
    path.write_bytes(data)
    read = outcome(path, read_svmlight_multilabel)
    if read is not None:
        read_data, _ = read
        assert len(read_data.labels) == data_lines(data)  # every line is an instance
        assert np.isfinite(read_data.features).all()


def numeric_table_file(draw) -> bytes:
    """scikit-learn's CSV form: a count line, the column names, rows of numbers (last: the target)."""
    n_columns = draw(st.integers(2, 4))
    rows = draw(
        st.lists(st.lists(st.integers(-99, 99), min_size=n_columns, max_size=n_columns), min_size=1, max_size=4)
    )
    lines = [f"{len(rows)},{n_columns - 1}", ",".join(f"c{j}" for j in range(n_columns))]
    lines += [",".join(map(str, row)) for row in rows]
    return ("\n".join(lines) + "\n").encode()


@SETTINGS
@given(data=corrupted(numeric_table_file))
# non-UTF-8 and NUL bytes were a bare UnicodeDecodeError / csv.Error (found by this test)
@example(data=b"\xff,1\nc0,c1\n0,0\n")
@example(data=b"2,1\nc0,c1\n0,\x001\n1,2\n")
@example(data=b",1,1\nc0,c1\n0,0\n")  # counts after a blank cell: int('') (found by this test)
def test_a_corrupted_numeric_table_reads_whole_or_is_refused_by_name(tmp_path, data):
    path = tmp_path / "corrupt.csv"
    path.write_bytes(data)
    read = outcome(path, read_numeric_table)
    if read is not None:
        features, target, _ = read
        assert len(target) == len(features) >= 1
        assert np.isfinite(features).all() and np.isfinite(target).all()
