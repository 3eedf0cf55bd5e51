"""The ratings reader: formats, line-numbered errors, the duplicate policy, scales, and fuzzing."""

from __future__ import annotations

import gzip
import string

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datamodules.ratings_io import (
    MAX_FIELD_BYTES,
    RatingScale,
    RatingsFormatError,
    RatingsTable,
    read_ratings,
    resolve_scale,
    write_ratings,
)

ML_100K = "196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n"
ML_1M = "1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::978298413\n"
ML_LATEST = "userId,movieId,rating,timestamp\n1,1,4.0,964982703\n1,3,4.5,964981247\n2,1,0.5,964982224\n"


def _read(tmp_path, content: bytes | str, name: str = "ratings.txt", **options) -> RatingsTable:
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return read_ratings(path, **options)


def _triples(table: RatingsTable) -> list[tuple[str, str, float]]:
    return [(table.user_ids[u], table.item_ids[i], r) for u, i, r in zip(table.users, table.items, table.ratings)]


@pytest.mark.parametrize(
    ("content", "expected", "header"),
    [
        (ML_100K, [("196", "242", 3.0), ("186", "302", 3.0), ("22", "377", 1.0)], None),
        (ML_1M, [("1", "1193", 5.0), ("1", "661", 3.0), ("2", "1193", 4.0)], None),
        (ML_LATEST, [("1", "1", 4.0), ("1", "3", 4.5), ("2", "1", 0.5)], ("userId", "movieId", "rating", "timestamp")),
        ("u1 the-matrix 5\n# a comment\n\nu2  the-matrix   2  # trailing comment\n", None, None),
    ],
    ids=["ml-100k", "ml-1m", "ml-latest", "string-ids-comments"],
)
def test_movielens_formats(tmp_path, content, expected, header):
    table = _read(tmp_path, content)
    assert table.header == header
    if expected is not None:
        assert _triples(table) == expected
        assert table.timestamps is not None and table.timestamps[0] > 8e8
    else:
        assert _triples(table) == [("u1", "the-matrix", 5.0), ("u2", "the-matrix", 2.0)]
        assert table.lines.tolist() == [1, 4]


def test_byte_order_mark_and_header_are_read_not_misread(tmp_path):
    # issue 9: a BOM or a header used to give "label '\ufeff0' is not a number"
    table = _read(tmp_path, b"\xef\xbb\xbf" + ML_LATEST.encode())
    assert table.header == ("userId", "movieId", "rating", "timestamp")
    assert _triples(table)[0] == ("1", "1", 4.0)
    assert table.statistics["byte_order_mark"] is True
    assert table.lines.tolist() == [2, 3, 4]


def test_crlf_and_lone_cr_line_ends(tmp_path):
    table = _read(tmp_path, "1 1 3\r\n1 2 4\r2 1 5\r")
    assert _triples(table) == [("1", "1", 3.0), ("1", "2", 4.0), ("2", "1", 5.0)]
    assert table.lines.tolist() == [1, 2, 3]


def test_gzip_file(tmp_path):
    path = tmp_path / "ratings.dat.gz"
    path.write_bytes(gzip.compress(ML_1M.encode()))
    assert len(read_ratings(path)) == 3


def test_ids_are_strings_so_huge_ids_cannot_overflow(tmp_path):
    # issue 9: a user id beyond int64 used to be a bare OverflowError
    table = _read(tmp_path, "99999999999999999999 1 3\n017 1 4\n17 1 5\n")
    assert sorted(table.user_ids) == ["017", "17", "99999999999999999999"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("1 1 3\n1 2 inf\n", r"ratings.txt:2: rating 'inf' is NaN or infinite"),
        ("1 1 3\n1 2 1e400\n", r"ratings.txt:2: rating '1e400' is too large for a float64"),
        ("1 1 nan\n", r"ratings.txt:1: rating 'nan' is NaN or infinite"),
        ("1 1 3\n\n1 2 x\n", r"ratings.txt:3: rating 'x' is not a number"),
        ("1 1 3 5\n1 2 4 1e999\n", r"ratings.txt:2: timestamp '1e999' is too large"),
        ("1 1 3 5\n1 2 4 yesterday\n", r"ratings.txt:2: timestamp 'yesterday' is neither a number nor an ISO"),
        ("1 2 3\n1 2\n", r"ratings.txt:2: expected 'user item rating \[timestamp\]', got 2 fields: '1 2'"),
        ("1 2 3\n1 3 4 5\n", r"ratings.txt:2: 4 fields where line 1 has 3"),
        ("1 2 3 4 5 6\n", r"ratings.txt:1: expected 'user item rating \[timestamp\]', got 6 fields"),
        ("# only a comment\n\n", r"ratings.txt: no ratings"),
        ("", r"ratings.txt: no ratings"),
        ("userId,movieId,rating\n", r"ratings.txt: no ratings after the header line"),
        ("1 1 " + "9" * (MAX_FIELD_BYTES + 1) + "\n", rf"ratings.txt:1: field 3 is {MAX_FIELD_BYTES + 1} bytes long"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path, content, message):
    with pytest.raises(RatingsFormatError, match=message):
        _read(tmp_path, content)


def test_non_utf8_byte_names_the_line(tmp_path):
    # issue 9: used to be a bare UnicodeDecodeError
    with pytest.raises(RatingsFormatError, match=r"ratings.txt:2: byte b'\\xff' is not UTF-8"):
        _read(tmp_path, b"1 1 3\n1 \xff 4\n")


def test_truncated_gzip_is_a_format_error(tmp_path):
    path = tmp_path / "ratings.gz"
    path.write_bytes(gzip.compress(ML_1M.encode() * 50)[:40])
    with pytest.raises(RatingsFormatError, match=r"ratings\.gz: cannot read"):
        read_ratings(path)


def test_an_error_message_is_short_on_a_binary_line(tmp_path):
    with pytest.raises(RatingsFormatError) as error:
        _read(tmp_path, "1 2 3\n" + "a " * 100_000 + "\n")
    assert len(str(error.value)) < 300


DUPLICATED = "1 10 1 100\n1 20 4 100\n2 10 2 100\n1 10 5 50\n"  # user 1 rated item 10 at t=100 and, earlier, t=50


def test_duplicates_keep_the_latest_rating_and_are_counted(tmp_path):
    # issue 9: a second rating of an item used to become an extra example with a conflicting label
    table = _read(tmp_path, DUPLICATED)
    assert table.duplicates_dropped == 1 and table.statistics["duplicates_dropped"] == 1
    assert _triples(table) == [("1", "10", 1.0), ("1", "20", 4.0), ("2", "10", 2.0)]  # t=100 beats t=50
    first = _read(tmp_path, DUPLICATED, duplicates="first")
    assert _triples(first) == [("1", "20", 4.0), ("2", "10", 2.0), ("1", "10", 5.0)]


def test_duplicates_without_timestamps_follow_the_file_order(tmp_path):
    table = _read(tmp_path, "1 10 1\n1 10 5\n")
    assert _triples(table) == [("1", "10", 5.0)] and table.duplicates_dropped == 1


def test_duplicates_can_be_refused(tmp_path):
    with pytest.raises(RatingsFormatError, match=r"ratings.txt:4: user '1' rated item '10' again \(first on line 1\)"):
        _read(tmp_path, DUPLICATED, duplicates="error")


# -- scales -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratings", "scale", "n_ranks"),
    [
        ([1, 2, 3, 4, 5], (1, 5, 1), 5),
        ([0.5, 1.5, 4.0, 5.0], (0.5, 5, 0.5), 10),
        ([0.0, 0.2, 0.6, 1.0], (0, 1, 0.2), 6),  # EachMovie
        ([1, 3, 5], (1, 5, 2), 3),
    ],
)
def test_scale_is_inferred_from_the_data(tmp_path, ratings, scale, n_ranks):
    table = _read(tmp_path, "".join(f"u{i} m {r}\n" for i, r in enumerate(ratings)))
    inferred = resolve_scale(table)
    assert (inferred.minimum, inferred.maximum) == pytest.approx(scale[:2])
    assert inferred.step == pytest.approx(scale[2])
    assert inferred.n_ranks == n_ranks
    assert inferred.ranks(table.ratings).tolist() == [round((r - scale[0]) / scale[2]) for r in ratings]


def test_features_are_the_papers_shifted_scores():
    # EachMovie: scores 0..1, "0.5 was subtracted"; 1-5 stars map the same way onto [-0.5, 0.5]
    each_movie = RatingScale(0, 1, 0.2)
    np.testing.assert_allclose(each_movie.features(np.array([0, 0.2, 1.0])), [-0.5, -0.3, 0.5], atol=1e-7)
    np.testing.assert_allclose(RatingScale(1, 5, 1).features(np.array([1, 2, 5])), [-0.5, -0.25, 0.5])


def test_ratings_outside_or_off_the_scale_name_the_line(tmp_path):
    table = _read(tmp_path, "1 1 3\n1 2 4\n1 3 9\n")
    with pytest.raises(RatingsFormatError, match=r"ratings.txt:3: rating 9 outside \[1, 5\]"):
        resolve_scale(table, min_rating=1, max_rating=5)
    half = _read(tmp_path, "1 1 3\n1 2 3.5\n")
    with pytest.raises(RatingsFormatError, match=r"ratings.txt:2: rating 3.5 is not a grade .* set data.rating_step"):
        resolve_scale(half, min_rating=1, max_rating=5, rating_step=1)
    continuous = _read(tmp_path, "".join(f"u{i} m {0.001 * i * i}\n" for i in range(300)))
    with pytest.raises(RatingsFormatError, match="look continuous"):
        resolve_scale(continuous)


# -- fuzzing ----------------------------------------------------------------------------------------

ID = st.text(alphabet=string.ascii_letters + string.digits + "-_.", min_size=1, max_size=12)


@st.composite
def ratings_files(draw):
    """A random valid table and the options it is written with."""
    n = draw(st.integers(1, 40))
    users = draw(st.lists(ID, min_size=1, max_size=6, unique=True))
    items = draw(st.lists(ID, min_size=1, max_size=8, unique=True))
    pairs = draw(
        st.lists(st.tuples(st.sampled_from(users), st.sampled_from(items)), min_size=1, max_size=n, unique=True)
    )
    step = draw(st.sampled_from([1.0, 0.5, 0.25]))
    grades = draw(st.lists(st.integers(0, 8), min_size=len(pairs), max_size=len(pairs)))
    stamped = draw(st.booleans())
    stamps = draw(st.lists(st.integers(0, 2**40), min_size=len(pairs), max_size=len(pairs)))
    layout = {
        "separator": draw(st.sampled_from(["\t", " ", ",", "::"])),
        "header": draw(st.booleans()),
        "bom": draw(st.booleans()),
        "crlf": draw(st.booleans()),
    }
    user_ids = np.array(sorted(set(u for u, _ in pairs)), dtype=object)
    item_ids = np.array(sorted(set(i for _, i in pairs)), dtype=object)
    table = RatingsTable(
        users=np.array([np.flatnonzero(user_ids == u)[0] for u, _ in pairs]),
        items=np.array([np.flatnonzero(item_ids == i)[0] for _, i in pairs]),
        ratings=1.0 + step * np.array(grades, dtype=float),
        timestamps=np.array(stamps, dtype=float) if stamped else None,
        lines=np.arange(1, len(pairs) + 1),
        user_ids=user_ids,
        item_ids=item_ids,
        path="",
    )
    return table, layout


def _ids_sort_as_bytes(ids) -> list[str]:
    return sorted(ids, key=lambda text: text.encode())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=ratings_files())
def test_random_valid_files_round_trip(tmp_path, case):
    table, layout = case
    path = tmp_path / "fuzz.txt"
    write_ratings(table, path, separator=layout["separator"], header=layout["header"])
    data = path.read_bytes()
    if layout["crlf"]:
        data = data.replace(b"\n", b"\r\n")
    if layout["bom"]:
        data = b"\xef\xbb\xbf" + data
    path.write_bytes(data)
    back = read_ratings(path)
    assert _triples(back) == _triples(table)
    assert list(back.user_ids) == _ids_sort_as_bytes(table.user_ids)
    if table.timestamps is None:
        assert back.timestamps is None
    else:
        np.testing.assert_array_equal(back.timestamps, table.timestamps)
    assert back.lines.tolist() == [line + layout["header"] for line in table.lines]
    assert back.duplicates_dropped == 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300) | st.text(alphabet="0123456789 \t,:.#\n\r-einfa\ufeff", max_size=200))
def test_random_bytes_give_a_table_or_a_format_error(tmp_path, data):
    path = tmp_path / "fuzz.txt"
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    try:
        table = read_ratings(path, duplicates="first")
    except RatingsFormatError as error:
        assert "fuzz.txt" in str(error) and len(str(error)) < 400
        return
    assert len(table) and np.isfinite(table.ratings).all()
    assert table.users.max() < len(table.user_ids) and table.items.max() < len(table.item_ids)
