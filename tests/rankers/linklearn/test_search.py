"""``python -m rankers.linklearn.search``: a trained model's run on a collection measures what the training
run reported for it (trec_eval MAP of the run file included), the cached index, and the refusals."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch

from datamodules.synthetic_text import write_synthetic_collection, write_synthetic_dump
from rankers.linklearn.search import (
    SearchInputError,
    build_index,
    file_digest,
    load_index,
    load_term_weight,
    main,
    read_documents,
    search,
)
from rankers.pipeline import train
from retrieval.trec import read_qrels, read_run

pytrec_eval = pytest.importorskip("pytrec_eval")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A LinkLearn model trained one epoch on a synthetic dump, with an ad-hoc collection it ranked."""
    from hydra.core.global_hydra import GlobalHydra

    from rankers.pipeline import compose_config

    folder = tmp_path_factory.mktemp("linklearn_search")
    dump = write_synthetic_dump(folder / "wiki.xml.bz2", n_articles=300, n_topics=30, seed=1)
    adhoc = write_synthetic_collection(folder / "adhoc", n_docs=200, n_topics=10, seed=2)
    overrides = ["model=linklearn", "data=wikipedia", f"data.path={dump}", f"data.adhoc_dir={adhoc}"]
    overrides += ["model.epochs=1", "callbacks.progress_bar.refresh_rate=0", "~logger"]
    cfg = compose_config(overrides, output_dir=folder / "run", data_dir=folder / "data")
    results = train(cfg)
    GlobalHydra.instance().clear()
    return folder / "run", adhoc, results


def test_the_run_measures_what_the_training_run_reported(trained, tmp_path):
    run_dir, adhoc, results = trained
    reported = results["adhoc"]["linklearn"]
    model = tmp_path / "export"
    shutil.copytree(run_dir / "export", model)
    found = search(
        model,
        adhoc / "docs.tsv",
        adhoc / "queries.tsv",
        output=tmp_path / "run.txt",
        qrels_path=adhoc / "qrels.txt",
        device=torch.device("cpu"),
    )
    for key in ("map", "p@10", "r_precision", "ndcg@10", "queries"):
        assert found["measures"][key] == reported[key], key  # the same floats
    # the run file, read by trec_eval, gives the same MAP (the run is the whole ranking: 200 documents)
    qrels, _ = read_qrels(adhoc / "qrels.txt")
    ours = read_run(tmp_path / "run.txt")
    assert ours.keys() == {line.split("\t")[0] for line in (adhoc / "queries.tsv").read_text().splitlines()}
    assert all(len(docs) == 200 for docs in ours.values())
    judged = {q: r for q, r in qrels.items() if any(v > 0 for v in r.values())}
    per_query = pytrec_eval.RelevanceEvaluator(judged, {"map", "ndcg_cut_10"}).evaluate(ours)
    trec_map = sum(m["map"] for m in per_query.values()) / len(per_query)
    assert trec_map == pytest.approx(reported["map"], abs=1e-6)

    # the same documents in the same order as the training run's own run file for this collection; there
    # tied scores (documents sharing no term with the query, relevant ones among them) stay tied, and
    # trec_eval, which orders ties by document id, measures another MAP than the training run reported
    def order(path):
        return [line.split()[:4] for line in path.read_text().splitlines()]

    assert order(tmp_path / "run.txt") == order(run_dir / "runs/linklearn.run")
    theirs = pytrec_eval.RelevanceEvaluator(judged, {"map"}).evaluate(read_run(run_dir / "runs/linklearn.run"))
    assert sum(m["map"] for m in theirs.values()) / len(theirs) != pytest.approx(reported["map"], abs=1e-6)


def test_the_index_is_cached_beside_the_model_by_content(trained, tmp_path):
    run_dir, adhoc, _ = trained
    model = tmp_path / "export"
    shutil.copytree(run_dir / "export", model)
    args = (model, adhoc / "docs.tsv", adhoc / "queries.tsv")
    first = search(*args, output=tmp_path / "a.txt", device=torch.device("cpu"))
    second = search(*args, output=tmp_path / "b.txt", device=torch.device("cpu"))
    assert not first["index_cached"] and second["index_cached"]
    assert (tmp_path / "a.txt").read_text() == (tmp_path / "b.txt").read_text()
    cached = list((model / "index").iterdir())
    assert [p.name for p in cached] == [f"{file_digest(adhoc / 'docs.tsv', model / 'term_weight.pt')[:24]}.npz"]
    # other content, another key: the stale index is not used
    changed = tmp_path / "docs.tsv"
    changed.write_text((adhoc / "docs.tsv").read_text().replace("\t", "\tzzz ", 1))
    third = search(model, changed, adhoc / "queries.tsv", output=None, device=torch.device("cpu"))
    assert not third["index_cached"] and len(list((model / "index").iterdir())) == 2
    # a damaged cache file is built again, not trusted
    cached[0].write_bytes(cached[0].read_bytes()[:100])
    again = search(*args, output=tmp_path / "c.txt", device=torch.device("cpu"))
    assert not again["index_cached"] and (tmp_path / "c.txt").read_text() == (tmp_path / "a.txt").read_text()
    # the cached index is the index built afresh
    fresh = build_index(read_documents(adhoc / "docs.tsv"), load_term_weight(model), torch.device("cpu"))
    assert torch.equal(load_index(cached[0]).postings.to_dense(), fresh.postings.to_dense())


def test_free_text_prints_the_top_ten_with_titles(trained, tmp_path, capsys):
    run_dir, adhoc, _ = trained
    first_doc = (adhoc / "docs.tsv").read_text().splitlines()[0]
    doc_id, text = first_doc.split("\t", 1)
    status = main(["--model", str(run_dir / "export"), "--collection", str(adhoc), "--query", text, "--device", "cpu"])
    lines = capsys.readouterr().out.splitlines()
    assert status == 0 and len(lines) == 10
    assert lines[0].split()[2] == doc_id  # a document is its own best match
    assert " ".join(text.split())[:30] in lines[0]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("no_model", r"no such model folder"),
        ("not_linklearn", r"meta.json:1: model is 'lambdarank', not linklearn"),
        ("empty_docs", r"docs.tsv: empty"),
        ("duplicate_query", r"queries.tsv:3: duplicate id 'q1' \(first on line 1\)"),
        ("no_tab", r"docs.tsv:2: expected 'id<TAB>text'"),
    ],
)
def test_bad_input_is_refused_with_file_and_line_exit_2(trained, tmp_path, capsys, case, message):
    run_dir, adhoc, _ = trained
    model, collection = tmp_path / "export", tmp_path / "collection"
    shutil.copytree(run_dir / "export", model)
    shutil.copytree(adhoc, collection)
    if case == "no_model":
        model = tmp_path / "nowhere"
    elif case == "not_linklearn":
        (model / "meta.json").write_text(json.dumps({"model": "lambdarank"}))
    elif case == "empty_docs":
        (collection / "docs.tsv").write_text("\n\n")
    elif case == "duplicate_query":
        (collection / "queries.tsv").write_text("q1\tone\nq2\ttwo\nq1\tthree\n")
    elif case == "no_tab":
        (collection / "docs.tsv").write_text("d1\tfine\nd2 no tab\n")
    status = main(["--model", str(model), "--collection", str(collection), "--output", str(tmp_path / "r.txt")])
    assert status == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "r.txt").exists()


def test_a_model_folder_without_the_weights_is_refused(tmp_path):
    (tmp_path / "meta.json").write_text("{}")
    with pytest.raises(SearchInputError, match=r"term_weight.pt: missing"):
        load_term_weight(tmp_path)


def test_plain_files_rank_as_the_folder_does(trained, tmp_path, capsys):
    run_dir, adhoc, results = trained
    for name in ("docs.tsv", "queries.tsv", "qrels.txt"):
        shutil.copy(adhoc / name, tmp_path / f"my_{name}")
    argv = ["--model", str(run_dir / "export"), "--docs", str(tmp_path / "my_docs.tsv")]
    argv += ["--queries", str(tmp_path / "my_queries.tsv"), "--qrels", str(tmp_path / "my_qrels.txt")]
    assert main([*argv, "--output", str(tmp_path / "run.txt"), "--depth", "5", "--no-cache", "--device", "cpu"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["measures"]["map"] == results["adhoc"]["linklearn"]["map"]  # the whole ranking, not the 5 kept
    assert all(len(docs) == 5 for docs in read_run(tmp_path / "run.txt").values())
    assert printed["index_cached"] is False  # --no-cache
