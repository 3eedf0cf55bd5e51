"""retrieval.bm25 against rank_bm25's BM25Okapi, and the term statistics it builds on."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.bm25 import bm25_scores
from retrieval.terms import TermFeatures, corpus_from_texts, load_corpus, save_corpus, tokenize


def random_texts(seed: int, n: int, words: int = 40, longest: int = 30) -> list[str]:
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{i}" for i in range(words)]
    return [" ".join(rng.choice(vocabulary, rng.integers(1, longest))) for _ in range(n)]


@pytest.mark.parametrize(("k1", "b"), [(1.5, 0.75), (1.2, 0.3), (0.9, 1.0)])
def test_bm25_matches_rank_bm25(k1, b):
    rank_bm25 = pytest.importorskip("rank_bm25")
    docs, queries = random_texts(0, 50), random_texts(1, 8, longest=5)
    documents = corpus_from_texts(docs)
    vocabulary = {term: i for i, term in enumerate(documents.vocabulary)}
    ours = bm25_scores(documents, corpus_from_texts(queries, vocabulary, grow=False), k1=k1, b=b)
    reference = rank_bm25.BM25Okapi([tokenize(text) for text in docs], k1=k1, b=b, epsilon=0.25)
    for q, text in enumerate(queries):
        np.testing.assert_allclose(ours[q].numpy(), reference.get_scores(tokenize(text)), rtol=1e-5, atol=1e-5)


def test_tokenizer_keeps_words_of_any_script_whole():
    assert tokenize("The U.S. in 1990's") == ["the", "u", "s", "in", "1990", "s"]
    assert tokenize("Aglyunys nūvods_x Ščučja") == ["aglyunys", "nūvods", "x", "ščučja"]


def test_corpus_statistics_and_cache_round_trip(tmp_path):
    corpus = corpus_from_texts(["a b a", "b c", "ūdiņs a"])
    assert corpus.vocabulary == ["a", "b", "c", "ūdiņs"] and corpus.df.tolist() == [2, 2, 1, 1]
    np.testing.assert_allclose(corpus.idf(), np.log(3 / np.array([2, 2, 1, 1])), rtol=1e-6)
    save_corpus(tmp_path / "c.npz", corpus, extra=np.arange(3))
    loaded, extra = load_corpus(tmp_path / "c.npz")
    assert loaded.vocabulary == corpus.vocabulary and extra["extra"].tolist() == [0, 1, 2]
    for name in ("offsets", "term_ids", "tfs", "lengths"):
        assert np.array_equal(getattr(loaded, name), getattr(corpus, name))


def test_term_features_of_several_corpora_keep_their_own_statistics():
    first, second = corpus_from_texts(["a b", "a a a a"]), corpus_from_texts(["a", "c", "c d", "e"])
    joined = TermFeatures.concat([first.features(), second.features()])
    assert joined.n_docs == 6
    # term ids stay disjoint: the second corpus's "a" is not the first's
    assert joined.term_ids.tolist() == [0, 1, 0, 2, 3, 3, 4, 5]
    np.testing.assert_allclose(joined.idf, np.concatenate([first.idf(), second.idf()]))
    # lengths relative to each corpus's own mean: (2, 4) / 3 and (1, 1, 2, 1) / 1.25
    np.testing.assert_allclose(joined.lengths, [2 / 3, 4 / 3, 0.8, 0.8, 1.6, 0.8], rtol=1e-6)
    tensors = joined.tensors()
    for name in ("tf", "idf", "length"):
        source = {"tf": "tfs", "idf": "idf", "length": "lengths"}[name]
        assert (tensors[f"{name}_values"][tensors[f"{name}_codes"]] == tensors[source]).all()
