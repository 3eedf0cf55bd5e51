"""Retrieval building blocks: term statistics, Okapi BM25, sparse scoring, TREC files, ad-hoc evaluation.

``retrieval.terms`` tokenizes text and keeps bag-of-words statistics as CSR arrays; ``retrieval.sparse``
scores sparse query/document weight matrices against an inverted index; ``retrieval.bm25`` is Okapi
BM25 (equal to rank_bm25's ``BM25Okapi``); ``retrieval.trec`` reads and writes TREC qrels and run
files; ``retrieval.evaluation`` turns score matrices into trec_eval-equal measures and run files.
Nothing here knows about models or Lightning: rankers and datamodules both build on it.
"""

from retrieval.bm25 import bm25_idf, bm25_scores, bm25_term_weight
from retrieval.evaluation import evaluate, evaluate_runs
from retrieval.sparse import entry_index, inverted_index, rank, sparse_rows, top_k
from retrieval.terms import TOKENIZER, Corpus, CorpusBuilder, TermFeatures, corpus_from_texts, tokenize
from retrieval.trec import TrecFormatError, read_qrels, read_run, write_run

__all__ = [
    "TOKENIZER",
    "Corpus",
    "CorpusBuilder",
    "TermFeatures",
    "TrecFormatError",
    "bm25_idf",
    "bm25_scores",
    "bm25_term_weight",
    "corpus_from_texts",
    "entry_index",
    "evaluate",
    "evaluate_runs",
    "inverted_index",
    "rank",
    "read_qrels",
    "read_run",
    "sparse_rows",
    "tokenize",
    "top_k",
    "write_run",
]
