"""LinkLearn: the distinct-value trick, sparse similarities, the start-keeping rule, ad-hoc results, export."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from datamodules.adhoc import read_collection
from datamodules.synthetic_text import write_synthetic_collection, write_synthetic_dump, write_synthetic_linked_folder
from datamodules.wikipedia import WikipediaDataModule, limit_training_links
from rankers.linklearn.module import LinkLearnModule, TermWeight, entry_weights, pair_similarity, weight_matrix
from rankers.pipeline import train
from retrieval import bm25_scores, evaluate
from retrieval.sparse import entry_index
from retrieval.terms import corpus_from_texts


def random_corpus(seed: int = 0, n_docs: int = 30):
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(25)]
    return corpus_from_texts(" ".join(rng.choice(words, rng.integers(1, 40))) for _ in range(n_docs))


def trained_term_weight(seed: int, start: str = "bm25") -> TermWeight:
    torch.manual_seed(seed)
    model = TermWeight(hidden=5, start=start)
    with torch.no_grad():  # a model away from its start: every factor matters
        for parameter in model.parameters():
            parameter.normal_(0, 0.3)
    return model


def per_entry(model: TermWeight, corpus: dict, docs: torch.Tensor):
    owner, index = entry_index(corpus["offsets"], docs)
    term = corpus["term_ids"][index]
    return owner, term, model(corpus["tfs"][index], corpus["idf"][term], corpus["lengths"][docs][owner])


@pytest.mark.parametrize("start", ["bm25", "tfidf", "ones"])
def test_distinct_value_evaluation_equals_per_entry_evaluation(start):
    model = trained_term_weight(0, start)
    corpus = random_corpus().tensors()
    docs = torch.tensor([3, 0, 7, 7, 29])
    owner, term, slow = per_entry(model, corpus, docs)
    coded_owner, coded_term, fast, _ = entry_weights(model, corpus, docs)
    assert torch.equal(coded_owner, owner) and torch.equal(coded_term, term)
    torch.testing.assert_close(fast, slow)
    grads_fast = torch.autograd.grad(fast.square().sum(), list(model.parameters()))
    grads_slow = torch.autograd.grad(slow.square().sum(), list(model.parameters()))
    for a, b in zip(grads_fast, grads_slow, strict=True):
        torch.testing.assert_close(a, b)


def test_untrained_weight_is_the_start_and_bm25_start_is_bm25_saturation():
    model = TermWeight(hidden=4, start="bm25", k1=1.2, b=0.75, idf_power=0.75)
    tf, idf, length = torch.tensor([1.0, 3.0, 10.0]), torch.tensor([0.5, 2.0, 8.0]), torch.tensor([0.5, 1.0, 3.0])
    expected = idf**0.75 * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length))
    torch.testing.assert_close(model(tf, idf, length), expected)


def test_pair_similarity_is_the_dot_product_of_weight_vectors():
    corpus_np = random_corpus(seed=2)
    corpus, vocabulary = corpus_np.tensors(), len(corpus_np.vocabulary)
    model = trained_term_weight(1)
    dense = torch.zeros(30, vocabulary)
    owner, term, weight = per_entry(model, corpus, torch.arange(30))
    dense[owner, term] = weight
    a, b = torch.randint(0, 30, (40,)), torch.randint(0, 30, (40,))
    ours = pair_similarity(per_entry(model, corpus, a), per_entry(model, corpus, b), 40, vocabulary)
    torch.testing.assert_close(ours, (dense[a] * dense[b]).sum(1))


@pytest.fixture(scope="module")
def wiki(tmp_path_factory):
    folder = tmp_path_factory.mktemp("linklearn")
    dump = write_synthetic_dump(folder / "wiki.xml.bz2", n_articles=300, n_topics=30, seed=1)
    adhoc = write_synthetic_collection(folder / "adhoc", n_docs=200, n_topics=10, seed=2)
    return dump, adhoc


def run(make_cfg, tmp_path, wiki, *overrides):
    dump, adhoc = wiki
    cfg = make_cfg(
        "model=linklearn",
        "data=wikipedia",
        f"data.path={dump}",
        f"data.adhoc_dir={adhoc}",
        "trainer.log_every_n_steps=1",
        "callbacks.progress_bar.refresh_rate=0",
        *overrides,
        out=tmp_path / "run",
        tiny=False,
    )
    return train(cfg), tmp_path / "run"


def test_training_reports_start_trained_and_bm25_in_results_and_tensorboard(make_cfg, tmp_path, wiki):
    results, out = run(make_cfg, tmp_path, wiki, "model.epochs=2")
    saved = json.loads((out / "results.json").read_text())
    assert saved["adhoc"]["bm25"]["k1"] == 1.2 and saved["epochs"] == 3  # epoch 0 (the start) + 2
    for name in ("linklearn", "start", "bm25"):
        assert set(saved["adhoc"][name]) >= {"map", "p@10", "r_precision", "ndcg@10", "run"}
        assert (out / "runs" / f"{name}.run").read_text().count("\n") == 20 * 200
    val = results["val"]
    assert {"map", "map_start", "map_bm25", "map_document", "map_title", "map_lead"} <= set(val)
    assert val["map"] >= val["map_start"]  # the kept epoch is never worse than the start on validation
    tags = set()
    for events in (out / "tensorboard").glob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        tags |= set(accumulator.Tags()["scalars"])
    assert {"train/loss_step", "val/map", "val/map_start", "val/map_bm25"} <= tags


def test_the_start_is_kept_when_no_epoch_beats_it(make_cfg, tmp_path, wiki):
    # a huge learning rate with no pull to the start wrecks f: every trained epoch validates worse
    results, _ = run(
        make_cfg,
        tmp_path,
        wiki,
        "model.epochs=2",
        "model.optimizer.lr=50",
        "model.regularization=0",
        "callbacks.early_stopping.patience=10",
    )
    assert results["best_checkpoint"].endswith("epoch_000.ckpt")
    assert results["val"]["map"] == pytest.approx(results["val"]["map_start"])
    adhoc = results["adhoc"]
    assert adhoc["linklearn"]["map"] == pytest.approx(adhoc["start"]["map"])
    state = torch.load(results["best_checkpoint"], weights_only=True)["state_dict"]
    last_layers = [value for key, value in state.items() if key.endswith("layers.2.weight")]
    assert all(torch.count_nonzero(value) == 0 for value in last_layers)  # exactly the start


def test_epochs_zero_is_the_start(make_cfg, tmp_path, wiki):
    results, _ = run(make_cfg, tmp_path, wiki, "model.epochs=0", "export=false")
    assert results["adhoc"]["linklearn"]["map"] == results["adhoc"]["start"]["map"]


def test_exported_term_weight_scores_a_collection_like_the_module(tmp_path, wiki):
    _, adhoc = wiki
    model = LinkLearnModule(hidden=5)
    model.term_weight.load_state_dict(trained_term_weight(3).state_dict())
    collection = read_collection(adhoc)
    expected = model.score_collection(collection.documents, collection.queries)
    term_weight = torch.jit.load(model.export_model(tmp_path)["term_weight"])
    # the recipe of meta.json, with nothing from the framework but the term statistics
    idf = collection.documents.idf()
    dense = []
    for corpus in (collection.documents.tensors(), collection.queries.tensors(idf=idf)):
        n = len(corpus["offsets"]) - 1
        owner = torch.repeat_interleave(torch.arange(n), corpus["offsets"].diff())
        matrix = torch.zeros(n, len(idf))
        matrix[owner, corpus["term_ids"]] = term_weight(
            corpus["tfs"], corpus["idf"][corpus["term_ids"]], corpus["lengths"][owner]
        )
        dense.append(matrix)
    torch.testing.assert_close(dense[1] @ dense[0].T, expected, rtol=1e-4, atol=1e-4)


class TinyTask:
    """The parts of a ``LinkTask`` ``example_loss`` reads: term features (the graph is not used)."""

    def __init__(self, features):
        self.features = features
        self.offsets, self.neighbours = torch.zeros(41, dtype=torch.long), torch.zeros(0, dtype=torch.long)


def test_example_loss_leaves_out_unwinnable_examples_and_is_relative_to_the_start():
    # reference: dense weight vectors, one example at a time (eq. 7 averaged over the usable examples)
    corpus_np = random_corpus(seed=4, n_docs=40)
    features = corpus_np.features()
    model = LinkLearnModule(task=TinyTask(features), hidden=5, margin=0.7, regularization=0.3)
    model.term_weight.load_state_dict(trained_term_weight(5).state_dict())
    corpus = features.tensors()
    vocabulary = len(corpus_np.vocabulary)
    dense, start = torch.zeros(40, vocabulary), torch.zeros(40, vocabulary)
    owner, term, weight = per_entry(model.term_weight, corpus, torch.arange(40))
    dense[owner, term] = weight
    base = model.term_weight.start(corpus["tfs"], corpus["idf"][term], corpus["lengths"][owner])
    start[owner, term] = base
    generator = torch.Generator().manual_seed(0)
    examples = torch.randint(0, 40, (24, 6), generator=generator)
    disjoint = [(i, j) for i in range(40) for j in range(40) if (start[i] * start[j]).sum() == 0]
    examples[0, 0], examples[0, 2] = disjoint[0]  # an l+ sharing no term with its query
    loss, parts = model.example_loss(examples)
    hinges, kept = [], 0
    for query, _, positive, *negatives in examples.tolist():
        start_sims = [float(start[query] @ start[c]) for c in (positive, *negatives)]
        if start_sims[0] == 0:
            continue
        kept += 1
        scale = max(start_sims)
        for negative in negatives:
            gap = (dense[query] @ dense[positive] - dense[query] @ dense[negative]) / scale
            hinges.append(torch.relu(0.7 - gap))
    penalty = sum(c.square().mean() for c in model.term_weight.log_corrections(corpus))
    assert 0 < kept < len(examples)
    assert parts["usable"].item() == pytest.approx(kept / len(examples))
    torch.testing.assert_close(loss, torch.stack(hinges).mean() + 0.3 * penalty)


def test_cloze_validation_ranks_each_article_without_its_lead_for_its_lead(make_cfg, tmp_path, wiki):
    results, _ = run(make_cfg, tmp_path, wiki, "model.epochs=1", "export=false", "model.validation=[lead,cloze]")
    val = results["val"]
    assert {"map_lead", "map_cloze"} <= set(val) and "map_document" not in val
    assert val["map"] == pytest.approx((val["map_lead"] + val["map_cloze"]) / 2)
    # the kind itself against a loop: AP of a known item is 1 / its rank among the validation articles
    datamodule = WikipediaDataModule(str(wiki[0]))
    model = LinkLearnModule(**datamodule.model_inputs(), hidden=5)
    model.term_weight.load_state_dict(trained_term_weight(6).state_dict())
    task, queries = model.task, model.task.val_queries[:20]
    scores = model._validation_scores(queries, 3, model="linklearn")
    val_docs = task.val_docs.tolist()
    ap = model._average_precision(scores, queries, 3)
    ranks = [int((row > row[val_docs.index(q)]).sum()) + 1 for q, row in zip(queries.tolist(), scores)]
    ties = [int((row == row[val_docs.index(q)]).sum()) for q, row in zip(queries.tolist(), scores)]
    for value, rank, tie in zip(ap.tolist(), ranks, ties):
        assert 1 / (rank + tie - 1) - 1e-6 <= value <= 1 / rank + 1e-6
    # the documents are the validation articles without their lead: the lead's terms are gone
    start = weight_matrix(model.term_weight, model._attach(), task.rest_rows(task.val_docs[:5]), model.vocabulary_size)
    full = weight_matrix(model.term_weight, model._attach(), task.val_docs[:5], model.vocabulary_size)
    assert start.to_dense().count_nonzero() <= full.to_dense().count_nonzero()


@pytest.mark.parametrize("kind", ["title", "lead", "document"])
def test_validation_bm25_is_rank_bm25_over_the_dump(wiki, kind):
    # val/map_bm25's scores: Okapi BM25 with the dump's statistics, as rank_bm25's BM25Okapi computes them
    rank_bm25 = pytest.importorskip("rank_bm25")
    datamodule = WikipediaDataModule(str(wiki[0]))
    model = LinkLearnModule(**datamodule.model_inputs(), hidden=5)
    task, corpus = model.task, model._attach()
    offsets, terms, tfs = (corpus[name].tolist() for name in ("offsets", "term_ids", "tfs"))

    def tokens(row: int) -> list[int]:
        return [
            t
            for t, tf in zip(terms[offsets[row] : offsets[row + 1]], tfs[offsets[row] : offsets[row + 1]])
            for _ in range(int(tf))
        ]

    reference = rank_bm25.BM25Okapi([tokens(d) for d in range(task.n_docs)], k1=1.2, b=0.75, epsilon=0.25)
    queries = task.val_queries[:15]
    code = {"document": 0, "title": 1, "lead": 2}[kind]
    scores = model._validation_scores(queries, code, model="bm25")
    val_docs = task.val_docs.tolist()
    for q, row in zip(queries.tolist(), scores, strict=True):
        expected = reference.get_scores(tokens(code * task.n_docs + q))[val_docs]
        np.testing.assert_allclose(row.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_validation_pass_builds_each_document_index_once_and_scores_as_without(wiki):
    datamodule = WikipediaDataModule(str(wiki[0]))
    model = LinkLearnModule(**datamodule.model_inputs(), hidden=5)
    model.term_weight.load_state_dict(trained_term_weight(7).state_dict())
    chunks = model.task.val_queries[:40].split(16)
    pairs = [(model_name, kind) for model_name in ("linklearn", "start", "bm25") for kind in (0, 1, 2, 3)]
    alone = {pair: [model._validation_scores(c, pair[1], model=pair[0]) for c in chunks] for pair in pairs}
    model.on_validation_epoch_start()
    within = {pair: [model._validation_scores(c, pair[1], model=pair[0]) for c in chunks] for pair in pairs}
    # one index per (model, articles with or without their lead), whatever the number of query batches
    assert len(model._validation_index) == 6
    for pair in pairs:
        for a, b in zip(alone[pair], within[pair], strict=True):
            torch.testing.assert_close(a, b)


def test_linked_corpus_folder_and_dump_train_one_model_and_several_collections_are_reported_by_name(
    make_cfg, tmp_path, wiki
):
    dump, adhoc = wiki
    folder = write_synthetic_linked_folder(tmp_path / "corpus", n_articles=200, n_topics=20, seed=3)
    second = write_synthetic_collection(tmp_path / "other", n_docs=150, n_topics=10, seed=4)
    cfg = make_cfg(
        "model=linklearn",
        "data=linked_corpus",
        f"data.path=[{folder},{dump}]",
        f"data.adhoc_dir=[{adhoc},{second}]",
        "model.epochs=1",
        "callbacks.progress_bar.refresh_rate=0",
        "export=false",
        out=tmp_path / "run",
        tiny=False,
    )
    results = train(cfg)
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert set(saved["adhoc"]) == {"adhoc", "other"}
    for name, n_docs in (("adhoc", 200), ("other", 150)):
        entry = saved["adhoc"][name]
        assert set(entry) == {"statistics", "linklearn", "start", "bm25"}
        for model in ("linklearn", "start", "bm25"):
            assert {"map", "p@10", "r_precision", "ndcg@10"} <= set(entry[model])
            assert (tmp_path / "run" / "runs" / name / f"{model}.run").read_text().count("\n") == 20 * n_docs
        # the numbers are those of evaluating the collection alone, with the kept model
        collection = read_collection(adhoc if name == "adhoc" else second)
        assert entry["bm25"]["map"] == pytest.approx(
            evaluate(bm25_scores(collection.documents, collection.queries), collection.labels)["map"]
        )
    stats = results["data"]["dumps"] if "data" in results else None
    assert stats is None or len(stats) == 2


def test_limit_training_links_keeps_a_sample_of_training_links_and_every_validation_link(wiki):
    datamodule = WikipediaDataModule(str(wiki[0]))
    datamodule.setup()
    task = datamodule.task
    limited = limit_training_links(task, 50, seed=1)
    is_val = torch.zeros(task.n_docs, dtype=torch.bool)
    is_val[task.val_docs] = True

    def edges(t):
        sources = torch.repeat_interleave(torch.arange(t.n_docs), t.offsets.diff())
        return {(a, b) for a, b in zip(sources.tolist(), t.neighbours.tolist()) if a < b}

    before, after = edges(task), edges(limited)
    assert after <= before
    assert {e for e in after if not is_val[e[0]]} <= {e for e in before if not is_val[e[0]]}
    assert len([e for e in after if not is_val[e[0]]]) == 50
    assert {e for e in after if is_val[e[0]]} == {e for e in before if is_val[e[0]]}


def test_degree_negatives_follow_the_degree_and_are_never_linked(wiki):
    datamodule = WikipediaDataModule(str(wiki[0]), negative_sampling="degree", negatives=8)
    datamodule.setup()
    examples = datamodule.train_dataloader()
    counts = torch.zeros(datamodule.task.n_docs)
    for _ in range(30):
        for batch in examples:
            anchors, negatives = batch[:, 1], batch[:, 3:]
            assert not examples.linked(anchors.unsqueeze(1).expand_as(negatives), negatives).any()
            assert not (negatives == anchors.unsqueeze(1)).any()
            counts += torch.bincount(negatives.flatten(), minlength=len(counts)).float()
    degree = datamodule.task.offsets.diff().float()
    train = datamodule.task.train_docs
    # drawn in proportion to the degree (up to the rejection of d and its links): strongly correlated
    correlation = torch.corrcoef(torch.stack([counts[train], degree[train]]))[0, 1]
    assert correlation > 0.8
    assert counts[train][degree[train] == 0].sum() == 0  # an article without links is never drawn
