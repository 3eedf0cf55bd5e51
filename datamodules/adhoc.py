"""Ad-hoc retrieval collections, Okapi BM25, TREC run files and their evaluation.

A collection is a folder with ``docs.tsv`` (``docid<TAB>text``), ``queries.tsv`` (``qid<TAB>text``)
and ``qrels.txt`` (TREC: ``qid 0 docid rel``). Documents and queries are tokenized like the
training corpus (``datamodules.text``); query terms absent from the documents are dropped (they
match nothing under either model).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from datamodules.text import (
    COMMON_WORDS,
    Corpus,
    CorpusBuilder,
    inverted_index,
    rank,
    sparse_rows,
    synthetic_words,
    tokenize,
)
from metrics.functional import average_precision, ndcg, precision, r_precision

log = logging.getLogger(__name__)


class CollectionFormatError(ValueError):
    """A collection file that cannot be read; the message names the file and line."""


@dataclass
class Collection:
    doc_ids: list[str]
    query_ids: list[str]
    documents: Corpus
    queries: Corpus  # over the documents' vocabulary
    labels: torch.Tensor  # [Q, D] graded relevance from the qrels
    statistics: dict[str, int]


def _read_tsv(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        raise CollectionFormatError(f"{path}: missing")
    rows, seen = [], set()
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            if "\t" not in line:
                raise CollectionFormatError(f"{path}:{number}: expected 'id<TAB>text', got {line[:80]!r}")
            key, text = line.rstrip("\n").split("\t", 1)
            if key in seen:
                raise CollectionFormatError(f"{path}:{number}: duplicate id {key!r}")
            seen.add(key)
            rows.append((key, text))
    if not rows:
        raise CollectionFormatError(f"{path}: empty")
    return rows


def read_qrels(path: Path) -> list[tuple[str, str, int]]:
    """``(qid, docid, rel)`` from a TREC qrels file."""
    if not path.exists():
        raise CollectionFormatError(f"{path}: missing")
    rows = []
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 4:
                raise CollectionFormatError(f"{path}:{number}: expected 'qid 0 docid rel', got {line.strip()!r}")
            try:
                rows.append((fields[0], fields[2], int(fields[3])))
            except ValueError:
                raise CollectionFormatError(f"{path}:{number}: relevance {fields[3]!r} is not an integer") from None
    return rows


def read_collection(folder: str | Path) -> Collection:
    folder = Path(folder)
    docs = _read_tsv(folder / "docs.tsv")
    queries = _read_tsv(folder / "queries.tsv")
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
    counts = {"documents": len(docs), "queries": len(queries), "judgments": 0, "judged_docs_missing": 0}
    for qid, doc_id, rel in read_qrels(folder / "qrels.txt"):
        if qid not in query_index:
            continue  # judgments for queries not in this run (TREC qrels often cover more topics)
        counts["judgments"] += 1
        if doc_id not in doc_index:
            counts["judged_docs_missing"] += rel > 0
            continue
        labels[query_index[qid], doc_index[doc_id]] = max(rel, 0)
    counts["queries_without_relevant"] = int((labels.amax(1) <= 0).sum())
    if counts["judged_docs_missing"]:
        log.warning("%s: %d relevant judged documents are not in docs.tsv", folder, counts["judged_docs_missing"])
    return Collection(
        doc_ids=[d for d, _ in docs],
        query_ids=[q for q, _ in queries],
        documents=documents,
        queries=query_builder.build(),
        labels=labels,
        statistics=counts,
    )


def bm25_idf(corpus: Corpus, *, epsilon: float = 0.25) -> np.ndarray:
    """Robertson-Sparck Jones idf ``log((N - df + 0.5) / (df + 0.5))``; negative values (terms in over
    half the documents) become ``epsilon`` x the mean idf, as in rank_bm25's ``BM25Okapi``."""
    df = corpus.df.astype(np.float64)
    idf = np.log(corpus.n_docs - df + 0.5) - np.log(df + 0.5)
    floor = epsilon * idf.mean() if len(idf) else 0.0
    return np.where(idf < 0, floor, idf)


def bm25_term_weight(tf, length, idf, mean_length: float, *, k1: float, b: float):
    """The BM25 weight of (document, term) entries, numpy arrays or tensors of one shape:
    ``idf tf (k1 + 1) / (tf + k1 (1 - b + b len / mean_len))``."""
    return idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / max(float(mean_length), 1e-12)))


def bm25_scores(documents: Corpus, queries: Corpus, *, k1: float = 1.5, b: float = 0.75) -> torch.Tensor:
    """Okapi BM25 ``[Q, D]``: ``sum_{t in q} qtf_t idf_t tf (k1 + 1) / (tf + k1 (1 - b + b len/avglen))``.

    Query terms count with their multiplicity in the query (as rank_bm25 does).
    """
    idf = bm25_idf(documents)
    rows = np.repeat(np.arange(documents.n_docs), np.diff(documents.offsets))
    lengths = documents.lengths.astype(np.float64)
    weight = bm25_term_weight(
        documents.tfs.astype(np.float64), lengths[rows], idf[documents.term_ids], lengths.mean(), k1=k1, b=b
    )
    vocabulary = len(documents.vocabulary)
    doc_matrix = sparse_rows(
        torch.from_numpy(rows),
        torch.from_numpy(documents.term_ids),
        torch.from_numpy(weight),
        (documents.n_docs, vocabulary),
    )
    query_rows = np.repeat(np.arange(queries.n_docs), np.diff(queries.offsets))
    query_matrix = sparse_rows(
        torch.from_numpy(query_rows),
        torch.from_numpy(queries.term_ids),
        torch.from_numpy(queries.tfs.astype(np.float64)),
        (queries.n_docs, vocabulary),
    )
    return rank(inverted_index(doc_matrix), query_matrix).float()


def evaluate(scores: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """MAP, P@10, R-precision (break-even point) and nDCG@10 over the queries with a relevant document."""
    judged = labels.amax(1) > 0
    scores, labels = scores[judged].float(), labels[judged].float()
    return {
        "map": float(average_precision(scores, labels).mean()),
        "p@10": float(precision(scores, labels, k=10).mean()),
        "r_precision": float(r_precision(scores, labels).mean()),
        "ndcg@10": float(ndcg(scores, labels, k=10).mean()),
        "queries": int(judged.sum()),
    }


def write_run(path: str | Path, scores: torch.Tensor, collection: Collection, *, tag: str, depth: int = 1000) -> None:
    """TREC run file ``qid Q0 docid rank score tag``, the top ``depth`` documents per query."""
    top = scores.topk(min(depth, scores.shape[1]), dim=1)
    lines = []
    for q, qid in enumerate(collection.query_ids):
        for position, (value, d) in enumerate(zip(top.values[q].tolist(), top.indices[q].tolist(), strict=True), 1):
            lines.append(f"{qid} Q0 {collection.doc_ids[d]} {position} {value:.6f} {tag}")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(lines) + "\n")


def adhoc_evaluation(model: Any, folder: str | Path, out_dir: str | Path, *, k1: float, b: float) -> dict[str, Any]:
    """Rank the collection with ``model.score_collection`` and BM25; run files and metrics for both."""
    collection = read_collection(folder)
    runs = {
        "linklearn": model.score_collection(collection.documents, collection.queries).cpu(),
        "bm25": bm25_scores(collection.documents, collection.queries, k1=k1, b=b),
    }
    results: dict[str, Any] = {"collection": str(folder), "statistics": collection.statistics}
    for name, scores in runs.items():
        write_run(Path(out_dir) / f"{name}.run", scores, collection, tag=name)
        results[name] = {**evaluate(scores, collection.labels), "run": str(Path(out_dir) / f"{name}.run")}
    results["bm25"].update({"k1": k1, "b": b})
    return results


def write_synthetic_collection(
    folder: str | Path,
    *,
    n_docs: int = 400,
    n_topics: int = 20,
    n_queries: int = 20,
    topic_share: float = 0.3,
    lengths: tuple[int, int] = (40, 300),
    neighbour_share: float = 0.0,
    query_words: tuple[int, int] = (3, 1),
    seed: int = 0,
) -> Path:
    """A small ad-hoc collection drawn like ``wikipedia.write_synthetic_dump`` but over *other* topic
    words (``u{topic}w{j}``), so a model trained on the dump meets an unseen vocabulary.

    A document of ``lengths`` tokens has a ``topic_share`` of its topic's words, ``neighbour_share``
    times as many of the next topic's words (confusable documents), the rest Zipf-distributed common
    words. A query is ``query_words[0]`` words of one topic and ``query_words[1]`` frequent common
    words; the documents of that topic are relevant (rel 1).
    """
    rng = np.random.default_rng(seed)
    topic_of = rng.integers(0, n_topics, n_docs)
    docs = []
    for i in range(n_docs):
        length = int(rng.integers(*lengths))
        neighbour = f"u{(topic_of[i] + 1) % n_topics}"
        words = synthetic_words(
            rng,
            length,
            topic=f"u{topic_of[i]}",
            topic_share=topic_share,
            mixed_in=neighbour,
            mixed_share=neighbour_share,
        )
        docs.append(f"doc{i}\t{' '.join(words)}")
    queries, qrels = [], []
    for q in range(n_queries):
        topic = q % n_topics
        words = [f"u{topic}w{j}" for j in rng.integers(0, 25, query_words[0])]
        words += [COMMON_WORDS[int(j)] for j in rng.integers(0, 20, query_words[1])]
        queries.append(f"query{q}\t{' '.join(words)}")
        qrels += [f"query{q} 0 doc{i} 1" for i in np.flatnonzero(topic_of == topic)]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "docs.tsv").write_text("\n".join(docs) + "\n")
    (folder / "queries.tsv").write_text("\n".join(queries) + "\n")
    (folder / "qrels.txt").write_text("\n".join(qrels) + "\n")
    return folder
