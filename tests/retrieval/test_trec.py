"""TREC qrels/run files and ad-hoc evaluation against trec_eval (pytrec_eval); fuzzed readers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval.evaluation import evaluate, evaluate_runs
from retrieval.trec import TrecFormatError, read_qrels, read_run, write_run

FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
ID = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=8)


def trec_eval(labels: torch.Tensor, scores: torch.Tensor, measures: set[str]) -> dict[str, dict[str, float]]:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    qrels = {f"q{q}": {f"d{d}": int(labels[q, d]) for d in range(labels.shape[1])} for q in range(len(labels))}
    run = {f"q{q}": {f"d{d}": float(scores[q, d]) for d in range(labels.shape[1])} for q in range(len(labels))}
    return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_measures_equal_trec_eval(seed):
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 3, (12, 40), generator=generator).float() * (
        torch.rand(12, 40, generator=generator) < 0.3
    )
    labels[3] = 0  # a query without relevant documents is left out and counted
    scores = torch.rand(12, 40, generator=generator)  # no ties: trec_eval breaks ties by docid
    ours = evaluate(scores, labels)
    theirs = trec_eval(labels, scores, {"map", "P_10", "Rprec", "ndcg_cut_10"})
    judged = [f"q{q}" for q in range(12) if labels[q].max() > 0]
    assert ours["queries"] == len(judged) and ours["queries_without_relevant"] == 12 - len(judged)
    for key, measure in (("map", "map"), ("p@10", "P_10"), ("r_precision", "Rprec"), ("ndcg@10", "ndcg_cut_10")):
        assert ours[key] == pytest.approx(np.mean([theirs[q][measure] for q in judged]), abs=1e-6), key


def test_no_relevant_document_is_an_error_not_nan():
    with pytest.raises(ValueError, match="none of the 2 queries has a relevant document"):
        evaluate(torch.rand(2, 5), torch.zeros(2, 5))


def test_runs_are_written_ranked_and_read_back(tmp_path):
    scores = torch.tensor([[0.1, 0.9, 0.5], [0.3, 0.3, 0.7]])
    path = write_run(tmp_path / "r.run", scores, ["q1", "q2"], ["a", "b", "c"], tag="t", depth=2)
    assert path.read_text().splitlines() == [
        "q1 Q0 b 1 0.899999976 t",
        "q1 Q0 c 2 0.5 t",
        "q2 Q0 c 1 0.699999988 t",
        "q2 Q0 a 2 0.300000012 t",  # tie with b: document order
    ]
    assert read_run(path) == {
        "q1": {"b": pytest.approx(0.9), "c": 0.5},
        "q2": {"c": pytest.approx(0.7), "a": pytest.approx(0.3)},
    }
    results = evaluate_runs(
        {"m": scores}, torch.tensor([[0, 1, 0], [1, 0, 0]]).float(), ["q1", "q2"], ["a", "b", "c"], tmp_path
    )
    assert results["m"]["map"] == pytest.approx((1 + 0.5) / 2) and results["m"]["run"].endswith("m.run")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"q1 0 d1 1\nq1 d1 1\n", r"qrels.txt:2: expected 'qid 0 docid rel'"),
        (b"q1 0 d1 yes\n", r"qrels.txt:1: relevance 'yes' is not an integer"),
        (b"q1 0 d1 1\nq1 0 d2 0\nq1 0 d1 2\n", r"qrels.txt:3: \(q1, d1\) judged 2 here and 1 on line 1"),
        (b"q1 0 d1 1\nq1 0 d\xe9 1\n", r"qrels.txt:2: byte 0xe9 at column 7 is not UTF-8"),
        (b"\x00\x01" * 200_000, r"qrels.txt:1: a NUL byte: this is a binary file"),
    ],
    ids=["fields", "relevance", "conflict", "utf8", "binary"],
)
def test_bad_qrels_name_file_line_and_problem(tmp_path, content, message):
    path = tmp_path / "qrels.txt"
    path.write_bytes(content)
    with pytest.raises(TrecFormatError, match=message) as error:
        read_qrels(path)
    assert len(str(error.value)) < 700  # a binary file does not make a 4 MB message


def test_qrels_bom_and_duplicates_are_handled_and_counted(tmp_path):
    path = tmp_path / "qrels.txt"
    path.write_bytes(b"\xef\xbb\xbfq1 0 d1 1\r\nq1 0 d1 1\r\n\r\nq2 0 d3 0\n")
    qrels, counts = read_qrels(path)
    assert qrels == {"q1": {"d1": 1}, "q2": {"d3": 0}} and counts == {"judgments": 2, "duplicate_judgments": 1}


@FUZZ
@given(content=st.binary(max_size=300))
def test_random_bytes_give_only_format_errors(tmp_path, content):
    for name, reader in (("qrels.txt", read_qrels), ("r.run", read_run)):
        path = tmp_path / name
        path.write_bytes(content)
        try:
            reader(path)
        except TrecFormatError as error:
            assert str(path) in str(error) and len(str(error)) < 600


@FUZZ
@given(
    qrels=st.dictionaries(ID, st.dictionaries(ID, st.integers(-1, 4), min_size=1, max_size=5), min_size=1, max_size=5)
)
def test_random_qrels_round_trip(tmp_path, qrels):
    path = tmp_path / "qrels.txt"
    path.write_text("".join(f"{q} 0 {d} {r}\n" for q, docs in qrels.items() for d, r in docs.items()))
    assert read_qrels(path)[0] == qrels


@FUZZ
@given(
    queries=st.lists(ID, min_size=1, max_size=4, unique=True),
    docs=st.lists(ID, min_size=1, max_size=6, unique=True),
    seed=st.integers(0, 1000),
)
def test_random_runs_round_trip(tmp_path, queries, docs, seed):
    scores = torch.randn(len(queries), len(docs), generator=torch.Generator().manual_seed(seed)) * 1e3
    run = read_run(write_run(tmp_path / "r.run", scores, queries, docs, tag="x"))
    # nine significant digits: every float32 score reads back exactly
    as_float32 = {q: {d: float(np.float32(v)) for d, v in ranked.items()} for q, ranked in run.items()}
    assert as_float32 == {q: {d: float(scores[i, j]) for j, d in enumerate(docs)} for i, q in enumerate(queries)}
