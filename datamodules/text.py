"""Tokenizer and bag-of-words term statistics shared by the Wikipedia, ad-hoc and BM25 code.

A corpus is stored as CSR arrays: document ``d``'s distinct terms are
``term_ids[offsets[d]:offsets[d + 1]]`` (sorted ascending) with counts ``tfs`` at the same positions;
``lengths[d]`` is its number of tokens, ``df[t]`` the number of documents containing term ``t``.
"""

from __future__ import annotations

import re
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


__all__ = ["TOKENIZER", "Corpus", "CorpusBuilder", "corpus_from_texts", "load_corpus", "save_corpus", "tokenize"]
