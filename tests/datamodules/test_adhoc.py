"""Ad-hoc collections: reading, BM25 against rank_bm25, metrics against trec_eval, run files."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datamodules.adhoc import (
    CollectionFormatError,
    bm25_scores,
    evaluate,
    read_collection,
    write_run,
)
from datamodules.text import tokenize

DOCS = [
    ("d1", "the cat sat on the mat"),
    ("d2", "the dog chased the cat around the garden"),
    ("d3", "a bird in the garden sang"),
    ("d4", "cats and dogs and birds"),
    ("d5", "the the the the"),
    ("d6", "mat mat garden"),
]
QUERIES = [("q1", "cat on mat"), ("q2", "garden bird bird"), ("q3", "unknownword the")]
QRELS = ["q1 0 d1 1", "q1 0 d6 1", "q2 0 d3 2", "q2 0 d2 1", "q2 0 dmissing 1", "q9 0 d1 1"]


def write_collection(folder, docs=DOCS, queries=QUERIES, qrels=QRELS):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "docs.tsv").write_text("".join(f"{i}\t{t}\n" for i, t in docs))
    (folder / "queries.tsv").write_text("".join(f"{i}\t{t}\n" for i, t in queries))
    (folder / "qrels.txt").write_text("\n".join(qrels) + "\n")
    return folder


def test_collection_is_read_with_qrels_as_labels(tmp_path):
    collection = read_collection(write_collection(tmp_path / "c"))
    assert collection.doc_ids == [d for d, _ in DOCS] and collection.query_ids == ["q1", "q2", "q3"]
    assert collection.labels[0].tolist() == [1, 0, 0, 0, 0, 1]
    assert collection.labels[1].tolist() == [0, 1, 2, 0, 0, 0]
    assert collection.statistics["judged_docs_missing"] == 1  # counted, not silently dropped
    assert collection.statistics["queries_without_relevant"] == 1
    # query terms are mapped into the documents' vocabulary; unknown ones match nothing
    assert collection.queries.term_ids.max() < len(collection.documents.vocabulary)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("docs.tsv", "d1\tok\nbroken line\n", r"docs.tsv:2: expected 'id<TAB>text'"),
        ("docs.tsv", "d1\ta\nd1\tb\n", r"docs.tsv:2: duplicate id 'd1'"),
        ("qrels.txt", "q1 0 d1 1\nq1 d1 1\n", r"qrels.txt:2: expected 'qid 0 docid rel'"),
        ("qrels.txt", "q1 0 d1 yes\n", r"qrels.txt:1: relevance 'yes' is not an integer"),
        ("queries.tsv", "\n\n", r"queries.tsv: empty"),
    ],
)
def test_bad_collection_files_name_the_line(tmp_path, name, content, message):
    folder = write_collection(tmp_path / "c")
    (folder / name).write_text(content)
    with pytest.raises(CollectionFormatError, match=message):
        read_collection(folder)


@pytest.mark.parametrize(("k1", "b"), [(1.5, 0.75), (1.2, 0.3), (0.9, 1.0)])
def test_bm25_matches_rank_bm25(tmp_path, k1, b):
    rank_bm25 = pytest.importorskip("rank_bm25")
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    docs = [(f"d{i}", " ".join(rng.choice(words, rng.integers(3, 30)))) for i in range(50)]
    queries = [(f"q{i}", " ".join(rng.choice(words, rng.integers(1, 5)))) for i in range(8)]
    collection = read_collection(write_collection(tmp_path / "c", docs, queries, ["q0 0 d0 1"]))
    ours = bm25_scores(collection.documents, collection.queries, k1=k1, b=b)
    reference = rank_bm25.BM25Okapi([tokenize(text) for _, text in docs], k1=k1, b=b, epsilon=0.25)
    for q, (_, text) in enumerate(queries):
        expected = reference.get_scores(tokenize(text))
        np.testing.assert_allclose(ours[q].numpy(), expected, rtol=1e-5, atol=1e-5)


def test_metrics_and_run_files_agree_with_trec_eval(tmp_path):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    collection = read_collection(write_collection(tmp_path / "c"))
    scores = torch.rand(collection.labels.shape, generator=torch.Generator().manual_seed(1))  # no ties
    ours = evaluate(scores, collection.labels)
    write_run(tmp_path / "run.txt", scores, collection, tag="t")
    run: dict[str, dict[str, float]] = {}
    for line in (tmp_path / "run.txt").read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        run.setdefault(qid, {})[doc] = float(score)
    qrels = {}
    for line in QRELS:
        qid, _, doc, rel = line.split()
        qrels.setdefault(qid, {})[doc] = int(rel)
    judged = {q: {d: r for d, r in docs.items() if d in dict(DOCS)} for q, docs in qrels.items() if q in run}
    measures = pytrec_eval.RelevanceEvaluator(judged, {"map", "P_10", "Rprec"}).evaluate(run)
    judged_queries = [q for q in measures if any(r > 0 for r in judged[q].values())]
    assert ours["queries"] == len(judged_queries) == 2
    for ours_key, theirs_key in (("map", "map"), ("p@10", "P_10"), ("r_precision", "Rprec")):
        expected = np.mean([measures[q][theirs_key] for q in judged_queries])
        assert ours[ours_key] == pytest.approx(expected, abs=1e-6), ours_key
