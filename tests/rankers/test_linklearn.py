"""LinkLearn: the distinct-value trick, sparse similarities, training, ad-hoc evaluation, export."""

from __future__ import annotations

import json

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from datamodules.adhoc import read_collection, write_synthetic_collection
from datamodules.text import corpus_from_texts
from datamodules.wikipedia import WikipediaDataModule, write_synthetic_dump
from rankers.linklearn import LinkLearnModule, TermWeight, entry_weights, gather_entries, pair_similarity
from rankers.pipeline import train


def naive_weight(model: TermWeight, tf, idf, length):
    """f evaluated once per (document, term) entry: what the distinct-value trick must equal."""
    per_entry = [
        mlp.layers(x.unsqueeze(-1)).squeeze(-1)
        for mlp, x in ((model.tf_mlp, torch.log1p(tf)), (model.idf_mlp, idf), (model.len_mlp, torch.log1p(length)))
    ]
    return per_entry[0] * per_entry[1] * per_entry[2]


def random_corpus(seed: int = 0, n_docs: int = 30):
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(25)]
    return corpus_from_texts(" ".join(rng.choice(words, rng.integers(1, 40))) for _ in range(n_docs))


def test_distinct_value_evaluation_equals_per_entry_evaluation():
    torch.manual_seed(0)
    model = TermWeight(hidden=5)
    corpus = random_corpus().tensors()
    docs = torch.tensor([3, 0, 7, 7, 29])
    owner, term, tf, length = gather_entries(corpus, docs)
    slow = naive_weight(model, tf, corpus["idf"][term], length)
    # the module's path: MLPs on the corpus's distinct values, gathered by code
    coded_owner, coded_term, coded = entry_weights(model, corpus, docs)
    assert torch.equal(coded_owner, owner) and torch.equal(coded_term, term)
    # the exported path: MLPs on the distinct values of the given entries
    for fast in (coded, model(tf, corpus["idf"][term], length)):
        torch.testing.assert_close(fast, slow)
        grads_fast = torch.autograd.grad(fast.square().sum(), list(model.parameters()))
        grads_slow = torch.autograd.grad(slow.square().sum(), list(model.parameters()), retain_graph=True)
        for a, b in zip(grads_fast, grads_slow, strict=True):
            torch.testing.assert_close(a, b)


def test_pair_similarity_is_the_dot_product_of_weight_vectors():
    torch.manual_seed(1)
    corpus_np = random_corpus(seed=2)
    corpus = corpus_np.tensors()
    model = TermWeight(hidden=4)
    vocabulary = len(corpus_np.vocabulary)
    dense = torch.zeros(30, vocabulary)
    owner, term, tf, length = gather_entries(corpus, torch.arange(30))
    dense[owner, term] = model(tf, corpus["idf"][term], length)
    a, b = torch.randint(0, 30, (40,)), torch.randint(0, 30, (40,))
    sides = []
    for docs in (a, b):
        owner, term, tf, length = gather_entries(corpus, docs)
        sides.append((owner, term, model(tf, corpus["idf"][term], length)))
    ours = pair_similarity(sides[0], sides[1], 40, vocabulary)
    torch.testing.assert_close(ours, (dense[a] * dense[b]).sum(1))


@pytest.fixture(scope="module")
def wiki(tmp_path_factory):
    folder = tmp_path_factory.mktemp("linklearn")
    dump = write_synthetic_dump(folder / "wiki.xml.bz2", n_articles=500, n_topics=40, seed=1)
    adhoc = write_synthetic_collection(folder / "adhoc", n_docs=200, n_topics=10, seed=2)
    return dump, adhoc


def test_training_from_the_config_learns_and_evaluates_both_models(make_cfg, tmp_path, wiki):
    dump, adhoc = wiki
    cfg = make_cfg(
        "model=linklearn",
        "data=wikipedia",
        f"data.path={dump}",
        f"data.adhoc_dir={adhoc}",
        "model.epochs=4",
        "trainer.log_every_n_steps=1",
        "callbacks.progress_bar.refresh_rate=0",
        out=tmp_path / "run",
        tiny=False,
    )
    results = train(cfg)
    out = tmp_path / "run"
    assert json.loads((out / "results.json").read_text())["adhoc"]["bm25"]["k1"] == 1.2

    # training keeps (or improves) the validation AP of its tf-idf start; BM25 is logged beside it
    assert results["val"]["map"] >= _untrained_val_map(dump, cfg, "tfidf") - 0.01
    assert 0 < results["val"]["map_bm25"] <= 1

    adhoc_results = results["adhoc"]
    for name in ("linklearn", "bm25"):
        assert set(adhoc_results[name]) >= {"map", "p@10", "r_precision", "ndcg@10"}
        assert (out / "runs" / f"{name}.run").read_text().count("\n") == 20 * 200  # 20 queries x all 200 documents
    # on a collection with words it never saw, the learned weighting ranks about as well as BM25
    assert adhoc_results["linklearn"]["map"] > adhoc_results["bm25"]["map"] - 0.05

    tags = set()
    for events in (out / "tensorboard").glob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        tags |= set(accumulator.Tags()["scalars"])
    assert {"train/loss_step", "val/map", "val/map_bm25"} <= tags


def _untrained_val_map(dump, cfg, init: str) -> float:
    datamodule = WikipediaDataModule(str(dump), cache_dir=cfg.data.cache_dir)
    trainer = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    torch.manual_seed(0)
    return trainer.validate(LinkLearnModule(init=init), datamodule=datamodule, verbose=False)[0]["val/map"]


def test_sgd_learns_the_weighting_from_links(make_cfg, tmp_path, wiki):
    # from constant factors (a count of shared terms), the hinge on linked triples must find rarity
    dump, _ = wiki
    overrides = ["model=linklearn", "data=wikipedia", f"data.path={dump}", "model.init=ones"]
    overrides += ["model.optimizer.lr=0.05", "model.epochs=4", "callbacks.progress_bar.refresh_rate=0"]
    cfg = make_cfg(*overrides, "export=false", out=tmp_path / "run", tiny=False)
    results = train(cfg)
    before = _untrained_val_map(dump, cfg, "ones")
    assert results["val"]["map"] > before + 0.05, (before, results["val"])


def test_tfidf_start_fits_its_target_shapes():
    weight = TermWeight(hidden=8, init="tfidf")
    tf = torch.tensor([1.0, 3.0, 10.0, 100.0])
    idf = torch.tensor([0.5, 2.0, 8.0, 12.0])
    length = torch.tensor([0.1, 1.0, 3.0, 10.0])
    with torch.no_grad():
        torch.testing.assert_close(weight.tf_mlp(torch.log1p(tf)), torch.log1p(tf), atol=0.1, rtol=0.05)
        torch.testing.assert_close(weight.idf_mlp(idf), idf, atol=0.1, rtol=0.05)
        expected = (0.25 + 0.75 * length).rsqrt()
        torch.testing.assert_close(weight.len_mlp(torch.log1p(length)), expected, atol=0.1, rtol=0.05)


def test_exported_term_weight_scores_a_collection_like_the_module(tmp_path, wiki):
    _, adhoc = wiki
    torch.manual_seed(3)
    model = LinkLearnModule(hidden=6)
    collection = read_collection(adhoc)
    expected = model.score_collection(collection.documents, collection.queries)
    exported = model.export_model(tmp_path)
    term_weight = torch.jit.load(exported["term_weight"])
    # the recipe of meta.json, with nothing from the framework but the term statistics
    docs, queries = collection.documents.tensors(), collection.queries.tensors()
    dense = []
    for corpus in (docs, queries):
        n = len(corpus["offsets"]) - 1
        owner = torch.repeat_interleave(torch.arange(n), corpus["offsets"].diff())
        matrix = torch.zeros(n, len(collection.documents.vocabulary))
        lengths = corpus["lengths"][owner]
        matrix[owner, corpus["term_ids"]] = term_weight(corpus["tfs"], docs["idf"][corpus["term_ids"]], lengths)
        dense.append(matrix)
    torch.testing.assert_close(dense[1] @ dense[0].T, expected, rtol=1e-5, atol=1e-5)
