"""Ad-hoc collections: reading, counted skips, clear errors (file, line, problem), fuzzed reader."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datamodules.adhoc import CollectionFormatError, read_collection

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


def test_collection_is_read_with_qrels_as_labels_and_skips_counted(tmp_path):
    collection = read_collection(write_collection(tmp_path / "c"))
    assert collection.doc_ids == [d for d, _ in DOCS] and collection.query_ids == ["q1", "q2", "q3"]
    assert collection.labels[0].tolist() == [1, 0, 0, 0, 0, 1]
    assert collection.labels[1].tolist() == [0, 1, 2, 0, 0, 0]
    stats = collection.statistics
    assert stats["relevant_docs_missing"] == 1 and stats["judgments_docs_missing"] == 1
    assert stats["judgments_unknown_query"] == 1  # q9: counted, not silently dropped
    assert stats["queries_without_relevant"] == 1
    assert collection.queries.term_ids.max() < len(collection.documents.vocabulary)


def test_utf8_bom_does_not_rename_the_first_document(tmp_path):
    folder = write_collection(tmp_path / "c")
    (folder / "docs.tsv").write_bytes(b"\xef\xbb\xbf" + (folder / "docs.tsv").read_bytes())
    (folder / "queries.tsv").write_bytes(b"\xef\xbb\xbf" + (folder / "queries.tsv").read_bytes())
    collection = read_collection(folder)
    assert collection.doc_ids[0] == "d1" and collection.query_ids[0] == "q1"
    assert collection.labels[0, 0] == 1 and collection.statistics["relevant_docs_missing"] == 1


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("docs.tsv", b"d1\tok\nbroken line\n", r"docs.tsv:2: expected 'id<TAB>text'"),
        ("docs.tsv", b"d1\ta\nd1\tb\n", r"docs.tsv:2: duplicate id 'd1' \(first on line 1\)"),
        ("docs.tsv", b"d1\tok\nd2\tcaf\xe9\n", r"docs.tsv:2: byte 0xe9 at column 7 is not UTF-8"),
        (
            "queries.tsv",
            b"\x89PNG\r\n\x1a\n\x00\x00" * 50_000,
            r"queries.tsv:1: .*not UTF-8|queries.tsv:\d+: a NUL byte",
        ),
        ("qrels.txt", b"q1 0 d1 1\nq1 d1 1\n", r"qrels.txt:2: expected 'qid 0 docid rel'"),
        ("qrels.txt", b"q1 0 d1 yes\n", r"qrels.txt:1: relevance 'yes' is not an integer"),
        ("qrels.txt", b"q1 0 d1 1\nq1 0 d1 0\n", r"qrels.txt:2: \(q1, d1\) judged 0 here and 1 on line 1"),
        ("qrels.txt", b"q1 0 d1 1\nq1 0 d\xff 1\n", r"qrels.txt:2: byte 0xff"),
        ("qrels.txt", b"q9 0 d1 1\nq1 0 nowhere 1\n", r"none of the 3 queries of queries.tsv has a relevant document"),
        ("queries.tsv", b"\n\n", r"queries.tsv: empty"),
    ],
    ids=[
        "no-tab",
        "duplicate",
        "docs-utf8",
        "binary",
        "fields",
        "relevance",
        "conflict",
        "qrels-utf8",
        "no-relevant",
        "empty",
    ],
)
def test_bad_collection_files_name_file_line_and_problem(tmp_path, name, content, message):
    folder = write_collection(tmp_path / "c")
    (folder / name).write_bytes(content)
    with pytest.raises(CollectionFormatError, match=message) as error:
        read_collection(folder)
    assert len(str(error.value)) < 700  # a binary file does not make a megabyte-long message


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["docs.tsv", "queries.tsv", "qrels.txt"]), content=st.binary(max_size=200))
def test_random_bytes_give_only_collection_errors(tmp_path, name, content):
    folder = write_collection(tmp_path / "c")
    (folder / name).write_bytes(content)
    try:
        read_collection(folder)
    except CollectionFormatError as error:
        assert name in str(error) or "queries.tsv" in str(error)


WORD = st.text(alphabet="abcdéfgh ", min_size=1, max_size=20)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    docs=st.lists(WORD, min_size=1, max_size=6), queries=st.lists(WORD, min_size=1, max_size=3), seed=st.integers(0, 99)
)
def test_random_valid_collections_round_trip(tmp_path, docs, queries, seed):
    doc_ids, query_ids = [f"d{i}" for i in range(len(docs))], [f"q{i}" for i in range(len(queries))]
    qrels = [f"q{q} 0 d{(q + seed) % len(docs)} {1 + seed % 3}" for q in range(len(queries))]
    folder = write_collection(tmp_path / "c", list(zip(doc_ids, docs)), list(zip(query_ids, queries)), qrels)
    collection = read_collection(folder)
    assert collection.doc_ids == doc_ids and collection.query_ids == query_ids
    for q in range(len(queries)):
        assert collection.labels[q].tolist() == [
            1 + seed % 3 if d == (q + seed) % len(docs) else 0 for d in range(len(docs))
        ]
    assert collection.documents.lengths.sum() == sum(len(t.split()) for t in docs)
