"""Okapi BM25 (Robertson et al., TREC-3) over ``retrieval.terms.Corpus``, equal to rank_bm25's ``BM25Okapi``."""

from __future__ import annotations

import numpy as np
import torch

from retrieval.sparse import inverted_index, rank, sparse_rows
from retrieval.terms import Corpus


def bm25_idf(corpus: Corpus, *, epsilon: float = 0.25) -> np.ndarray:
    """Robertson-Sparck Jones idf ``log((N - df + 0.5) / (df + 0.5))`` per term ``[V]``; negative values
    (terms in over half the documents) become ``epsilon`` x the mean idf, as in rank_bm25's ``BM25Okapi``."""
    df = corpus.df.astype(np.float64)
    idf = np.log(corpus.n_docs - df + 0.5) - np.log(df + 0.5)
    floor = epsilon * idf.mean() if len(idf) else 0.0
    return np.where(idf < 0, floor, idf)


def bm25_term_weight(tf, length, idf, mean_length: float, *, k1: float, b: float):
    """The BM25 weight of (document, term) entries, numpy arrays or tensors of one shape:
    ``idf tf (k1 + 1) / (tf + k1 (1 - b + b len / mean_len))``."""
    return idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / max(float(mean_length), 1e-12)))


def bm25_matrix(
    corpus: Corpus, *, k1: float = 1.2, b: float = 0.75, idf: np.ndarray | None = None, dtype=torch.float64
) -> torch.Tensor:
    """Sparse COO ``[D, V]`` BM25 weights of every (document, term) entry of ``corpus``."""
    idf = bm25_idf(corpus) if idf is None else idf
    rows = np.repeat(np.arange(corpus.n_docs), np.diff(corpus.offsets))
    lengths = corpus.lengths.astype(np.float64)
    weight = bm25_term_weight(
        corpus.tfs.astype(np.float64),
        lengths[rows],
        idf[corpus.term_ids],
        lengths.mean() if len(lengths) else 1.0,
        k1=k1,
        b=b,
    )
    return sparse_rows(
        torch.from_numpy(rows),
        torch.from_numpy(corpus.term_ids),
        torch.from_numpy(weight).to(dtype),
        (corpus.n_docs, len(corpus.vocabulary)),
    )


def count_matrix(queries: Corpus, vocabulary_size: int, *, dtype=torch.float64) -> torch.Tensor:
    """Sparse COO ``[Q, V]`` term counts: BM25's query side (a term counts as often as it occurs)."""
    rows = np.repeat(np.arange(queries.n_docs), np.diff(queries.offsets))
    return sparse_rows(
        torch.from_numpy(rows),
        torch.from_numpy(queries.term_ids),
        torch.from_numpy(queries.tfs).to(dtype),
        (queries.n_docs, vocabulary_size),
    )


def bm25_scores(documents: Corpus, queries: Corpus, *, k1: float = 1.2, b: float = 0.75) -> torch.Tensor:
    """Okapi BM25 ``[Q, D]``: ``sum_{t in q} qtf_t idf_t tf (k1 + 1) / (tf + k1 (1 - b + b len/avglen))``.

    ``queries`` are over the documents' vocabulary (term ids index it); query terms count with their
    multiplicity (as rank_bm25 does).
    """
    index = inverted_index(bm25_matrix(documents, k1=k1, b=b))
    return rank(index, count_matrix(queries, len(documents.vocabulary))).float()


__all__ = ["bm25_idf", "bm25_matrix", "bm25_scores", "bm25_term_weight", "count_matrix"]
