"""Reading LETOR / SVMlight ranking files: ``label qid:Q idx:val ... # comment``.

Parsing is sklearn's ``load_svmlight_file(query_id=True)`` (compiled, well kept). We add what it
does not do: the checks a ranking file needs (NaN/inf, negative labels, a query whose lines are
not contiguous, an empty file) with errors that name file and line, a line-level diagnosis when
sklearn rejects a file, and a binary cache so that a second load is a memory-mapped read.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

CACHE_VERSION = "1"
_QID = re.compile(r"^qid:(-?\d+)$")


class LetorFormatError(ValueError):
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
    path: str | os.PathLike, *, zero_based: bool = False, cache_dir: str | os.PathLike | None = None
) -> LetorData:
    """Read one LETOR file (plain, ``.gz`` or ``.bz2``), through the cache when ``cache_dir`` is set.

    ``zero_based=False`` (LETOR, MSLR, Yahoo, Istella) maps feature ``i`` to column ``i - 1``.
    Raises ``FileNotFoundError`` or ``LetorFormatError`` naming file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"LETOR file not found: {path}")
    cache = _cache_path(path, zero_based, cache_dir) if cache_dir is not None else None
    if cache is not None and (cache / "done").exists():
        return _load_cache(cache, str(path))
    data = _parse(path, zero_based)
    if cache is not None:
        _save_cache(data, cache)
    return data


def _parse(path: Path, zero_based: bool) -> LetorData:
    from sklearn.datasets import load_svmlight_file

    if path.stat().st_size == 0:
        raise LetorFormatError(f"{path}: empty file")
    try:
        matrix, labels, qids = load_svmlight_file(str(path), query_id=True, zero_based=zero_based, dtype=np.float32)
    except ValueError as error:
        raise diagnose(path, zero_based) or LetorFormatError(f"{path}: {error}") from error
    if matrix.shape[0] == 0:
        raise LetorFormatError(f"{path}: no data lines (only blank lines or comments)")
    if len(qids) != matrix.shape[0]:  # sklearn accepts lines without qid and returns fewer qids
        raise diagnose(path, zero_based) or LetorFormatError(f"{path}: some lines have no qid")
    features = matrix.toarray().astype(np.float32, copy=False)
    labels = labels.astype(np.float32)
    qids = qids.astype(np.int64)
    _check_values(path, features, labels)
    return LetorData(features, labels, qids, _query_offsets(path, qids), str(path))


def _check_values(path: Path, features: np.ndarray, labels: np.ndarray) -> None:
    bad_rows = np.flatnonzero(~np.isfinite(features).all(1) | ~np.isfinite(labels))
    if len(bad_rows):
        raise LetorFormatError(f"{path}:{data_line_number(path, bad_rows[0])}: NaN or infinite value")
    negative = np.flatnonzero(labels < 0)
    if len(negative):
        raise LetorFormatError(
            f"{path}:{data_line_number(path, negative[0])}: negative label {labels[negative[0]]:g}; "
            "relevance labels must be >= 0"
        )


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


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        import gzip

        return gzip.open(path, "rt", errors="replace")
    if path.suffix == ".bz2":
        import bz2

        return bz2.open(path, "rt", errors="replace")
    return open(path, errors="replace")


def _data_lines(path: Path):
    """``(line_number, text without comment)`` of each line that holds data, 1-based."""
    with _open_text(path) as handle:
        for number, line in enumerate(handle, 1):
            text = line.split("#", 1)[0].strip()
            if text:
                yield number, text


_DOCID = re.compile(r"docid\s*=\s*(\S+)")


def read_doc_ids(path: str | os.PathLike) -> list[str]:
    """Document ids from ``# docid = X`` comments (LETOR, MSLR style), else ``line<N>``, one per data line."""
    ids = []
    with _open_text(Path(path)) as handle:
        for number, line in enumerate(handle, 1):
            data, _, comment = line.partition("#")
            if data.strip():
                match = _DOCID.search(comment)
                ids.append(match.group(1) if match else f"line{number}")
    return ids


def data_line_number(path: Path, row: int) -> int:
    """File line number of data row ``row`` (0-based), skipping blank and comment lines."""
    for index, (number, _) in enumerate(_data_lines(path)):
        if index == row:
            return number
    return -1


def diagnose(path: Path, zero_based: bool) -> LetorFormatError | None:
    """Walk the file line by line and describe the first malformed line, if any."""
    lowest = 0 if zero_based else 1
    for number, text in _data_lines(path):
        tokens = text.split()
        where = f"{path}:{number}"
        try:
            float(tokens[0])
        except ValueError:
            return LetorFormatError(f"{where}: label {tokens[0]!r} is not a number")
        if len(tokens) < 2 or not _QID.match(tokens[1]):
            return LetorFormatError(f"{where}: expected 'qid:<integer>' after the label, got {tokens[1:2]}")
        previous = lowest - 1
        for token in tokens[2:]:
            index, colon, value = token.partition(":")
            if not colon:
                return LetorFormatError(f"{where}: feature {token!r} is not of the form index:value")
            if not index.isdigit():
                return LetorFormatError(f"{where}: feature index {index!r} is not a non-negative integer")
            if int(index) < lowest:
                return LetorFormatError(f"{where}: feature index {index} below {lowest} (zero_based={zero_based})")
            if int(index) <= previous:
                return LetorFormatError(f"{where}: feature indices must increase ({index} after {previous})")
            previous = int(index)
            try:
                float(value)
            except ValueError:
                return LetorFormatError(f"{where}: value {value!r} of feature {index} is not a number")
    return None


def _cache_path(path: Path, zero_based: bool, cache_dir: str | os.PathLike) -> Path:
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{zero_based}|{CACHE_VERSION}"
    digest = hashlib.sha1(key.encode()).hexdigest()[:16]
    return Path(cache_dir) / f"{path.name}.{digest}"


_ARRAYS = ("features", "labels", "qids", "offsets")


def _save_cache(data: LetorData, cache: Path) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    for name in _ARRAYS:
        np.save(cache / f"{name}.npy", getattr(data, name))
    (cache / "done").touch()  # written last: a cache interrupted mid-write is never read


def _load_cache(cache: Path, source: str) -> LetorData:
    arrays = {name: np.load(cache / f"{name}.npy") for name in _ARRAYS}
    return LetorData(**arrays, path=source)
