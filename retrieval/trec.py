"""TREC files: qrels (``qid 0 docid rel``) and runs (``qid Q0 docid rank score tag``), as trec_eval reads them.

Every reader names the file and line of what it cannot use: a byte that is not UTF-8, a wrong
number of fields, a relevance that is not an integer, two different judgments of one pair. A UTF-8
byte-order mark at the start of a file is skipped (editors on Windows write one). Lines are split
on ``\\n`` (a trailing ``\\r`` is removed), the convention of trec_eval.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import torch

BOM = b"\xef\xbb\xbf"
SHOWN = 80  # characters of an offending line quoted in an error (a binary file must not make a 4 MB message)


class TrecFormatError(ValueError):
    """A file that cannot be read; the message names the file and line."""


def quote(text: str | bytes) -> str:
    """``repr`` of at most ``SHOWN`` characters of ``text``, marked when cut."""
    shown = repr(text[:SHOWN])
    return shown + f" ... ({len(text)} characters)" if len(text) > SHOWN else shown


def text_lines(path: str | Path, error: type[ValueError] = TrecFormatError) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a UTF-8 text file, BOM skipped, ``\\r\\n`` or ``\\n`` ended, blank lines
    included; a byte that is not UTF-8 raises ``error`` naming the file, line and byte."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: missing")
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if number == 1 and raw.startswith(BOM):
                raw = raw[len(BOM) :]
            if b"\0" in raw:
                raise error(f"{path}:{number}: a NUL byte: this is a binary file, not text ({quote(raw)})")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as problem:
                raise error(
                    f"{path}:{number}: byte {raw[problem.start]:#04x} at column {problem.start + 1} is not UTF-8 "
                    f"({quote(raw)}); save the file as UTF-8"
                ) from None
            yield number, line.rstrip("\n").rstrip("\r")


def read_qrels(path: str | Path) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """``{qid: {docid: rel}}`` from a TREC qrels file and counts of what it held.

    A pair judged twice with the same relevance is counted (``duplicate_judgments``); judged twice
    with different relevance it is an error naming both lines, since no rule for which to keep is right.
    """
    qrels: dict[str, dict[str, int]] = {}
    where: dict[tuple[str, str], int] = {}
    counts = {"judgments": 0, "duplicate_judgments": 0}
    for number, line in text_lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 4:
            raise TrecFormatError(f"{path}:{number}: expected 'qid 0 docid rel', got {quote(line)}")
        qid, _, doc_id, value = fields
        try:
            relevance = int(value)
        except ValueError:
            raise TrecFormatError(f"{path}:{number}: relevance {quote(value)} is not an integer") from None
        judged = qrels.setdefault(qid, {})
        if doc_id in judged:
            if judged[doc_id] != relevance:
                raise TrecFormatError(
                    f"{path}:{number}: ({qid}, {doc_id}) judged {relevance} here and {judged[doc_id]} "
                    f"on line {where[qid, doc_id]}"
                )
            counts["duplicate_judgments"] += 1
            continue
        judged[doc_id] = relevance
        where[qid, doc_id] = number
        counts["judgments"] += 1
    return qrels, counts


def write_run(
    path: str | Path,
    scores: torch.Tensor,
    query_ids: list[str],
    doc_ids: list[str],
    *,
    tag: str,
    depth: int = 1000,
) -> Path:
    """TREC run ``qid Q0 docid rank score tag`` of the top ``depth`` documents of each query.

    ``scores [Q, D]`` rows follow ``query_ids``, columns ``doc_ids``; ties keep document order.
    """
    if scores.shape != (len(query_ids), len(doc_ids)):
        raise ValueError(f"scores {tuple(scores.shape)} for {len(query_ids)} queries x {len(doc_ids)} documents")
    if any(len(name.split()) != 1 for name in (*query_ids, *doc_ids, tag)):
        raise ValueError("query ids, document ids and the tag must be non-empty and free of whitespace")
    depth = min(depth, scores.shape[1])
    order = torch.sort(scores.float(), dim=1, descending=True, stable=True)
    lines = []
    for q, qid in enumerate(query_ids):
        values, documents = order.values[q, :depth].tolist(), order.indices[q, :depth].tolist()
        lines += [f"{qid} Q0 {doc_ids[d]} {r} {v:.9g} {tag}" for r, (v, d) in enumerate(zip(values, documents), 1)]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # whole or not at all: a run file cut short by a full disk would be scored as a shorter run
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        partial.write_text("".join(line + "\n" for line in lines))
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def read_run(path: str | Path) -> dict[str, dict[str, float]]:
    """``{qid: {docid: score}}`` of a TREC run file; malformed lines, non-finite scores and a document
    listed twice for one query are errors naming the line."""
    run: dict[str, dict[str, float]] = {}
    for number, line in text_lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 6:
            raise TrecFormatError(f"{path}:{number}: expected 'qid Q0 docid rank score tag', got {quote(line)}")
        qid, _, doc_id, rank, value, _ = fields
        try:
            int(rank)
            score = float(value)
        except ValueError:
            raise TrecFormatError(
                f"{path}:{number}: rank {quote(rank)} or score {quote(value)} is not a number"
            ) from None
        if not math.isfinite(score):
            raise TrecFormatError(f"{path}:{number}: score {value} is not finite")
        ranked = run.setdefault(qid, {})
        if doc_id in ranked:
            raise TrecFormatError(f"{path}:{number}: document {doc_id} listed twice for query {qid}")
        ranked[doc_id] = score
    return run


__all__ = ["TrecFormatError", "quote", "read_qrels", "read_run", "text_lines", "write_run"]
