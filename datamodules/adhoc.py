"""Ad-hoc retrieval collections: a folder with ``docs.tsv``, ``queries.tsv`` and ``qrels.txt``.

``docs.tsv`` is ``docid<TAB>text``, ``queries.tsv`` ``qid<TAB>text``, ``qrels.txt`` TREC
(``qid 0 docid rel``). Documents and queries are tokenized like the training corpus
(``retrieval.terms``); query terms absent from the documents are dropped (they match nothing under
any model). Reading only: ranking and evaluation live in ``retrieval``.

Nothing is dropped silently: judgments of documents not in ``docs.tsv`` or of queries not in
``queries.tsv`` and queries without a relevant document are counted in ``Collection.statistics``
(and logged); a collection where no query has a relevant document is an error, as are non-UTF-8
bytes, lines without a tab, duplicate ids and conflicting judgments (each naming file and line).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from datamodules.errors import DataError
from retrieval.terms import Corpus, CorpusBuilder, tokenize
from retrieval.trec import TrecFormatError, quote, read_qrels, text_lines

log = logging.getLogger(__name__)


class CollectionFormatError(TrecFormatError, DataError):
    """A collection file that cannot be used; the message names the file and line."""


class Collection:
    """``doc_ids``, ``query_ids``, ``documents`` and ``queries`` (a ``Corpus`` over the documents'
    vocabulary), ``labels [Q, D]`` graded relevance (negative judgments count as 0), ``statistics``.
    A plain class: Hydra's ``instantiate`` would turn a dataclass argument into a config."""

    def __init__(
        self,
        *,
        doc_ids: list[str],
        query_ids: list[str],
        documents: Corpus,
        queries: Corpus,
        labels: torch.Tensor,
        statistics: dict[str, int],
    ) -> None:
        self.doc_ids, self.query_ids, self.documents, self.queries = doc_ids, query_ids, documents, queries
        self.labels, self.statistics = labels, statistics


def read_tsv(path: str | Path) -> list[tuple[str, str]]:
    """``(id, text)`` rows of an ``id<TAB>text`` file; blank lines skipped, ids unique."""
    rows, seen = [], {}
    for number, line in text_lines(path, CollectionFormatError):
        if not line.strip():
            continue
        if "\t" not in line:
            raise CollectionFormatError(f"{path}:{number}: expected 'id<TAB>text', got {quote(line)}")
        key, text = line.split("\t", 1)
        key = key.strip()
        if not key or len(key.split()) != 1:
            raise CollectionFormatError(f"{path}:{number}: id {quote(key)} is empty or has a space")
        if key in seen:
            raise CollectionFormatError(f"{path}:{number}: duplicate id {key!r} (first on line {seen[key]})")
        seen[key] = number
        rows.append((key, text))
    if not rows:
        raise CollectionFormatError(f"{path}: empty")
    return rows


def read_collection(folder: str | Path) -> Collection:
    """The collection in ``folder``; see the module docstring for what is counted and what is an error."""
    folder = Path(folder)
    docs = read_tsv(folder / "docs.tsv")
    queries = read_tsv(folder / "queries.tsv")
    try:
        qrels, counts = read_qrels(folder / "qrels.txt")
    except CollectionFormatError:
        raise
    except TrecFormatError as error:
        raise CollectionFormatError(str(error)) from None
    builder = CorpusBuilder()
    for _, text in docs:
        builder.add(tokenize(text))
    documents = builder.build()
    query_builder = CorpusBuilder(builder.vocabulary, grow=False)
    for _, text in queries:
        query_builder.add(tokenize(text))
    doc_index = {doc_id: i for i, (doc_id, _) in enumerate(docs)}
    query_index = {qid: i for i, (qid, _) in enumerate(queries)}
    labels = torch.zeros(len(queries), len(docs))
    statistics = {"documents": len(docs), "queries": len(queries), **counts}
    statistics.update(judgments_unknown_query=0, relevant_docs_missing=0, judgments_docs_missing=0)
    for qid, judged in qrels.items():
        if qid not in query_index:
            # TREC qrels often cover more topics than a run: counted, not an error
            statistics["judgments_unknown_query"] += len(judged)
            continue
        for doc_id, relevance in judged.items():
            if doc_id not in doc_index:
                statistics["judgments_docs_missing"] += 1
                statistics["relevant_docs_missing"] += relevance > 0
                continue
            labels[query_index[qid], doc_index[doc_id]] = max(relevance, 0)
    statistics["queries_without_relevant"] = int((labels.amax(1) <= 0).sum())
    if statistics["queries_without_relevant"] == len(queries):
        raise CollectionFormatError(
            f"{folder / 'qrels.txt'}: none of the {len(queries)} queries of queries.tsv has a relevant document "
            f"in docs.tsv ({statistics}); check that the ids match"
        )
    skipped = {
        k: v for k, v in statistics.items() if k.endswith(("missing", "unknown_query", "without_relevant")) and v
    }
    if skipped:
        log.warning("%s: %s", folder, skipped)
    return Collection(
        doc_ids=[d for d, _ in docs],
        query_ids=[q for q, _ in queries],
        documents=documents,
        queries=query_builder.build(len(builder.vocabulary)),
        labels=labels,
        statistics=statistics,
    )


__all__ = ["Collection", "CollectionFormatError", "read_collection", "read_tsv"]
