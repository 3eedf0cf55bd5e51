"""Reading a click log: a LETOR ``features`` file (one line per shown (query, document), the doc id
after ``#``) and a ``clicks`` TSV ``session<TAB>query<TAB>doc<TAB>position<TAB>click``.

The TSV is parsed with bytes splits and numpy conversions, chunk by chunk, never a Python loop over
lines (``bench/click_reader.py``: 10 million lines). Bad input is refused naming file and line; the
slow line-by-line scan runs only to find the line of an error the vectorized pass detected.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from datamodules.errors import DataError
from datamodules.letor_io import LetorData, open_text, read_letor

COLUMNS = ("session", "query", "doc", "position", "click")
_LETOR4_DOCID = re.compile(r"docid\s*=\s*(\S+)")
_CHUNK_BYTES = 1 << 26


class ClickLogError(DataError):
    """A click log that cannot be used; the message names file and line."""


@dataclass
class ClickLog:
    """A click log joined to its features, one entry per shown document (``n`` entries).

    ``features``: the LETOR data of the features file (labels ignored); ``doc_ids [N]`` its doc ids.
    ``session [n]`` int64 (0..S-1, in order of first appearance), ``row [n]`` int64 (the features row
    of the shown (query, doc)), ``position [n]`` int64 (1-based), ``click [n]`` int8 (0/1).
    ``counts``: what was found and kept, for ``results.json`` (nothing is dropped silently).
    """

    features: LetorData
    doc_ids: list[str]
    session: np.ndarray
    row: np.ndarray
    position: np.ndarray
    click: np.ndarray
    path: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def query(self) -> np.ndarray:
        """``[n]`` the features-file query index (0..Q-1) of each entry."""
        return np.searchsorted(self.features.offsets, self.row, side="right") - 1

    @property
    def max_position(self) -> int:
        return int(self.position.max()) if len(self.position) else 0


def doc_id_of(comment: str) -> str | None:
    """The doc id of a LETOR comment: LETOR 4.0's ``docid = GX...``, else the first word."""
    match = _LETOR4_DOCID.search(comment)
    if match:
        return match.group(1)
    words = comment.split()
    return words[0] if words else None


def read_shown_features(path: str | os.PathLike, *, cache_dir: str | None = None) -> tuple[LetorData, list[str]]:
    """The ``features`` file: its LETOR data and one doc id per data line. A data line without a doc
    id, or a (query, doc) given twice, is refused with the file and line."""
    path = Path(path)
    data = read_letor(path, cache_dir=cache_dir)
    ids: list[str] = []
    seen: dict[tuple[int, str], int] = {}
    with open_text(path) as handle:
        for number, line in enumerate(handle, 1):
            text, _, comment = line.partition("#")
            if not text.strip():
                continue
            doc = doc_id_of(comment)
            if doc is None:
                raise ClickLogError(f"{path}:{number}: no doc id after '#' (expected '... # <doc id>')")
            qid = int(data.qids[len(ids)])
            if (qid, doc) in seen:
                raise ClickLogError(
                    f"{path}:{number}: query {qid} document {doc} already has a features line (line {seen[qid, doc]})"
                )
            seen[qid, doc] = number
            ids.append(doc)
    return data, ids


def _split_fields(block: bytes) -> list[bytes]:
    return block.replace(b"\n", b"\t").split(b"\t")


def _find_bad_line(path: Path, first_line: int, block: bytes, what: str) -> ClickLogError:
    """The first line of ``block`` (starting at file line ``first_line``) with a problem ``what`` checks."""
    for offset, line in enumerate(block.split(b"\n")):
        parts = line.split(b"\t")
        problem = _line_problem(parts)
        if problem is not None:
            return ClickLogError(f"{path}:{first_line + offset}: {problem}")
    return ClickLogError(f"{path}: {what} (line not located)")


def _line_problem(parts: list[bytes]) -> str | None:
    if len(parts) != len(COLUMNS):
        return f"{len(parts)} tab-separated columns, expected {len(COLUMNS)} ({', '.join(COLUMNS)})"
    position, click = parts[3].strip(), parts[4].strip()
    if not position.lstrip(b"-").isdigit():
        return f"position {position.decode(errors='replace')!r} is not an integer"
    if int(position) < 1:
        return f"position {int(position)} is below 1 (positions are 1-based)"
    if click not in (b"0", b"1"):
        return f"click {click.decode(errors='replace')!r} is not 0 or 1"
    return None


def _blocks(path: Path):
    """``(first line number, bytes of whole lines)`` chunks of the file, header and BOM removed."""
    with open(path, "rb") as handle:
        head = handle.read(_CHUNK_BYTES)
        if head.startswith(b"\xef\xbb\xbf"):
            head = head[3:]
        line = 1
        if head.startswith(b"session"):
            cut = head.find(b"\n")
            head = head[cut + 1 :] if cut >= 0 else b""
            line = 2
        rest = b""
        block = head
        while block or rest:
            block = rest + block
            more = handle.read(_CHUNK_BYTES)
            if more:
                cut = block.rfind(b"\n")
                block, rest = (block[: cut + 1], block[cut + 1 :]) if cut >= 0 else (b"", block)
            else:
                rest = b""
            block = block.replace(b"\r", b"")
            if block.endswith(b"\n"):
                block = block[:-1]
            if block:
                yield line, block
                line += block.count(b"\n") + 1
            block = more


def _ids(values: list[bytes], names: dict[int, bytes]) -> np.ndarray:
    """``[n]`` int64 ids of byte strings (Python's 64-bit string hash: no per-value numpy object),
    recording one spelling per id in ``names``. A collision of two different names is refused."""
    ids = np.fromiter(map(hash, values), dtype=np.int64, count=len(values))
    unique, first = np.unique(ids, return_index=True)
    for value, at in zip(unique.tolist(), first.tolist(), strict=True):
        known = names.setdefault(value, values[at])
        if known != values[at]:  # about 1 in 10^8 for 10^6 names; said rather than merged
            raise ClickLogError(f"ids {known!r} and {values[at]!r} collide under the string hash; rename one")
    return ids


def _integers(values: list[bytes]) -> np.ndarray | None:
    """``[n]`` int64 of decimal strings, or None when one is not an integer."""
    text = b" ".join(values)
    if not text.replace(b" ", b"").replace(b"-", b"").isdigit():
        return None
    parsed = (
        np.array(text.split(), dtype=np.int64) if len(values) < 64 else np.fromstring(text, dtype=np.int64, sep=" ")
    )
    return parsed if len(parsed) == len(values) else None


def read_clicks(path: str | os.PathLike) -> dict[str, Any]:
    """The columns of a clicks TSV: ``session``, ``query``, ``doc`` (int64 ids, their spellings in
    ``names[column][id]``), ``position`` (int64), ``click`` (int8), ``line`` (int64 file line of each
    entry). Refuses a malformed line, a position < 1 or a click other than 0/1, naming the line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"clicks file not found: {path}")
    parts: dict[str, list[np.ndarray]] = {name: [] for name in (*COLUMNS, "line")}
    names: dict[str, dict[int, bytes]] = {"session": {}, "query": {}, "doc": {}}
    for first, block in _blocks(path):
        fields = _split_fields(block)
        lines = block.count(b"\n") + 1
        if len(fields) != len(COLUMNS) * lines:
            raise _find_bad_line(path, first, block, "wrong number of columns")
        position = _integers(fields[3::5])
        clicks = b"".join(fields[4::5])
        click = np.frombuffer(clicks, dtype=np.uint8) - ord("0") if len(clicks) == lines else None
        if position is None or click is None or (position < 1).any() or (click > 1).any():
            raise _find_bad_line(path, first, block, "bad position or click")
        for column, index in (("session", 0), ("query", 1), ("doc", 2)):
            parts[column].append(_ids(fields[index::5], names[column]))
        parts["position"].append(position)
        parts["click"].append(click.astype(np.int8))
        parts["line"].append(np.arange(first, first + lines, dtype=np.int64))
    if not parts["line"]:
        raise ClickLogError(f"{path}: no click lines")
    return {**{name: np.concatenate(values) for name, values in parts.items()}, "names": names}


def _name(raw: dict[str, Any], column: str, at: int) -> str:
    return raw["names"][column][int(raw[column][at])].decode(errors="replace")


def _first_line(lines: np.ndarray, bad: np.ndarray) -> int:
    return int(lines[bad].min())


def _join(path: Path, raw: dict[str, np.ndarray], data: LetorData, doc_ids: list[str]) -> np.ndarray:
    """The features row of each click line; a (query, doc) without a features line is refused."""
    query_ids, query_of = np.unique(raw["query"], return_inverse=True)
    doc_ids_seen, doc_of = np.unique(raw["doc"], return_inverse=True)
    query_names = [raw["names"]["query"][q] for q in query_ids.tolist()]
    doc_names = [raw["names"]["doc"][d] for d in doc_ids_seen.tolist()]
    qid_index = {str(int(q)): i for i, q in enumerate(np.unique(data.qids))}
    feature_qid = np.unique(data.qids, return_inverse=True)[1]
    doc_index = {d: i for i, d in enumerate(dict.fromkeys(doc_ids))}
    feature_doc = np.array([doc_index[d] for d in doc_ids], dtype=np.int64)
    n_docs = len(doc_index)
    q_map = np.array([qid_index.get(q.decode(errors="replace").removeprefix("qid:"), -1) for q in query_names])
    d_map = np.array([doc_index.get(d.decode(errors="replace"), -1) for d in doc_names])
    feature_code = feature_qid.astype(np.int64) * n_docs + feature_doc
    order = np.argsort(feature_code, kind="stable")
    q, d = q_map[query_of], d_map[doc_of]
    code = q.astype(np.int64) * n_docs + d
    found = np.searchsorted(feature_code[order], code).clip(max=len(order) - 1)
    known = (q >= 0) & (d >= 0) & (feature_code[order][found] == code)
    if not known.all():
        at = int(np.flatnonzero(~known)[0])
        name = (_name(raw, "query", at), _name(raw, "doc", at))
        raise ClickLogError(
            f"{path}:{raw['line'][at]}: query {name[0]} document {name[1]} has no line in the features file "
            f"({int((~known).sum())} click lines like it)"
        )
    return order[found]


def _check_sessions(path: Path, raw: dict[str, np.ndarray], row_query: np.ndarray) -> np.ndarray:
    """Session numbers ``[n]``; a session with two queries or a position shown twice is refused."""
    names, first, session = np.unique(raw["session"], return_index=True, return_inverse=True)
    # number sessions by first appearance (file order), so results do not depend on the id's spelling
    renumber = np.empty(len(names), dtype=np.int64)
    renumber[np.argsort(first, kind="stable")] = np.arange(len(names))
    session = renumber[session]
    order = np.lexsort((raw["position"], session))
    s, q, p = session[order], row_query[order], raw["position"][order]
    same = s[1:] == s[:-1]
    two_queries = same & (q[1:] != q[:-1])
    if two_queries.any():
        at = order[1:][two_queries]
        at = at[np.argsort(raw["line"][at], kind="stable")]  # the first line first
        raise ClickLogError(
            f"{path}:{_first_line(raw['line'], at)}: session "
            f"{_name(raw, 'session', at[0])} has two queries "
            f"({int(two_queries.sum())} lines like it)"
        )
    repeated = same & (p[1:] == p[:-1])
    if repeated.any():
        at = order[1:][repeated]
        at = at[np.argsort(raw["line"][at], kind="stable")]
        raise ClickLogError(
            f"{path}:{_first_line(raw['line'], at)}: session {_name(raw, 'session', at[0])} "
            f"shows position {int(raw['position'][at[0]])} twice ({int(repeated.sum())} lines like it)"
        )
    return session


def read_click_log(features: str | os.PathLike, clicks: str | os.PathLike, *, cache_dir: str | None = None) -> ClickLog:
    """Read and join the two files of a click log, refusing bad input with file and line.

    Counted, not refused (``ClickLog.counts``): queries never clicked (kept: they teach nothing to a
    click loss but are part of the log), features lines never shown.
    """
    data, doc_ids = read_shown_features(features, cache_dir=cache_dir)
    path = Path(clicks)
    raw = read_clicks(path)
    row = _join(path, raw, data, doc_ids)
    row_query = np.searchsorted(data.offsets, row, side="right") - 1
    session = _check_sessions(path, raw, row_query)
    clicked = np.zeros(data.num_queries, dtype=bool)
    clicked[row_query[raw["click"] == 1]] = True
    shown = np.zeros(data.num_queries, dtype=bool)
    shown[row_query] = True
    counts = {
        "click_lines": len(row),
        "sessions": int(session.max()) + 1,
        "clicks": int(raw["click"].sum()),
        "queries": int(shown.sum()),
        "queries_never_clicked": int((shown & ~clicked).sum()),
        "feature_lines_never_shown": int(len(doc_ids) - len(np.unique(row))),
        "feature_queries_never_shown": int((~shown).sum()),
    }
    return ClickLog(data, doc_ids, session, row, raw["position"], raw["click"], str(path), counts)
