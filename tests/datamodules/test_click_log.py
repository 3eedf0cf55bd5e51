"""The click-log reader: the example log, and every kind of bad input refused with file and line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from datamodules.clicks import ClickLogError, read_click_log, read_clicks

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "clicks"
HEADER = "session\tquery\tdoc\tposition\tclick\n"


def test_example_log_is_read_and_joined() -> None:
    log = read_click_log(EXAMPLE / "features.txt", EXAMPLE / "clicks.tsv")
    assert log.doc_ids == ["d1", "d2", "d3", "GX000-00-0000001", "GX000-00-0000002"]  # LETOR 4.0 form too
    np.testing.assert_array_equal(log.row, [0, 1, 2, 2, 0, 1, 4, 3])
    np.testing.assert_array_equal(log.position, [1, 2, 3, 1, 2, 3, 1, 2])
    np.testing.assert_array_equal(log.click, [1, 0, 0, 0, 1, 0, 0, 0])
    np.testing.assert_array_equal(log.session, [0, 0, 0, 1, 1, 1, 2, 2])
    assert log.counts["queries_never_clicked"] == 1  # query 2: counted, kept, reported
    assert log.counts == {**log.counts, "click_lines": 8, "sessions": 3, "clicks": 2, "queries": 2}


def _log(tmp_path: Path, lines: list[str], header: bool = True) -> Path:
    path = tmp_path / "clicks.tsv"
    path.write_text((HEADER if header else "") + "".join(line + "\n" for line in lines))
    return path


GOOD = ["s1\t1\td1\t1\t1", "s1\t1\td2\t2\t0"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("s1\t1\td9\t3\t0", "document d9 has no line in the features file"),
        ("s1\t7\td1\t3\t0", "query 7 document d1 has no line"),
        ("s1\t1\td3\t0\t0", "position 0 is below 1"),
        ("s1\t1\td3\tx\t0", "position 'x' is not an integer"),
        ("s1\t1\td3\t3\t2", "click '2' is not 0 or 1"),
        ("s1\t1\td3\t3", "4 tab-separated columns"),
        ("s1\t1\td3\t2\t0", "shows position 2 twice"),
        ("s1\t2\tGX000-00-0000001\t3\t0", "has two queries"),
    ],
)
def test_bad_lines_are_refused_with_file_and_line(tmp_path: Path, bad: str, message: str) -> None:
    path = _log(tmp_path, [*GOOD, bad, "s2\t1\td1\t1\t0"])
    with pytest.raises(ClickLogError, match=message) as error:
        read_click_log(EXAMPLE / "features.txt", path)
    assert f"{path}:4" in str(error.value)


def test_header_is_optional_and_crlf_read(tmp_path: Path) -> None:
    path = tmp_path / "clicks.tsv"
    path.write_bytes(b"s1\t1\td1\t1\t1\r\ns1\t1\td2\t2\t0\r\n")
    raw = read_clicks(path)
    np.testing.assert_array_equal(raw["line"], [1, 2])
    np.testing.assert_array_equal(raw["click"], [1, 0])


def test_features_line_without_doc_id_is_refused(tmp_path: Path) -> None:
    features = tmp_path / "features.txt"
    features.write_text("0 qid:1 1:0.5 # d1\n0 qid:1 1:0.7\n")
    with pytest.raises(ClickLogError, match=r"features.txt:2: no doc id"):
        read_click_log(features, _log(tmp_path, GOOD[:1]))


def test_empty_log_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ClickLogError, match="no click lines"):
        read_click_log(EXAMPLE / "features.txt", _log(tmp_path, []))
