"""Tokenizer and bag-of-words term statistics shared by the Wikipedia reader, ad-hoc collections and BM25.

A corpus is stored as CSR arrays: document ``d``'s distinct terms are
``term_ids[offsets[d]:offsets[d + 1]]`` (sorted ascending) with counts ``tfs`` at the same positions;
``lengths[d]`` is its number of tokens, ``df[t]`` the number of documents containing term ``t``.

``TermFeatures`` is what a vocabulary-independent term weighting (LinkLearn's ``f(tf, idf, len)``)
reads: the CSR entries with each term's idf and each document's length relative to its own
collection's mean. Several corpora (language editions, dumps) concatenate into one ``TermFeatures``
with disjoint term ids, each keeping its own idf and mean length.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

# letters and digits of any script (Latgalian "nūvods" is one word), lowercased; no stemming, no stop list
TOKEN = re.compile(r"[^\W_]+")
TOKENIZER = {"pattern": TOKEN.pattern, "lowercase": True, "stopwords": "none", "stemming": "none"}


def tokenize(text: str) -> list[str]:
    """Lowercased runs of letters and digits: ``"The U.S. in 1990's"`` -> ``["the", "u", "s", "in", "1990", "s"]``."""
    return TOKEN.findall(text.lower())


@dataclass
class TermFeatures:
    """CSR (document, term) entries with the features of a vocabulary-independent term weight.

    ``offsets [D + 1]``, ``term_ids [nnz]`` (ascending within a document), ``tfs [nnz]`` raw counts,
    ``idf [V]`` ``log(N / df)`` within the term's own collection, ``lengths [D]`` tokens divided by
    the mean over the document's own collection (as BM25's ``l_d / L``).
    """

    offsets: np.ndarray
    term_ids: np.ndarray
    tfs: np.ndarray
    idf: np.ndarray
    lengths: np.ndarray

    @property
    def n_docs(self) -> int:
        return len(self.offsets) - 1

    @staticmethod
    def concat(parts: Sequence[TermFeatures]) -> TermFeatures:
        """One ``TermFeatures`` of all documents, in order; term ids shifted so vocabularies stay disjoint."""
        term_shift = np.cumsum([0] + [len(p.idf) for p in parts[:-1]])
        entry_shift = np.cumsum([0] + [len(p.term_ids) for p in parts[:-1]])
        return TermFeatures(
            offsets=np.concatenate([[0]] + [p.offsets[1:] + s for p, s in zip(parts, entry_shift)]).astype(np.int64),
            term_ids=np.concatenate([p.term_ids + s for p, s in zip(parts, term_shift)]).astype(np.int64),
            tfs=np.concatenate([p.tfs for p in parts]).astype(np.float32),
            idf=np.concatenate([p.idf for p in parts]).astype(np.float32),
            lengths=np.concatenate([p.lengths for p in parts]).astype(np.float32),
        )

    def tensors(self, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """The arrays as tensors on ``device``, plus each feature's distinct values and every entry's
        code into them: ``tf_values [U]`` / ``tf_codes [nnz]``, ``idf_values`` / ``idf_codes [V]``,
        ``length_values`` / ``length_codes [D]`` (``tfs == tf_values[tf_codes]`` and so on). A model of
        one scalar feature then runs once per distinct value of the corpus, not once per entry."""
        arrays = {
            "offsets": self.offsets,
            "term_ids": self.term_ids,
            "tfs": self.tfs,
            "idf": self.idf,
            "lengths": self.lengths,
        }
        for name, values in (("tf", self.tfs), ("idf", self.idf), ("length", self.lengths)):
            arrays[f"{name}_values"], arrays[f"{name}_codes"] = np.unique(values, return_inverse=True)
        return {name: torch.from_numpy(np.ascontiguousarray(value)).to(device) for name, value in arrays.items()}


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
        return np.log(max(self.n_docs, 1) / np.maximum(self.df, 1)).astype(np.float32)

    def relative_lengths(self, mean_length: float | None = None) -> np.ndarray:
        """Tokens per document over ``mean_length`` (default: this corpus's mean, at least 1)."""
        mean = float(self.lengths.mean()) if mean_length is None and len(self.lengths) else (mean_length or 1.0)
        return (self.lengths / max(mean, 1.0)).astype(np.float32)

    def features(self, *, idf: np.ndarray | None = None) -> TermFeatures:
        """``TermFeatures`` with this corpus's idf (or the one given: queries use their documents')."""
        return TermFeatures(
            self.offsets, self.term_ids, self.tfs, self.idf() if idf is None else idf, self.relative_lengths()
        )

    def tensors(self, device: torch.device | str = "cpu", *, idf: np.ndarray | None = None) -> dict[str, torch.Tensor]:
        """``self.features(idf=idf).tensors(device)``."""
        return self.features(idf=idf).tensors(device)


class CorpusBuilder:
    """Adds documents one at a time (streaming); keeps only ids and counts, never the text."""

    def __init__(self, vocabulary: dict[str, int] | None = None, *, grow: bool = True) -> None:
        self.vocabulary: dict[str, int] = dict(vocabulary or {}) if grow else (vocabulary or {})
        self.grow = grow
        self._terms: list[np.ndarray] = []
        self._tfs: list[np.ndarray] = []
        self._lengths: list[int] = []

    def add(self, tokens: Iterable[str]) -> int:
        """Add one document; returns its index. Unknown terms are added (``grow``) or skipped."""
        counts = Counter(tokens)
        vocabulary = self.vocabulary
        # whole-document operations instead of a Python loop per term (a 3,000-token article has ~1,000):
        # new terms get ids in order of first occurrence, so ids do not depend on hashing
        if self.grow:
            new = [term for term in counts if term not in vocabulary]
            vocabulary.update(zip(new, range(len(vocabulary), len(vocabulary) + len(new))))
            ids = np.fromiter(map(vocabulary.__getitem__, counts), dtype=np.int64, count=len(counts))
            tfs = np.fromiter(counts.values(), dtype=np.float32, count=len(counts))
        else:
            ids = np.fromiter(map(vocabulary.get, counts, itertools.repeat(-1)), dtype=np.int64, count=len(counts))
            tfs = np.fromiter(counts.values(), dtype=np.float32, count=len(counts))
            ids, tfs = ids[ids >= 0], tfs[ids >= 0]
        order = np.argsort(ids, kind="stable")
        self._terms.append(ids[order])
        self._tfs.append(tfs[order])
        self._lengths.append(sum(counts.values()))
        return len(self._lengths) - 1

    def __len__(self) -> int:
        return len(self._lengths)

    def build(self, vocabulary_size: int | None = None) -> Corpus:
        """The corpus so far; ``vocabulary_size`` pads the vocabulary (queries built over documents' terms)."""
        sizes = np.fromiter((len(t) for t in self._terms), dtype=np.int64, count=len(self._terms))
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0, np.float32)
        vocabulary = [""] * max(len(self.vocabulary), vocabulary_size or 0)
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
    """``Corpus`` of tokenized ``texts``; with ``grow=False`` only terms of ``vocabulary`` are kept."""
    builder = CorpusBuilder(vocabulary, grow=grow)
    for text in texts:
        builder.add(tokenize(text))
    return builder.build()


def save_corpus(path, corpus: Corpus, **extra: np.ndarray) -> None:
    """``np.savez`` of the corpus's arrays and ``extra`` arrays (no pickles)."""
    np.savez(
        path,
        offsets=corpus.offsets,
        term_ids=corpus.term_ids,
        tfs=corpus.tfs,
        lengths=corpus.lengths,
        # one UTF-8 buffer, newline-separated (a token has no whitespace): no pickle, no fixed-width strings
        vocabulary=np.frombuffer("\n".join(corpus.vocabulary).encode(), dtype=np.uint8),
        **extra,
    )


def load_corpus(path) -> tuple[Corpus, dict[str, np.ndarray]]:
    """The corpus and the extra arrays written by ``save_corpus``."""
    with np.load(path, allow_pickle=False) as data:
        corpus = Corpus(
            offsets=data["offsets"],
            term_ids=data["term_ids"],
            tfs=data["tfs"],
            lengths=data["lengths"],
            vocabulary=_split_vocabulary(data["vocabulary"].tobytes().decode()),
        )
        extra = {name: data[name] for name in data.files if name not in {"offsets", "term_ids", "tfs", "lengths"}}
    return corpus, extra


def _split_vocabulary(joined: str) -> list[str]:
    return joined.split("\n") if joined else []


__all__ = [
    "TOKENIZER",
    "Corpus",
    "CorpusBuilder",
    "TermFeatures",
    "corpus_from_texts",
    "load_corpus",
    "save_corpus",
    "tokenize",
]
