"""Reading LETOR / SVMlight ranking files: ``label qid:Q idx:val ... # comment``.

Parsing is sklearn's ``load_svmlight_file(query_id=True)`` (compiled, well kept). We add what it
does not do: the checks a ranking file needs (NaN/inf, values beyond float32, negative labels, a
query whose lines are not contiguous, an empty file, a truncated ``.gz``/``.bz2``, a feature index
that would make the dense matrix larger than memory) with errors that name file and line, a
line-level diagnosis when sklearn rejects a file, and a binary cache so that a second load is a
memory-mapped read.

What a line is: a line ends at ``\n``, ``\r\n`` or a lone ``\r`` (Python's universal newlines),
for the parser, the line numbers of errors and the document ids of ``read_doc_ids`` alike. sklearn
splits on ``\n`` only, so a file with a lone ``\r`` (or a UTF-8 byte-order mark, which is not
data) is parsed from a normalized temporary copy with the same lines.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import re
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datamodules.atomic import atomic_directory
from datamodules.errors import DataError
from datamodules.memory import available_memory

log = logging.getLogger(__name__)

CACHE_VERSION = "2"
_QID = re.compile(r"^qid:(-?\d+)$", re.ASCII)
# the whitespace sklearn's parser splits on (bytes.split()); str.strip() would also remove \x1c..\x1f
_SPACE = " \t\n\r\x0b\x0c"
_SPLIT = re.compile(r"[ \t\n\r\x0b\x0c]+")
# what C's strtod (sklearn's number parser) reads: ASCII digits only, unlike Python's float()
_NUMBER = re.compile(r"[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|nan|inf|infinity)", re.IGNORECASE | re.ASCII)
_INDEX = re.compile(r"\d+", re.ASCII)
_BOM = b"\xef\xbb\xbf"
FLOAT32_MAX = float(np.finfo(np.float32).max)
INT64_RANGE = (-(2**63), 2**63 - 1)
# a label whose exp2 gain 2**label - 1 is not a finite float32 (metrics.functional, gain="exp2")
EXP2_LABEL_LIMIT = 128.0
# errors quote at most this much of the offending text (a binary file must not make a 4 MB message)
QUOTE_LIMIT = 40
# what a compressed stream raises when it is truncated or corrupt
_STREAM_ERRORS = (EOFError, OSError, zlib.error)


def _quote(text: str) -> str:
    """``repr`` of ``text``, cut to ``QUOTE_LIMIT`` characters."""
    return repr(text) if len(text) <= QUOTE_LIMIT else repr(text[:QUOTE_LIMIT]) + f"... ({len(text)} characters)"


class LetorFormatError(DataError):
    """A LETOR file that cannot be read; the message names the file and line."""


@dataclass
class LetorData:
    """One split in memory. Documents of a query are contiguous, in file order.

    features ``[N, F] float32``, labels ``[N] float32``, qids ``[N] int64``,
    offsets ``[Q + 1] int64`` (query q is rows ``offsets[q]:offsets[q+1]``).
    """

    features: np.ndarray
    labels: np.ndarray
    qids: np.ndarray
    offsets: np.ndarray
    path: str

    @property
    def num_queries(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_features(self) -> int:
        return self.features.shape[1]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def with_num_features(self, num_features: int) -> LetorData:
        """Zero-pad (never cut) the feature columns to ``num_features``."""
        if num_features < self.num_features:
            raise LetorFormatError(
                f"{self.path}: has feature index {self.num_features}, above num_features={num_features}"
            )
        if num_features == self.num_features:
            return self
        padded = np.zeros((len(self.features), num_features), dtype=np.float32)
        padded[:, : self.num_features] = self.features
        return LetorData(padded, self.labels, self.qids, self.offsets, self.path)

    def subset(self, query_indices: np.ndarray) -> LetorData:
        """The queries ``query_indices`` (in that order) as a new split."""
        starts, stops = self.offsets[query_indices], self.offsets[query_indices + 1]
        rows = np.concatenate([np.arange(a, b) for a, b in zip(starts, stops)]) if len(starts) else np.zeros(0, int)
        offsets = np.concatenate([[0], np.cumsum(stops - starts)]).astype(np.int64)
        return LetorData(self.features[rows], self.labels[rows], self.qids[rows], offsets, self.path)


def read_letor(
    path: str | os.PathLike,
    *,
    zero_based: bool = False,
    cache_dir: str | os.PathLike | None = None,
    max_dense_bytes: int | None = None,
    max_features: int | None = None,
) -> LetorData:
    """Read one LETOR file (plain, ``.gz`` or ``.bz2``), through the cache when ``cache_dir`` is set.

    ``zero_based=False`` (LETOR, MSLR, Yahoo, Istella) maps feature ``i`` to column ``i - 1``.
    ``max_dense_bytes`` bounds the dense ``[documents, features]`` float32 matrix (default: half of
    what this process may still allocate: free memory, ``ulimit -v`` and the cgroup limit, the
    smallest): one stray huge feature index is an error naming its line, not a MemoryError.
    ``max_features=K`` keeps features 1..K (0..K-1 when zero-based) and drops the values of higher
    indices, with a warning that counts them. Raises ``FileNotFoundError`` or ``LetorFormatError``
    naming file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"LETOR file not found: {path}")
    if max_features is not None and max_features < 1:
        raise ValueError(f"max_features must be >= 1, got {max_features}")
    cache = _cache_path(path, zero_based, cache_dir, max_features) if cache_dir is not None else None
    if cache is not None and (cache / "done").exists():
        return _load_cache(cache, str(path))
    data = _parse(path, zero_based, max_dense_bytes, max_features)
    if cache is not None:
        _save_cache(data, cache)
    return data


def _parse(path: Path, zero_based: bool, max_dense_bytes: int | None, max_features: int | None) -> LetorData:
    from sklearn.datasets import load_svmlight_file

    if path.stat().st_size == 0:
        raise LetorFormatError(f"{path}: empty file")
    with parser_input(path) as source:
        try:
            matrix, labels, qids = load_svmlight_file(
                str(source), query_id=True, zero_based=zero_based, dtype=np.float32
            )
        except (ValueError, OverflowError) as error:
            raise diagnose(path, zero_based) or LetorFormatError(f"{path}: {_quote(str(error))}") from error
        except _STREAM_ERRORS as error:
            raise _stream_error(path, error) from error
    if matrix.shape[0] == 0:
        raise LetorFormatError(f"{path}: no data lines (only blank lines or comments)")
    if len(qids) != matrix.shape[0]:  # sklearn accepts lines without qid and returns fewer qids
        raise diagnose(path, zero_based) or LetorFormatError(f"{path}: some lines have no qid")
    if max_features is not None and matrix.shape[1] > max_features:
        matrix = _drop_features_above(path, matrix, max_features, zero_based)
    features = _dense(path, matrix, max_dense_bytes, zero_based)
    with np.errstate(over="ignore"):  # a label beyond float32 becomes inf and is reported by line below
        labels = labels.astype(np.float32)
    qids = qids.astype(np.int64)
    _check_values(path, features, labels)
    return LetorData(features, labels, qids, _query_offsets(path, qids), str(path))


def _stream_error(path: Path, error: BaseException) -> LetorFormatError:
    return LetorFormatError(f"{path}: compressed data is truncated or corrupt ({type(error).__name__}: {error})")


@contextlib.contextmanager
def parser_input(path: Path) -> Iterator[Path]:
    """The file sklearn should parse: ``path`` itself, or a temporary copy with the same lines when
    ``path`` has a lone ``\r`` line end or a UTF-8 byte-order mark (see the module docstring)."""
    if not _needs_normalizing(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="letor-") as folder:
        copy = Path(folder) / "normalized.txt"
        with _open_bytes(path) as source, open(copy, "wb") as target:
            _copy_normalized(source, target)
        yield copy


def _open_bytes(path: Path) -> io.BufferedIOBase:
    if path.suffix == ".gz":
        import gzip

        return gzip.open(path, "rb")
    if path.suffix == ".bz2":
        import bz2

        return bz2.open(path, "rb")
    return open(path, "rb")


def _chunks(handle: io.BufferedIOBase, size: int = 1 << 22) -> Iterator[bytes]:
    while chunk := handle.read(size):
        yield chunk


def _needs_normalizing(path: Path) -> bool:
    """Whether the (decompressed) bytes start with a BOM or hold a ``\r`` not followed by ``\n``.

    Reads the whole stream once, so a truncated ``.gz``/``.bz2`` is reported here, by name.
    """
    lone_cr = re.compile(rb"\r(?!\n)")
    found, first, pending_cr = False, True, False
    try:
        with _open_bytes(path) as handle:
            for chunk in _chunks(handle):
                if first and chunk.startswith(_BOM):
                    found = True
                first = False
                if pending_cr and not chunk.startswith(b"\n"):
                    found = True
                # a \r ending the chunk is decided by the next chunk's first byte
                pending_cr = chunk.endswith(b"\r")
                body = chunk[:-1] if pending_cr else chunk
                found = found or lone_cr.search(body) is not None
            return found or pending_cr
    except _STREAM_ERRORS as error:
        raise _stream_error(path, error) from error


def _copy_normalized(source: io.BufferedIOBase, target: io.BufferedIOBase) -> None:
    """Copy with the BOM removed and every line end (``\r\n``, lone ``\r``, ``\n``) as ``\n``."""
    first, pending_cr = True, False
    for chunk in _chunks(source):
        if first:
            chunk = chunk.removeprefix(_BOM)
            first = False
        if pending_cr:
            chunk = b"\r" + chunk
        pending_cr = chunk.endswith(b"\r")
        if pending_cr:
            chunk = chunk[:-1]
        target.write(chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n"))
    if pending_cr:
        target.write(b"\n")


def _drop_features_above(path: Path, matrix, max_features: int, zero_based: bool):
    """``matrix`` cut to its first ``max_features`` columns; the values cut are counted in a warning."""
    kept = matrix[:, :max_features]
    dropped = matrix.nnz - kept.nnz
    if dropped:
        first_row = int(np.flatnonzero(np.diff(matrix.indptr) != np.diff(kept.indptr))[0])
        log.warning(
            "%s: data.max_features=%d drops %d value(s) of higher feature indices (the first on line %d)",
            path,
            max_features,
            dropped,
            data_line_number(path, first_row),
        )
    return kept


def _dense(path: Path, matrix, max_dense_bytes: int | None, zero_based: bool) -> np.ndarray:
    """``matrix`` as a dense float32 array, refused by name (file, line, feature index) when it would
    not fit in ``max_dense_bytes`` (default: half of what this process may still allocate)."""
    budget = available_memory()
    limit, why = (
        (
            budget.bytes // 2,
            f"half of the {budget.bytes / 2**30:.1f} GiB this process may still use, set by its {budget.limited_by}",
        )
        if max_dense_bytes is None
        else (max_dense_bytes, "max_dense_bytes / data.max_dense_gib")
    )
    needed = matrix.shape[0] * matrix.shape[1] * 4
    if needed > limit:
        raise _too_large(path, matrix, needed, f"above the limit of {limit / 2**30:.1f} GiB ({why})", zero_based)
    try:
        return matrix.toarray().astype(np.float32, copy=False)
    except MemoryError as error:  # the estimate was too kind: still an error that says where and why
        raise _too_large(path, matrix, needed, "more than this process could allocate", zero_based) from error


def _too_large(path: Path, matrix, needed: int, reason: str, zero_based: bool) -> LetorFormatError:
    position = int(np.argmax(matrix.indices))
    row = int(np.searchsorted(matrix.indptr, position, side="right")) - 1
    columns = np.unique(matrix.indices)
    second = int(columns[-2]) + (not zero_based) if len(columns) > 1 else None
    hint = f"data.max_features={second} keeps every other feature" if second else "data.max_features=K keeps 1..K"
    return LetorFormatError(
        f"{path}:{data_line_number(path, row)}: feature index {matrix.indices[position] + (not zero_based)} makes "
        f"the dense feature matrix {matrix.shape[0]} x {matrix.shape[1]} float32 = {needed / 2**30:.1f} GiB, "
        f"{reason}; the file uses only {len(columns)} distinct feature columns. To read it: {hint} "
        "(the values beyond are dropped and counted), or fix that line"
    )


def refuse_overflowing_gains(data: LetorData, gain: str) -> None:
    """With ``gain="exp2"``, refuse labels whose gain ``2**label - 1`` overflows float32 (as LightGBM
    refuses labels beyond its gain table): an error naming file, line, label and gain."""
    if gain != "exp2":
        return
    too_large = np.flatnonzero(data.labels >= EXP2_LABEL_LIMIT)
    if len(too_large):
        row = too_large[0]
        raise LetorFormatError(
            f"{data.path}:{data_line_number(Path(data.path), row)}: label {data.labels[row]:g} has gain "
            f"2**{data.labels[row]:g} - 1 under gain='exp2', which overflows float32 (labels must be < "
            f"{EXP2_LABEL_LIMIT:g}); use gain='linear' (model.gain=linear) or rescale the labels"
        )


def _check_values(path: Path, features: np.ndarray, labels: np.ndarray) -> None:
    bad_rows = np.flatnonzero(~np.isfinite(features).all(1) | ~np.isfinite(labels))
    if len(bad_rows):
        number = data_line_number(path, bad_rows[0])
        raise LetorFormatError(f"{path}:{number}: {_non_finite_problem(path, number)}")
    negative = np.flatnonzero(labels < 0)
    if len(negative):
        raise LetorFormatError(
            f"{path}:{data_line_number(path, negative[0])}: negative label {labels[negative[0]]:g}; "
            "relevance labels must be >= 0"
        )


def _non_finite_problem(path: Path, number: int) -> str:
    """What is wrong on line ``number``, whose parsed values include NaN or an infinity."""
    for line_number, text in _data_lines(path):
        if line_number != number:
            continue
        tokens = _SPLIT.split(text)
        fields = [("label", tokens[0])] + [
            (f"feature {index}", value) for index, _, value in (token.partition(":") for token in tokens[2:])
        ]
        for name, value in fields:
            parsed = float(value)
            if np.isfinite(parsed) and abs(parsed) > FLOAT32_MAX:
                return (
                    f"value {_quote(value)} of {name} is finite but too large for float32 "
                    f"(largest magnitude {FLOAT32_MAX:.4g})"
                )
    return "NaN or infinite value"


def _query_offsets(path: Path, qids: np.ndarray) -> np.ndarray:
    """Start rows of each run of equal qids; an error if a qid comes back after another one."""
    starts = np.concatenate([[0], np.flatnonzero(np.diff(qids) != 0) + 1])
    run_qids = qids[starts]
    unique, first = np.unique(run_qids, return_index=True)
    if len(unique) != len(run_qids):
        seen = np.zeros(len(run_qids), dtype=bool)
        seen[first] = True
        repeat = starts[np.flatnonzero(~seen)[0]]
        raise LetorFormatError(
            f"{path}:{data_line_number(path, repeat)}: lines of qid {qids[repeat]} are not contiguous "
            "(the query appeared earlier in the file)"
        )
    return np.concatenate([starts, [len(qids)]]).astype(np.int64)


def open_text(path: Path) -> io.TextIOBase:
    """Text with universal newlines (the module's line model), a leading BOM dropped."""
    return io.TextIOWrapper(_open_bytes(path), encoding="utf-8-sig", errors="replace")


def _data_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line_number, text without comment)`` of each line that holds data, 1-based."""
    try:
        with open_text(path) as handle:
            for number, line in enumerate(handle, 1):
                text = line.split("#", 1)[0].strip(_SPACE)
                if text:
                    yield number, text
    except _STREAM_ERRORS as error:
        raise _stream_error(path, error) from error


_DOCID = re.compile(r"docid\s*=\s*(\S+)")


def read_doc_ids(path: str | os.PathLike) -> list[str]:
    """Document ids from ``# docid = X`` comments (LETOR, MSLR style), else ``line<N>``, one per data line."""
    ids = []
    with open_text(Path(path)) as handle:
        for number, line in enumerate(handle, 1):
            data, _, comment = line.partition("#")
            if data.strip(_SPACE):
                match = _DOCID.search(comment)
                ids.append(match.group(1) if match else f"line{number}")
    return ids


def data_line_number(path: Path, row: int) -> int:
    """File line number of data row ``row`` (0-based), skipping blank and comment lines; -1 for data
    that did not come from a file."""
    if not Path(path).is_file():
        return -1
    for index, (number, _) in enumerate(_data_lines(path)):
        if index == row:
            return number
    return -1


def diagnose(path: Path, zero_based: bool) -> LetorFormatError | None:
    """Walk the file line by line and describe the first malformed line, if any."""
    lowest = 0 if zero_based else 1
    for number, text in _data_lines(path):
        problem = _line_problem(_SPLIT.split(text), lowest, zero_based, first=number == 1)
        if problem:
            return LetorFormatError(f"{path}:{number}: {problem}")
    return None


def _line_problem(tokens: list[str], lowest: int, zero_based: bool, *, first: bool) -> str | None:
    """What is wrong with one data line's tokens, or None."""
    if not _NUMBER.fullmatch(tokens[0]):
        if first and any(word in tokens[0].lower() for word in ("label", "rel", "target", "qid")):
            return f"this looks like a header line ({_quote(' '.join(tokens))}); LETOR files have none"
        return f"label {_quote(tokens[0])} is not a number"
    qid = _QID.match(tokens[1]) if len(tokens) > 1 else None
    if qid is None:
        return f"expected 'qid:<integer>' after the label, got {_quote(tokens[1]) if len(tokens) > 1 else 'nothing'}"
    if not INT64_RANGE[0] <= int(qid.group(1)) <= INT64_RANGE[1]:
        return f"qid {_quote(qid.group(1))} does not fit in a 64-bit integer"
    previous = lowest - 1
    for token in tokens[2:]:
        index, colon, value = token.partition(":")
        if not colon:
            return f"feature {_quote(token)} is not of the form index:value"
        if not _INDEX.fullmatch(index):
            return f"feature index {_quote(index)} is not a non-negative integer"
        if int(index) < lowest:
            return f"feature index {index} below {lowest} (zero_based={zero_based})"
        if int(index) > INT64_RANGE[1]:
            return f"feature index {_quote(index)} does not fit in a 64-bit integer"
        if int(index) <= previous:
            return f"feature indices must increase ({index} after {previous})"
        previous = int(index)
        if not _NUMBER.fullmatch(value):
            return f"value {_quote(value)} of feature {index} is not a number"
    return None


def write_letor(path: str | os.PathLike, data: LetorData, doc_ids: list[str] | None = None) -> None:
    """Write ``data`` as a LETOR file (one-based feature indices, zeros omitted as SVMlight does),
    with ``# docid = X`` comments when ``doc_ids`` are given. ``read_letor`` reads it back exactly
    (values are written with float32 round-trip precision)."""
    lines = []
    for row, (label, qid, values) in enumerate(zip(data.labels, data.qids, data.features, strict=True)):
        pairs = " ".join(f"{j + 1}:{values[j]}" for j in np.flatnonzero(values))  # str: shortest float32 repr
        comment = f" # docid = {doc_ids[row]}" if doc_ids is not None else ""
        lines.append(f"{label:g} qid:{qid} {pairs}{comment}".replace("  ", " "))
    Path(path).write_text("\n".join(lines) + "\n")


def _cache_path(path: Path, zero_based: bool, cache_dir: str | os.PathLike, max_features: int | None) -> Path:
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{zero_based}|{CACHE_VERSION}"
    key += f"|{max_features}" if max_features is not None else ""
    digest = hashlib.sha1(key.encode()).hexdigest()[:16]
    return Path(cache_dir) / f"{path.name}.{digest}"


_ARRAYS = ("features", "labels", "qids", "offsets")


def _save_cache(data: LetorData, cache: Path) -> None:
    # built in a private folder, then renamed: processes sharing the cache never see a partial one
    try:
        with atomic_directory(cache) as partial:
            for name in _ARRAYS:
                np.save(partial / f"{name}.npy", getattr(data, name))
            (partial / "done").touch()
    except OSError as error:  # a full disk or read-only cache costs the next run a parse, not this run
        log.warning("cannot write the parse cache %s: %s; continuing without it", cache, error.strerror or error)


def _load_cache(cache: Path, source: str) -> LetorData:
    arrays = {name: np.load(cache / f"{name}.npy") for name in _ARRAYS}
    return LetorData(**arrays, path=source)
