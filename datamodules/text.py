"""Tokenizer and bag-of-words term statistics shared by the Wikipedia, ad-hoc and BM25 code.

A corpus is stored as CSR arrays: document ``d``'s distinct terms are
``term_ids[offsets[d]:offsets[d + 1]]`` (sorted ascending) with counts ``tfs`` at the same positions;
``lengths[d]`` is its number of tokens, ``df[t]`` the number of documents containing term ``t``.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import torch

TOKEN = re.compile(r"[a-z0-9]+")
TOKENIZER = {"pattern": TOKEN.pattern, "lowercase": True, "stopwords": "none", "stemming": "none"}


def tokenize(text: str) -> list[str]:
    """Lowercased alphanumeric runs: ``"The U.S. in 1990's"`` -> ``["the", "u", "s", "in", "1990", "s"]``."""
    return TOKEN.findall(text.lower())


@dataclass
class Corpus:
    """Term statistics of ``n_docs`` documents over ``vocabulary`` (see the module docstring)."""

    offsets: np.ndarray  # [D + 1] int64
    term_ids: np.ndarray  # [nnz] int64, ascending within a document
    tfs: np.ndarray  # [nnz] float32
    lengths: np.ndarray  # [D] float32
    vocabulary: list[str]
    df: np.ndarray = field(init=False)  # [V] int64

    def __post_init__(self) -> None:
        self.df = np.bincount(self.term_ids, minlength=len(self.vocabulary)).astype(np.int64)

    @property
    def n_docs(self) -> int:
        return len(self.offsets) - 1

    def idf(self) -> np.ndarray:
        """``log(N / df)`` per term, as in Grangier & Bengio's section 2 (0 for unseen terms)."""
        return np.log(self.n_docs / np.maximum(self.df, 1)).astype(np.float32)

    def tensors(self, device: torch.device | str = "cpu", *, idf: np.ndarray | None = None) -> dict[str, torch.Tensor]:
        """The CSR arrays and ``idf`` (this corpus's, or the one given) as tensors on ``device``,
        plus each feature's distinct values and every entry's code into them:

        ``tf_values [U]`` / ``tf_codes [nnz]``, ``idf_values`` / ``idf_codes [V]``,
        ``length_values`` / ``length_codes [D]``: ``tfs == tf_values[tf_codes]`` and so on. A model
        of one scalar feature then runs once per distinct value of the corpus, not per entry.

        ``lengths`` here are relative: tokens divided by the corpus's mean document length (as BM25
        uses them), so a length model learned on Wikipedia transfers to a collection whose documents
        are typically shorter or longer.
        """
        idf = self.idf() if idf is None else idf
        relative = self.lengths / max(float(self.lengths.mean()), 1.0) if len(self.lengths) else self.lengths
        arrays = {"offsets": self.offsets, "term_ids": self.term_ids, "tfs": self.tfs, "lengths": relative}
        arrays["idf"] = idf
        for name, values in (("tf", self.tfs), ("idf", idf), ("length", relative)):
            arrays[f"{name}_values"], arrays[f"{name}_codes"] = np.unique(values, return_inverse=True)
        return {name: torch.from_numpy(np.ascontiguousarray(value)).to(device) for name, value in arrays.items()}


class CorpusBuilder:
    """Adds documents one at a time (streaming); keeps only ids and counts, never the text."""

    def __init__(self, vocabulary: dict[str, int] | None = None, *, grow: bool = True) -> None:
        self.vocabulary: dict[str, int] = dict(vocabulary or {})
        self.grow = grow
        self._terms: list[np.ndarray] = []
        self._tfs: list[np.ndarray] = []
        self._lengths: list[int] = []

    def add(self, tokens: Iterable[str]) -> int:
        """Add one document; returns its index. Unknown terms are added (``grow``) or skipped."""
        counts = Counter(tokens)
        ids, tfs = [], []
        for term, count in counts.items():
            term_id = self.vocabulary.get(term)
            if term_id is None:
                if not self.grow:
                    continue
                term_id = self.vocabulary[term] = len(self.vocabulary)
            ids.append(term_id)
            tfs.append(count)
        order = np.argsort(ids, kind="stable")
        self._terms.append(np.asarray(ids, dtype=np.int64)[order])
        self._tfs.append(np.asarray(tfs, dtype=np.float32)[order])
        self._lengths.append(sum(counts.values()))
        return len(self._lengths) - 1

    def build(self) -> Corpus:
        sizes = np.fromiter((len(t) for t in self._terms), dtype=np.int64, count=len(self._terms))
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0, np.float32)
        vocabulary = [""] * len(self.vocabulary)
        for term, index in self.vocabulary.items():
            vocabulary[index] = term
        return Corpus(
            offsets=offsets,
            term_ids=np.concatenate(self._terms) if self._terms else empty_i,
            tfs=np.concatenate(self._tfs) if self._tfs else empty_f,
            lengths=np.asarray(self._lengths, dtype=np.float32),
            vocabulary=vocabulary,
        )


def corpus_from_texts(texts: Iterable[str], vocabulary: dict[str, int] | None = None, *, grow: bool = True) -> Corpus:
    builder = CorpusBuilder(vocabulary, grow=grow)
    for text in texts:
        builder.add(tokenize(text))
    return builder.build()


def save_corpus(path, corpus: Corpus, **extra: np.ndarray) -> None:
    np.savez(
        path,
        offsets=corpus.offsets,
        term_ids=corpus.term_ids,
        tfs=corpus.tfs,
        lengths=corpus.lengths,
        vocabulary=np.asarray(corpus.vocabulary, dtype=object),
        **extra,
    )


def load_corpus(path) -> tuple[Corpus, dict[str, np.ndarray]]:
    with np.load(path, allow_pickle=True) as data:
        corpus = Corpus(
            offsets=data["offsets"],
            term_ids=data["term_ids"],
            tfs=data["tfs"],
            lengths=data["lengths"],
            vocabulary=list(data["vocabulary"]),
        )
        extra = {name: data[name] for name in data.files if name not in {"offsets", "term_ids", "tfs", "lengths"}}
    return corpus, extra


# -- synthetic text for tests, benchmarks and smoke runs ------------------------------------------------
COMMON_WORDS = [f"common{j}" for j in range(200)]
_ZIPF = 1.0 / np.arange(1, len(COMMON_WORDS) + 1)
_ZIPF /= _ZIPF.sum()


def synthetic_words(
    rng: np.random.Generator,
    length: int,
    *,
    topic: str,
    topic_share: float,
    mixed_in: str | None = None,
    mixed_share: float = 0.0,
) -> list[str]:
    """A shuffled bag of about ``length`` tokens: a Binomial(``topic_share``) share of the topic's
    words ``{topic}w{j}`` (j < 25), ``mixed_share`` times as many words of topic ``mixed_in``, and
    Zipf-distributed common words (stop-word-like) for the rest."""
    n_topic = rng.binomial(length, topic_share)
    words = [f"{topic}w{j}" for j in rng.integers(0, 25, n_topic)]
    if mixed_in is not None:
        words += [f"{mixed_in}w{j}" for j in rng.integers(0, 25, int(n_topic * mixed_share))]
    words += [COMMON_WORDS[j] for j in rng.choice(len(COMMON_WORDS), length - n_topic, p=_ZIPF)]
    rng.shuffle(words)
    return words


# -- sparse term matrices over CSR corpora (shared by LinkLearn, its validation and BM25) ------------
def entry_index(offsets: torch.Tensor, docs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The CSR entries of rows ``docs [P]``: ``owner [n]`` (0..P-1) and their positions ``[n]``.

    Entries are ordered by owner, then as stored (a corpus keeps terms sorted per document).
    """
    start, count = offsets[docs], offsets[docs + 1] - offsets[docs]
    owner = torch.repeat_interleave(torch.arange(len(docs), device=docs.device), count)
    shift = torch.repeat_interleave(start - (torch.cumsum(count, 0) - count), count)
    return owner, torch.arange(len(owner), device=docs.device) + shift


def sparse_rows(
    rows: torch.Tensor, columns: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]
) -> torch.Tensor:
    """Coalesced sparse COO matrix with ``values`` at ``(rows, columns)`` (all ``[n]``)."""
    indices = torch.stack([rows, columns])
    return torch.sparse_coo_tensor(indices, values, shape, check_invariants=False).coalesce()


def inverted_index(documents: torch.Tensor) -> torch.Tensor:
    """Sparse COO ``[D, V]`` document weights -> sparse CSR ``[V, D]``: each term's postings."""
    with warnings.catch_warnings():  # "sparse CSR support is in beta": the product we use is stable
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return documents.t().coalesce().to_sparse_csr()


def rank(index: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """``[Q, D]`` similarities of sparse ``queries [Q, V]`` against an ``inverted_index [V, D]``.

    A sparse-sparse product touches only the postings of the query terms, never a dense ``[V, Q]``
    query matrix (``bench/linklearn.py`` times both).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse.mm(queries.to_sparse_csr(), index).to_dense()


__all__ = [
    "TOKENIZER",
    "Corpus",
    "CorpusBuilder",
    "corpus_from_texts",
    "entry_index",
    "inverted_index",
    "load_corpus",
    "rank",
    "save_corpus",
    "sparse_rows",
    "tokenize",
]
