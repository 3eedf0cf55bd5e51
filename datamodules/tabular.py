"""Numeric tables in scikit-learn's bundled CSV form (e.g. Boston Housing), for Chu & Ghahramani's
active-learning experiment: an optional first line ``n_rows,n_features,...`` (scikit-learn's
header), a line of column names, then one row of numbers a line; the last column is the target.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from datamodules.errors import DataError


class TableFormatError(DataError):
    """A numeric table that cannot be read: the message names the file, the line and the problem."""


def _is_count_line(cells: list[str]) -> bool:
    """scikit-learn's first line: ``506,13`` followed by blank cells."""
    filled = [c for c in cells if c.strip()]
    # the two counts lead the line (``,1,1`` is not one: hypothesis found int('') on it)
    return len(filled) == 2 and cells[:2] == filled and all(c.strip().isdigit() for c in filled)


def read_numeric_table(path: str | Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(features [n, d] float64, target [n] float64, column names)`` of a CSV table.

    Refuses (``TableFormatError`` naming file and line) a missing or empty file, rows of the wrong
    width, non-numeric or non-finite cells, a count line that disagrees with the rows, and fewer
    than 2 rows or 1 feature.
    """
    path = Path(path)
    if not path.is_file():
        raise TableFormatError(f"{path}: no such file")
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:  # -sig: a BOM is not part of a cell
            lines = list(csv.reader(handle))
    except UnicodeDecodeError as error:
        raise TableFormatError(f"{path}: not UTF-8 text (byte {error.start})") from None
    except csv.Error as error:  # e.g. a NUL byte
        raise TableFormatError(f"{path}: not a CSV table ({error})") from None
    if not lines:
        raise TableFormatError(f"{path}: empty file")
    first = 0
    expected_rows = None
    if _is_count_line(lines[0]):
        expected_rows = int(lines[0][0])
        first = 1
    if first >= len(lines):
        raise TableFormatError(f"{path}: no column names after the count line")
    names = [c.strip().strip('"') for c in lines[first] if c.strip()]
    if len(names) < 2:
        raise TableFormatError(f"{path}, line {first + 1}: expected column names (features, then the target)")
    rows = []
    for number, cells in enumerate(lines[first + 1 :], start=first + 2):
        if not any(c.strip() for c in cells):
            continue  # a blank line (e.g. the file's end)
        cells = cells[: len(names)] if all(not c.strip() for c in cells[len(names) :]) else cells
        if len(cells) != len(names):
            raise TableFormatError(f"{path}, line {number}: {len(cells)} cells, expected {len(names)}")
        try:
            values = [float(c) for c in cells]
        except ValueError as error:
            raise TableFormatError(f"{path}, line {number}: not a number ({error})") from error
        if not all(math.isfinite(x) for x in values):
            raise TableFormatError(f"{path}, line {number}: NaN or inf value")
        rows.append(values)
    if len(rows) < 2:
        raise TableFormatError(f"{path}: {len(rows)} data rows, need at least 2")
    if expected_rows is not None and expected_rows != len(rows):
        raise TableFormatError(f"{path}, line 1: says {expected_rows} rows, the file has {len(rows)}")
    table = np.asarray(rows, dtype=np.float64)
    return table[:, :-1], table[:, -1], names
