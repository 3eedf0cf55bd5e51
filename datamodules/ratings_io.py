"""Reading ratings files: ``user item rating [timestamp]`` lines, e.g. MovieLens and EachMovie exports.

Accepted, all documented and tested:

* separators: tabs, spaces, commas or ``::`` (ml-100k ``u.data``, ml-latest ``ratings.csv``, ml-1m
  ``ratings.dat``), mixed freely; lines end with ``\\n``, ``\\r\\n`` or a lone ``\\r``;
* an optional header line (the first data line whose rating field is not a number, e.g.
  ``userId,movieId,rating,timestamp``), an optional UTF-8 byte-order mark, blank lines, ``#`` comments;
* ids are opaque tokens (strings): ``u17`` and ``17`` are both ids, ``017`` and ``17`` are different
  users, and no id can overflow; ratings are numbers; the optional timestamp is a number or an ISO
  8601 date and is used only to order each user's ratings;
* gzip-compressed files (``.gz``).

Errors are :class:`RatingsFormatError` naming file and line: a line with the wrong number of
fields, a rating or timestamp that is not a finite number, a byte that is not UTF-8, a field over
:data:`MAX_FIELD_BYTES`, an empty file. A user rating the same item twice is handled by the
``duplicates`` policy and counted (never silently): ``"last"`` (default) keeps the latest rating
(by timestamp, then by line), ``"first"`` the earliest, ``"error"`` refuses the file.

Why the tokenizer is hand-written: the project depends on numpy only (no pandas or pyarrow), and
``numpy.loadtxt`` takes one separator, numeric columns and gives no line numbers. Here each block of
the file is tokenized with a few whole-array numpy operations (token boundaries from byte classes,
tokens per line by ``bincount``), fields are gathered into fixed-width byte arrays and converted by
numpy's C loops, so there is no Python work per line; a million lines take about a second.
"""

from __future__ import annotations

import gzip
import logging
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from datamodules.errors import DataError

log = logging.getLogger(__name__)

BOM = b"\xef\xbb\xbf"
# a field longer than this is not an id, a rating or a timestamp (a binary file, a missing newline)
MAX_FIELD_BYTES = 256
# the file is tokenized in blocks of about this many bytes (split at line ends): bounded memory
BLOCK_BYTES = 1 << 24
DUPLICATE_POLICIES = ("last", "first", "error")
# bytes that separate fields once "::" is replaced: comma, tab, vertical tab, form feed -> space
_TO_SPACE = bytes.maketrans(b",\t\x0b\x0c", b"    ")
_SPACE, _NEWLINE, _HASH = 32, 10, 35


class RatingsFormatError(DataError):
    """A ratings file that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class RatingsTable:
    """A ratings file in memory, one row per (user, item) after the duplicate policy, in file order.

    ``users``/``items`` ``[n] int64`` index ``user_ids``/``item_ids`` (the file's tokens, sorted);
    ``ratings [n] float64``; ``timestamps [n] float64`` or None (ISO dates become epoch seconds);
    ``lines [n] int64`` the 1-based line of each rating, for error messages.
    """

    users: np.ndarray
    items: np.ndarray
    ratings: np.ndarray
    timestamps: np.ndarray | None
    lines: np.ndarray
    user_ids: np.ndarray
    item_ids: np.ndarray
    path: str
    header: tuple[str, ...] | None = None
    duplicates_dropped: int = 0
    statistics: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ratings)

    def where(self, row: int) -> str:
        """``path:line`` of row ``row``."""
        return f"{self.path}:{int(self.lines[row])}"

    def chronological(self) -> np.ndarray:
        """Row order by (user, timestamp, line): each user's ratings in the order they were given
        (file order where the file has no timestamps)."""
        keys = (self.lines, self.timestamps, self.users) if self.timestamps is not None else (self.lines, self.users)
        return np.lexsort(keys)


def read_ratings(path: str | Path, *, duplicates: str = "last") -> RatingsTable:
    """Read a ratings file (see the module docstring for the accepted forms and the errors)."""
    if duplicates not in DUPLICATE_POLICIES:
        raise ValueError(f"duplicates must be one of {DUPLICATE_POLICIES}, got {duplicates!r}")
    path = Path(path)
    raw = _read_bytes(path)
    had_bom = raw.startswith(BOM)
    raw = raw[len(BOM) :] if had_bom else raw
    _check_utf8(path, raw)
    text = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n").replace(b"::", b" ").translate(_TO_SPACE)
    if not text.endswith(b"\n"):
        text += b"\n"
    columns, lines, header = _tokenize(path, text)
    users, user_ids = _codes(columns[0])
    items, item_ids = _codes(columns[1])
    ratings = _numbers(path, columns[2], lines, "rating")
    timestamps = _timestamps(path, columns[3], lines) if len(columns) == 4 else None
    table = RatingsTable(users, items, ratings, timestamps, lines, user_ids, item_ids, str(path), header)
    table = _apply_duplicate_policy(table, duplicates)
    stats = {
        "ratings": len(table),
        "users": len(user_ids),
        "items": len(item_ids),
        "header": list(header) if header else None,
        "byte_order_mark": had_bom,
        "duplicates_dropped": table.duplicates_dropped,
        "duplicate_policy": duplicates,
    }
    table.statistics.update(stats)
    log.info("%s: %s", path, stats)
    return table


def _read_bytes(path: Path) -> bytes:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as handle:
                return handle.read()
        return path.read_bytes()
    except (OSError, EOFError) as error:  # missing file, truncated gzip (EOFError), not gzip at all
        raise RatingsFormatError(f"{path}: cannot read: {error}") from None


def _check_utf8(path: Path, raw: bytes) -> None:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        bad = raw[error.start : error.end]
        raise RatingsFormatError(f"{path}:{line}: byte {bad!r} is not UTF-8 (the file must be UTF-8 text)") from None


def _line_text(text: bytes, starts: np.ndarray, line: int) -> str:
    """Line ``line`` (1-based) of the normalized text, cut to 80 characters for messages."""
    begin = int(starts[line - 1])
    end = text.find(b"\n", begin)
    shown = text[begin:end].decode("utf-8", "replace")
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _tokenize(path: Path, text: bytes) -> tuple[list[np.ndarray], np.ndarray, tuple[str, ...] | None]:
    """Split ``text`` (normalized: ``\\n`` line ends, spaces between fields) into 3 or 4 columns of
    fixed-width byte strings, with the 1-based line of each row; drops and returns a header."""
    line_starts = np.concatenate([[0], np.flatnonzero(np.frombuffer(text, np.uint8) == _NEWLINE) + 1])
    blocks: list[tuple[list[np.ndarray], np.ndarray]] = []
    begin, first_line = 0, 1
    while begin < len(text):
        end = text.rfind(b"\n", begin, begin + BLOCK_BYTES) + 1 or text.find(b"\n", begin) + 1
        block = text[begin:end]
        columns, lines = _tokenize_block(path, text, line_starts, block, first_line)
        if len(lines):
            if blocks and len(columns) != len(blocks[0][0]):
                raise RatingsFormatError(
                    f"{path}:{lines[0]}: {len(columns)} fields where line {blocks[0][1][0]} has "
                    f"{len(blocks[0][0])}: {_line_text(text, line_starts, int(lines[0]))!r}"
                )
            blocks.append((columns, lines))
        first_line += block.count(b"\n")
        begin = end
    if not blocks:
        raise RatingsFormatError(f"{path}: no ratings (the file is empty or holds only comments)")
    columns = [np.concatenate([block[0][c] for block in blocks]) for c in range(len(blocks[0][0]))]
    lines = np.concatenate([block[1] for block in blocks])
    header = None
    if not any(_is_number(column[0]) for column in columns):  # e.g. userId,movieId,rating,timestamp
        header = tuple(column[0].decode() for column in columns)
        columns, lines = [column[1:] for column in columns], lines[1:]
        if not len(lines):
            raise RatingsFormatError(f"{path}: no ratings after the header line")
    return columns, lines, header


def _tokenize_block(
    path: Path, text: bytes, line_starts: np.ndarray, block: bytes, first_line: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """One block of whole lines -> (columns of fixed-width byte strings, 1-based line per row)."""
    data = np.frombuffer(block, np.uint8)
    newlines = np.flatnonzero(data == _NEWLINE)
    if _HASH in data:  # blank everything from a '#' to the end of its line
        data = data.copy()
        hashes = np.flatnonzero(data == _HASH)
        stops = newlines[np.searchsorted(newlines, hashes)]
        delta = np.zeros(len(data) + 1, np.int32)
        np.add.at(delta, hashes, 1)
        np.add.at(delta, stops, -1)
        data[np.cumsum(delta[:-1]) > 0] = _SPACE
    in_token = (data != _SPACE) & (data != _NEWLINE)  # the block ends with a newline: no token at its end
    starts = np.flatnonzero(in_token[1:] & ~in_token[:-1]) + 1
    if in_token[0]:
        starts = np.concatenate([[0], starts])
    ends = np.flatnonzero(in_token[:-1] & ~in_token[1:]) + 1
    per_line = np.bincount(np.searchsorted(newlines, starts), minlength=len(newlines))
    data_lines = np.flatnonzero(per_line)  # 0-based lines of this block with any field
    if not len(data_lines):
        return [], np.zeros(0, np.int64)
    counts = per_line[data_lines]
    lines = first_line + data_lines.astype(np.int64)
    width = int(counts[0])
    wrong = np.flatnonzero((counts != width) | (counts < 3) | (counts > 4))
    if len(wrong):
        line, count = int(lines[wrong[0]]), int(counts[wrong[0]])
        shown = _line_text(text, line_starts, line)
        if count in (3, 4) and width in (3, 4):
            problem = f"{count} fields where line {lines[0]} has {width}"
        else:
            problem = f"expected 'user item rating [timestamp]', got {count} fields"
        raise RatingsFormatError(f"{path}:{line}: {problem}: {shown!r}")
    columns = []
    for column in range(width):
        column_starts = starts[column::width]
        lengths = ends[column::width] - column_starts
        longest = int(np.argmax(lengths))
        if lengths[longest] > MAX_FIELD_BYTES:
            raise RatingsFormatError(
                f"{path}:{lines[longest]}: field {column + 1} is {int(lengths[longest])} bytes long "
                f"(more than {MAX_FIELD_BYTES}: not a ratings line)"
            )
        columns.append(_gather(data, column_starts, int(lengths[longest]), lengths))
    return columns, lines


def _gather(data: np.ndarray, starts: np.ndarray, width: int, lengths: np.ndarray) -> np.ndarray:
    """Fields ``data[start:start+length]`` as one fixed-width byte-string array ``[n]`` (``S{width}``)."""
    offsets = np.arange(width)
    index = np.minimum(starts[:, None] + offsets, len(data) - 1)
    return np.where(offsets < lengths[:, None], data[index], 0).astype(np.uint8).view(f"S{width}").ravel()


def _is_number(token: bytes) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _codes(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte-string ids -> (codes ``[n] int64``, distinct ids as ``str`` in byte order)."""
    if tokens.dtype.itemsize <= 8:  # sort 8-byte big-endian integers: the same order as the bytes, much faster
        padded = tokens.astype("S8")
        distinct, codes = np.unique(padded.view(">u8"), return_inverse=True)
        distinct = distinct.astype(">u8").view("S8")
    else:
        distinct, codes = np.unique(tokens, return_inverse=True)
    return codes.astype(np.int64).ravel(), np.char.decode(distinct, "utf-8").astype(object)


def _numbers(path: Path, tokens: np.ndarray, lines: np.ndarray, what: str) -> np.ndarray:
    """Byte strings -> finite float64, or an error naming the first bad line."""
    try:
        values = tokens.astype(np.float64)
    except ValueError:
        bad = next(i for i, token in enumerate(tokens) if not _is_number(token))
        raise RatingsFormatError(f"{path}:{lines[bad]}: {what} {tokens[bad].decode()!r} is not a number") from None
    _require_finite(path, values, tokens, lines, what)
    return values


def _require_finite(path: Path, values: np.ndarray, tokens: np.ndarray, lines: np.ndarray, what: str) -> None:
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad):
        token = tokens[bad[0]].decode()
        why = "too large for a float64" if _looks_finite(token) else "NaN or infinite"
        raise RatingsFormatError(
            f"{path}:{lines[bad[0]]}: {what} {token!r} is {why} ({len(bad)} such {what}s in the file)"
        )


def _looks_finite(token: str) -> bool:
    return not any(word in token.lower() for word in ("nan", "inf"))


def _timestamps(path: Path, tokens: np.ndarray, lines: np.ndarray) -> np.ndarray:
    """Numbers (epoch seconds) or ISO 8601 dates -> float64 keys for ordering."""
    try:
        values = tokens.astype(np.float64)
    except ValueError:
        try:
            return tokens.astype("datetime64[s]").astype(np.int64).astype(np.float64)
        except ValueError:
            bad = next(i for i, token in enumerate(tokens) if not _is_timestamp(token))
            raise RatingsFormatError(
                f"{path}:{lines[bad]}: timestamp {tokens[bad].decode()!r} is neither a number nor an ISO 8601 date"
            ) from None
    _require_finite(path, values, tokens, lines, "timestamp")
    return values


def _is_timestamp(token: bytes) -> bool:
    if _is_number(token):
        return True
    try:
        np.datetime64(token.decode(), "s")
    except ValueError:
        return False
    return True


def _apply_duplicate_policy(table: RatingsTable, policy: str) -> RatingsTable:
    """One row per (user, item): keep the last or first rating (by timestamp, then line), or refuse."""
    key = table.users * len(table.item_ids) + table.items
    order = np.argsort(key, kind="stable")  # by pair, then in file order
    sorted_key = key[order]
    repeated = sorted_key[1:] == sorted_key[:-1]
    dropped = int(repeated.sum())
    if not dropped:
        return table
    if policy == "error":
        first = int(np.flatnonzero(repeated)[0])
        a, b = int(table.lines[order[first]]), int(table.lines[order[first + 1]])
        user, item = table.user_ids[table.users[order[first]]], table.item_ids[table.items[order[first]]]
        raise RatingsFormatError(
            f"{table.path}:{b}: user {user!r} rated item {item!r} again (first on line {a}); "
            f"{dropped} duplicate ratings in the file (data.duplicates=last or first keeps one)"
        )
    if table.timestamps is not None:  # within a pair, by time, then line
        order = np.lexsort((table.lines, table.timestamps, key))
    starts = np.flatnonzero(np.concatenate([[True], ~repeated]))
    stops = np.concatenate([starts[1:], [len(key)]])
    keep = np.sort(order[stops - 1] if policy == "last" else order[starts])  # back to file order
    log.warning(
        "%s: %d duplicate (user, item) ratings dropped, kept the %s of each (data.duplicates)",
        table.path,
        dropped,
        policy,
    )
    return RatingsTable(
        table.users[keep],
        table.items[keep],
        table.ratings[keep],
        None if table.timestamps is None else table.timestamps[keep],
        table.lines[keep],
        table.user_ids,
        table.item_ids,
        table.path,
        table.header,
        dropped,
    )


@dataclass(frozen=True)
class RatingScale:
    """The grades of a ratings file and their mapping to ranks and to features.

    Grades are ``minimum, minimum + step, ..., maximum``; ``rank(r) = round((r - minimum) / step)``
    in ``0..k-1`` (0-based: the paper's rank is ``rank + 1``). A rating off that grid or outside
    ``[minimum, maximum]`` is an error naming its line, never rounded silently. E.g. MovieLens
    1-5 stars: ``(1, 5, 1)``, 5 ranks; ml-latest half stars ``(0.5, 5, 0.5)``, 10 ranks; EachMovie's
    0, 0.2, .., 1: ``(0, 1, 0.2)``, 6 ranks.

    Features follow Harrington (2003, section 4.2) and Crammer & Singer (2001): the grade scaled to
    [0, 1] minus 0.5, so ratings lie in [-0.5, 0.5] and 0 is left for "not rated" (for EachMovie's
    0..1 scores exactly "0.5 was subtracted"). With an odd number of grades the middle grade is
    also 0, which the paper calls equivalent: an unseen item is an indifferent rating.
    """

    minimum: float
    maximum: float
    step: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.minimum) and math.isfinite(self.maximum) and self.step > 0):
            raise ValueError(f"a rating scale needs finite bounds and a positive step, got {self}")
        if self.maximum <= self.minimum:
            raise ValueError(f"rating scale: maximum {self.maximum} must exceed minimum {self.minimum}")
        levels = (self.maximum - self.minimum) / self.step
        if abs(levels - round(levels)) > 1e-6 * max(1.0, levels):
            raise ValueError(f"rating scale: (maximum - minimum) / step = {levels} is not a whole number")

    @property
    def n_ranks(self) -> int:
        return round((self.maximum - self.minimum) / self.step) + 1

    def ranks(self, ratings: np.ndarray) -> np.ndarray:
        """0-based ranks ``[n] int64`` of on-grid ratings."""
        return np.rint((ratings - self.minimum) / self.step).astype(np.int64)

    def features(self, ratings: np.ndarray) -> np.ndarray:
        """``(r - minimum) / (maximum - minimum) - 0.5`` as float32: the paper's shifted scores."""
        return ((ratings - self.minimum) / (self.maximum - self.minimum) - 0.5).astype(np.float32)

    def check(self, table: RatingsTable) -> None:
        """Refuse ratings outside the scale or off its grid, naming the first such line."""
        ratings = table.ratings
        outside = np.flatnonzero((ratings < self.minimum - 1e-9) | (ratings > self.maximum + 1e-9))
        if len(outside):
            raise RatingsFormatError(
                f"{table.where(outside[0])}: rating {ratings[outside[0]]:g} outside [{self.minimum:g}, "
                f"{self.maximum:g}] ({len(outside)} such ratings; set data.min_rating/max_rating)"
            )
        position = (ratings - self.minimum) / self.step
        off = np.flatnonzero(np.abs(position - np.rint(position)) > 1e-6)
        if len(off):
            raise RatingsFormatError(
                f"{table.where(off[0])}: rating {ratings[off[0]]:g} is not a grade of the scale "
                f"{self.minimum:g}..{self.maximum:g} in steps of {self.step:g} ({len(off)} such ratings; "
                "set data.rating_step, e.g. 0.5 for half stars)"
            )


MAX_INFERRED_RANKS = 100


def resolve_scale(
    table: RatingsTable,
    *,
    min_rating: float | None = None,
    max_rating: float | None = None,
    rating_step: float | None = None,
) -> RatingScale:
    """The scale from the options, each one left None taken from the data: the smallest and largest
    rating, and the largest step that puts every rating on the grid (1 for 1-5 stars, 0.5 for half
    stars). Checks every rating against it (errors name the line)."""
    values = np.unique(table.ratings)
    minimum = float(values[0]) if min_rating is None else float(min_rating)
    maximum = float(values[-1]) if max_rating is None else float(max_rating)
    step = float(rating_step) if rating_step is not None else _grid_step(values - minimum)
    if maximum <= minimum:
        raise RatingsFormatError(
            f"{table.path}: every rating is {minimum:g}: a rating scale needs two grades at least "
            "(set data.min_rating/max_rating)"
        )
    try:
        scale = RatingScale(minimum, maximum, step)
    except ValueError as error:
        raise RatingsFormatError(f"{table.path}: {error}") from None
    scale.check(table)
    if rating_step is None and scale.n_ranks > MAX_INFERRED_RANKS:
        raise RatingsFormatError(
            f"{table.path}: the ratings need {scale.n_ranks} grades in steps of {step:g}: they look "
            "continuous, not ordinal grades; set data.rating_step (and min_rating/max_rating)"
        )
    return scale


def _grid_step(offsets: np.ndarray) -> float:
    """The largest ``s`` with every offset (>= 0) a whole multiple of ``s`` (to 1e-6)."""
    positive = offsets[offsets > 1e-9]
    if not len(positive):
        return 1.0
    step = Fraction(0)
    for value in positive[: 10 * MAX_INFERRED_RANKS]:
        step = _fraction_gcd(step, Fraction(float(value)).limit_denominator(1000))
    return float(step) if step > 0 else 1.0


def _fraction_gcd(a: Fraction, b: Fraction) -> Fraction:
    denominator = a.denominator * b.denominator // math.gcd(a.denominator, b.denominator)
    return Fraction(math.gcd(int(a * denominator), int(b * denominator)), denominator)


def write_ratings(table: RatingsTable, path: str | Path, *, separator: str = "\t", header: bool = False) -> None:
    """Write ``table`` as ``user item rating [timestamp]`` lines (ratings as ``%g``), in row order."""
    names = ["userId", "movieId", "rating"] + (["timestamp"] if table.timestamps is not None else [])
    rows = [table.user_ids[table.users].astype(str), table.item_ids[table.items].astype(str)]
    rows.append(np.char.mod("%.10g", table.ratings))
    if table.timestamps is not None:
        rows.append(np.char.mod("%.17g", table.timestamps))
    lines = [separator.join(names)] if header else []
    lines += [separator.join(fields) for fields in zip(*rows, strict=True)]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
