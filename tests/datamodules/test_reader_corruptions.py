"""Every reader, fed a valid small file with a random corruption, either reads exactly what the
corrupted file says (each data line becomes one record: nothing dropped silently) or raises the
project's ``DataError`` naming the file. Nothing else: no bare IndexError, KeyError or ValueError
from inside, no NaN."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datamodules.errors import DataError
from datamodules.letor_io import read_letor
from datamodules.ratings_io import read_ratings


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
