"""LinkLearn (Grangier & Bengio, NIPS'05 LTR workshop): the LightningModule that trains, validates and exports it.

    python train.py model=linklearn data=linked_corpus data.path=../shared/data/wikispeedia 'data.adhoc_dir=[a,b]'

The math (``TermWeight`` ``f = start * MLP1(tf) * MLP2(idf) * MLP3(len)``, ``pair_similarity``, the
relative hinge of eq. 7 and ``link_loss``, ``collection_scores``) lives in ``rankers.linklearn.model``.
This module feeds it batches of link examples ``(query row, d, l+, l-...)``, validates on the paper's
linked-documents retrieval task (each validation article, its title or its lead a query, its links
relevant; ``val/map``, with ``val/map_start`` and ``val/map_bm25`` beside it), ranks the ad-hoc
collections with the trained model, its untrained start and BM25, and exports ``f`` (TorchScript).

Epoch 0 trains nothing: it validates the start, so the checkpoint callback keeps the start unless a
trained epoch beats it on validation (the safety net).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric

from metrics.functional import average_precision
from rankers.linklearn.model import (
    STARTS,
    Correction,
    TermWeight,
    collection_scores,
    entry_weights,
    link_loss,
    pair_similarity,
    weight_matrix,
)
from rankers.neural.module import PassLimit
from rankers.outputs import save_torchscript
from retrieval.bm25 import bm25_scores, bm25_term_weight
from retrieval.evaluation import evaluate_runs
from retrieval.sparse import csr_contains, entry_index, inverted_index, rank, sparse_rows
from retrieval.terms import TOKENIZER, Corpus

# validation queries: the article, its title or its lead sentence with its links relevant (the paper's
# task); "cloze": its lead sentence with the article itself relevant, every article without its lead
VALIDATION_KINDS = {"document": 0, "title": 1, "lead": 2, "cloze": 3}


class LinkLearnModule(PassLimit, pl.LightningModule):
    """Trains ``TermWeight`` on ``[B, 3 + K]`` examples ``(query row, d, l+, l-...)``; validates on the
    linked-documents retrieval task; ranks ad-hoc collections with itself, its start and BM25.

    Args:
        task: ``datamodules.wikipedia.LinkTask`` (term features, links, split), from ``model_inputs()``.
        collections: ``{name: datamodules.adhoc.Collection}`` to rank after training (may be empty).
        collection: one collection (the older argument; the same as ``collections={"": collection}``).
        bm25: ``{"k1": .., "b": ..}`` of the BM25 baseline (validation and collection).
        hidden: hidden units of each MLP; start, k1, b, idf_power: the start (``TermWeight``).
        margin: hinge margin relative to the start's sim(q, l+); regularization: weight of the
            penalty pulling each ``log MLP_k`` to 0; epochs: training passes after the start's epoch 0.
        validation: the query kinds ``val/map`` averages (``VALIDATION_KINDS``); each is logged.
    """

    def __init__(
        self,
        *,
        task: Any = None,
        collections: dict[str, Any] | None = None,
        collection: Any = None,
        bm25: dict[str, float] | None = None,
        hidden: int = 8,
        start: str = "bm25",
        k1: float = 1.2,
        b: float = 0.75,
        idf_power: float = 0.75,
        margin: float = 0.5,
        regularization: float = 0.1,
        optimizer: Any = None,
        monitor: str = "val/map",
        epochs: int = 2,
        validation: tuple[str, ...] | list[str] = ("document", "title", "lead"),
    ) -> None:
        super().__init__()
        # plain floats: a Hydra DictConfig in the hyperparameters cannot be unpickled with weights_only
        bm25 = {"k1": float((bm25 or {}).get("k1", 1.2)), "b": float((bm25 or {}).get("b", 0.75))}
        unknown = set(validation) - set(VALIDATION_KINDS)
        if unknown or not validation:
            raise ValueError(f"model.validation: {sorted(unknown) or 'empty'}; choose among {sorted(VALIDATION_KINDS)}")
        validation = [str(kind) for kind in validation]
        self.save_hyperparameters(ignore=["optimizer", "task", "collection", "collections"])
        self.term_weight = TermWeight(hidden, start=start, k1=k1, b=b, idf_power=idf_power)
        self.margin, self.regularization, self.monitor = margin, regularization, monitor
        self.optimizer_factory = optimizer
        self.task = task
        self.collections = dict(collections or {})
        if collection is not None:
            self.collections[""] = collection
        self.bm25 = bm25
        self.validation_kinds = {name: VALIDATION_KINDS[name] for name in validation}
        self.val_maps = nn.ModuleList([MeanMetric() for _ in self.validation_kinds])
        self.corpus: dict[str, Tensor] | None = None
        self.baselines: dict[str, float] | None = None  # val MAP of the start and of BM25, computed once
        # the validation articles' indexes within one validation pass (_document_index); None: outside one
        self._validation_index: dict[tuple[str, bool], Tensor] | None = None

    # -- data on the device ---------------------------------------------------------------------
    def _attach(self) -> dict[str, Tensor]:
        if self.task is None:
            raise RuntimeError("LinkLearnModule needs task= (datamodule.model_inputs()) to train or validate")
        if self.corpus is None or self.corpus["offsets"].device != self.device:
            self.corpus = self.task.features.tensors(self.device)
            self.graph = (self.task.offsets.to(self.device), self.task.neighbours.to(self.device))
        return self.corpus

    @property
    def vocabulary_size(self) -> int:
        return len(self.task.features.idf)

    def on_fit_start(self) -> None:
        self.check_passes(self.hparams.epochs + 1)

    def on_train_epoch_end(self) -> None:
        self.stop_after(self.hparams.epochs + 1)

    # -- training -------------------------------------------------------------------------------
    def weighted_entries(self, rows: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(owner, term, f, start)`` of the training rows ``rows [P]`` (distinct-value evaluation)."""
        return entry_weights(self.term_weight, self._attach(), rows)

    def training_step(self, examples: Tensor, batch_idx: int) -> Tensor | None:
        if self.current_epoch == 0:
            return None  # epoch 0 validates the untrained start (see the module docstring)
        loss, parts = self.example_loss(examples)
        n = len(examples)
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=n)
        for name, value in parts.items():
            self.log(f"train/{name}", value, on_epoch=True, batch_size=n)
        return loss

    def example_loss(self, examples: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """Mean hinge over (example, negative) plus the penalty, for ``[B, 3 + K]`` examples (``link_loss``)."""
        return link_loss(
            self.term_weight,
            self._attach(),
            examples.to(self.device),
            self.vocabulary_size,
            margin=self.margin,
            regularization=self.regularization,
        )

    # -- validation: each validation article (or its title, or its lead) is a query, its links relevant
    def _validation_scores(self, queries: Tensor, kind: int, *, model: str) -> Tensor:
        n = self.task.n_docs
        val_docs = self.task.val_docs.to(self.device)
        cloze = kind == VALIDATION_KINDS["cloze"]
        doc_rows = self.task.rest_rows(val_docs) if cloze else val_docs
        query_rows = (VALIDATION_KINDS["lead"] if cloze else kind) * n + queries
        query_matrix = self._validation_matrix(query_rows, model=model, query=True)
        return rank(self._document_index(doc_rows, model=model, cloze=cloze), query_matrix)

    def _validation_matrix(self, rows: Tensor, *, model: str, query: bool) -> Tensor:
        """Sparse ``[len(rows), V]`` weights of feature rows under ``model`` (linklearn, start, bm25)."""
        if model == "bm25":
            return self._bm25_matrix(rows, query=query)
        corpus, corrected = self._attach(), model == "linklearn"
        return weight_matrix(self.term_weight, corpus, rows, self.vocabulary_size, corrected=corrected)

    def _document_index(self, doc_rows: Tensor, *, model: str, cloze: bool) -> Tensor:
        """The validation articles' inverted index under ``model``. Within a validation pass it is
        built once per (model, document kind), not once per batch of queries: the weights do not
        change within a pass. Outside one (direct calls) it is built every time."""
        key = (model, cloze)
        cache = self._validation_index
        if cache is not None and key in cache:
            return cache[key]
        index = inverted_index(self._validation_matrix(doc_rows, model=model, query=False))
        if cache is not None:
            cache[key] = index
        return index

    def _bm25_matrix(self, rows: Tensor, *, query: bool) -> Tensor:
        corpus = self._attach()
        owner, index = entry_index(corpus["offsets"], rows)
        term, tf = corpus["term_ids"][index], corpus["tfs"][index]
        if not query:
            idf = torch.as_tensor(self.task.bm25_idf, device=self.device)[term]
            length = corpus["lengths"][rows][owner]
            tf = bm25_term_weight(tf, length, idf, 1.0, k1=self.bm25["k1"], b=self.bm25["b"])
        return sparse_rows(owner, term, tf.float(), (len(rows), self.vocabulary_size))

    def _average_precision(self, scores: Tensor, queries: Tensor, kind: int) -> Tensor:
        val_docs = self.task.val_docs.to(self.device)
        itself = val_docs.unsqueeze(0) == queries.unsqueeze(1)
        if kind == VALIDATION_KINDS["cloze"]:  # the article (without the query sentence) is the one answer
            return average_precision(scores, itself.float(), torch.ones_like(itself))
        relevant = csr_contains(*self.graph, queries, val_docs).float()
        return average_precision(scores, relevant, ~itself)  # an article does not retrieve itself

    def on_validation_epoch_start(self) -> None:
        self._validation_index = {}

    def validation_step(self, queries: Tensor, batch_idx: int) -> None:
        queries = queries.to(self.device)
        with torch.no_grad():
            for kind, metric in zip(self.validation_kinds.values(), self.val_maps):
                scores = self._validation_scores(queries, kind, model="linklearn")
                metric.update(self._average_precision(scores, queries, kind))

    def on_validation_epoch_end(self) -> None:
        maps = {name: float(metric.compute()) for name, metric in zip(self.validation_kinds, self.val_maps)}
        for metric in self.val_maps:
            metric.reset()
        if self.baselines is None:
            self.baselines = self._baselines()
        self._validation_index = None  # the next pass's weights differ; free the memory meanwhile
        for name, value in maps.items():
            self.log(f"val/map_{name}", value)
        self.log("val/map", sum(maps.values()) / len(maps), prog_bar=True)
        for name, value in self.baselines.items():
            self.log(f"val/{name}", value)

    def _baselines(self) -> dict[str, float]:
        """Validation MAP (mean over the validation query kinds) of the untrained start and of BM25."""
        queries = self.task.val_queries.to(self.device)
        self._validation_index = {}
        out = {}
        with torch.no_grad():
            for model in ("start", "bm25"):
                per_kind = []
                for kind in self.validation_kinds.values():
                    ap = torch.cat(
                        [
                            self._average_precision(self._validation_scores(chunk, kind, model=model), chunk, kind)
                            for chunk in queries.split(128)
                        ]
                    )
                    per_kind.append(float(ap.mean()))
                out[f"map_{model}"] = sum(per_kind) / len(per_kind)
        return out

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.optimizer_factory is None:
            return torch.optim.Adam(self.parameters(), lr=0.01)
        return self.optimizer_factory(params=self.parameters())

    # -- scoring other collections --------------------------------------------------------------
    def score_collection(self, documents: Corpus, queries: Corpus, *, corrected: bool = True) -> Tensor:
        """``[Q, D]`` similarities (of the start with ``corrected=False``): ``model.collection_scores``."""
        return collection_scores(self.term_weight, documents, queries, corrected=corrected, device=self.device)

    def extra_results(self, out_dir: str | Path) -> dict[str, Any]:
        """``{"adhoc": ...}``: each collection ranked by the trained model, its untrained start and BM25
        (map, p@10, r_precision, ndcg@10 each). One collection gives the flat ``{"statistics",
        "linklearn", "start", "bm25"}`` and run files under ``out_dir/runs``; several give that per
        collection name, run files under ``out_dir/runs/<name>``. Empty without a collection;
        ``rankers.pipeline`` calls it."""
        if not self.collections:
            return {}
        runs = Path(out_dir) / "runs"
        if len(self.collections) == 1:  # today's flat form and run files
            return {"adhoc": self.evaluate_collection(next(iter(self.collections.values())), runs)}
        return {"adhoc": {name: self.evaluate_collection(c, runs / name) for name, c in self.collections.items()}}

    def evaluate_collection(self, collection: Any, runs_dir: Path) -> dict[str, Any]:
        """``{"statistics", "linklearn", "start", "bm25"}`` measures of one collection, run files in ``runs_dir``."""
        c = collection
        runs = {
            "linklearn": self.score_collection(c.documents, c.queries),
            "start": self.score_collection(c.documents, c.queries, corrected=False),
            "bm25": bm25_scores(c.documents, c.queries, **self.bm25),
        }
        results: dict[str, Any] = evaluate_runs(runs, c.labels, c.query_ids, c.doc_ids, runs_dir)
        results["bm25"].update(self.bm25)
        return {"statistics": c.statistics, **results}

    def export_model(self, out_dir: str | Path) -> dict[str, str]:
        """``term_weight.pt`` (TorchScript ``f(tf, idf, len)``) and ``meta.json`` (how to score with it)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        hp = self.hparams
        clone = TermWeight(hp.hidden, start=hp.start, k1=hp.k1, b=hp.b, idf_power=hp.idf_power)
        clone.load_state_dict(self.term_weight.state_dict())
        save_torchscript(torch.jit.script(clone.cpu().eval()), out / "term_weight.pt", "export")
        meta = {
            "model": "linklearn",
            "input": "tf [n], idf [n], length [n] float32 of (document, term) entries -> f [n]",
            "tokenizer": TOKENIZER,
            "idf": "log(N / df) over the collection's documents",
            "length": "number of tokens of the document divided by the mean over the collection's documents "
            "(queries: over the queries; a query's own factor does not change its ranking)",
            "similarity": "sum over the terms a query and a document share of f(query entry) * f(document entry)",
            "start": hp.start,
        }
        (out / "meta.json").write_text(json.dumps(meta, indent=1))
        return {"term_weight": str(out / "term_weight.pt"), "meta": str(out / "meta.json")}


# the math lives in rankers.linklearn.model; re-exported here for older imports
__all__ = [
    "STARTS",
    "VALIDATION_KINDS",
    "Correction",
    "LinkLearnModule",
    "TermWeight",
    "entry_weights",
    "pair_similarity",
    "weight_matrix",
]
