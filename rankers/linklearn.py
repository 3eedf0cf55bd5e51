"""LinkLearn (Grangier & Bengio, NIPS'05 LTR workshop): a term weighting learned from hyperlinks.

    python train.py model=linklearn data=wikipedia data.path=dump.xml.bz2 data.adhoc_dir=collection/

Term weight (eq. 3): ``f(tf, idf, len) = MLP1(tf) * MLP2(idf) * MLP3(len)``; similarity
``sim(a, b) = sum_i f(tf_ia, idf_i, len_a) * f(tf_ib, idf_i, len_b)`` over the terms both share;
cost (eq. 7) ``|1 - sim(d, l+) + sim(d, l-)|_+`` on triples with l+ linked to d and l- not, by SGD.

Each MLP is evaluated only on the distinct values of its input over the corpus (the paper's trick;
``Corpus.tensors`` codes every entry once), gathered back to the (document, term) entries; pair
similarities are sparse intersections of the sorted term lists. Inputs enter the MLPs as
``log1p(tf)``, ``idf`` and ``log1p(len / mean len)``: a fixed rescaling so one learning rate suits all
three (the paper does not specify input scaling), and length relative to the collection's mean (as
in BM25's ``l_d / L``) so the model learned on Wikipedia transfers to collections of shorter or
longer documents (``bench/linklearn_transfer.py``, docs/linklearn.md).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric

from datamodules.adhoc import bm25_idf, bm25_term_weight
from datamodules.text import TOKENIZER, Corpus, entry_index, inverted_index, rank, sparse_rows
from datamodules.wikipedia import linked_matrix
from losses import linklearn_hinge
from metrics.functional import average_precision
from rankers.base import PassLimit


class ScalarMLP(nn.Module):
    """A single-input, single-output MLP ``1 -> hidden (tanh) -> 1`` applied to ``values [n]``.

    It runs once per distinct value of its input and gathers the result back to ``[n]``: a batch
    of thousands of (document, term) entries has only tens of distinct tfs and lengths.
    """

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        with torch.no_grad():  # start near 1, so sim starts as a count of shared terms
            self.layers[2].weight.mul_(0.1)
            self.layers[2].bias.fill_(1.0)

    def forward(self, values: Tensor) -> Tensor:
        distinct, inverse = torch.unique(values, return_inverse=True)
        return self.layers(distinct.unsqueeze(-1)).squeeze(-1)[inverse]

    @torch.jit.unused
    def fit_(self, inputs: Tensor, targets: Tensor, *, steps: int = 400) -> None:
        """Least-squares fit of the MLP to ``targets`` at ``inputs`` (``[n]``): an initialization."""
        optimizer = torch.optim.Adam(self.layers.parameters(), lr=0.05)
        for _ in range(steps):
            optimizer.zero_grad()
            loss = (self.layers(inputs.unsqueeze(-1)).squeeze(-1) - targets).square().mean()
            loss.backward()
            optimizer.step()


class TermWeight(nn.Module):
    """``f(tf, idf, len)`` of eq. 3: ``[n]`` raw term frequencies, idfs, relative lengths -> ``[n]``."""

    def __init__(self, hidden: int = 8, *, init: str = "tfidf") -> None:
        super().__init__()
        self.tf_mlp, self.idf_mlp, self.len_mlp = ScalarMLP(hidden), ScalarMLP(hidden), ScalarMLP(hidden)
        if init == "tfidf":
            self.init_tfidf_()
        elif init != "ones":
            raise ValueError(f"init must be 'tfidf' or 'ones', got {init!r}")

    @torch.jit.unused
    def init_tfidf_(self) -> None:
        """Start f near a tf-idf weight with pivoted length normalization (Singhal et al. 1996):
        ``log1p(tf) * idf / sqrt(0.25 + 0.75 len/mean len)``, and let SGD refine it. The paper does not
        say how it initialized; constant factors (a count of shared terms) ignore rarity and score far
        below BM25 on real text (``bench/linklearn_transfer.py`` prints both starts; docs/linklearn.md)."""
        u = torch.linspace(math.log(2.0), math.log(1000.0), 64)  # log1p(tf), tf in 1..1000
        self.tf_mlp.fit_(u, u)
        idf = torch.linspace(0.0, 15.0, 64)
        self.idf_mlp.fit_(idf, idf)
        v = torch.linspace(math.log1p(0.01), math.log1p(20.0), 64)  # log1p(relative length)
        self.len_mlp.fit_(v, (0.25 + 0.75 * torch.expm1(v)).rsqrt())

    def forward(self, tf: Tensor, idf: Tensor, length: Tensor) -> Tensor:
        return self.tf_mlp(torch.log1p(tf)) * self.idf_mlp(idf) * self.len_mlp(torch.log1p(length))

    @torch.jit.unused
    def on_corpus(self, corpus: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """Each factor on the corpus's distinct values (``Corpus.tensors``): ``[U_tf]``, ``[U_idf]``, ``[U_len]``."""
        return (
            self.tf_mlp.layers(torch.log1p(corpus["tf_values"]).unsqueeze(-1)).squeeze(-1),
            self.idf_mlp.layers(corpus["idf_values"].unsqueeze(-1)).squeeze(-1),
            self.len_mlp.layers(torch.log1p(corpus["length_values"]).unsqueeze(-1)).squeeze(-1),
        )


def gather_entries(corpus: dict[str, Tensor], docs: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``owner``, ``term``, ``tf``, ``length`` ``[n]`` of the entries of ``docs [P]`` (see ``entry_index``)."""
    owner, index = entry_index(corpus["offsets"], docs)
    return owner, corpus["term_ids"][index], corpus["tfs"][index], corpus["lengths"][docs][owner]


def entry_weights(model: TermWeight, corpus: dict[str, Tensor], docs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(owner, term, f)`` of the entries of ``docs``: the MLPs run on the corpus's distinct values
    (a few thousand for 150,000 articles), and every entry gathers its three factors by code."""
    owner, index = entry_index(corpus["offsets"], docs)
    term = corpus["term_ids"][index]
    tf_factor, idf_factor, length_factor = model.on_corpus(corpus)
    weight = (
        tf_factor[corpus["tf_codes"][index]]
        * idf_factor[corpus["idf_codes"][term]]
        * length_factor[corpus["length_codes"][docs][owner]]
    )
    return owner, term, weight


def pair_similarity(
    a: tuple[Tensor, Tensor, Tensor], b: tuple[Tensor, Tensor, Tensor], n_pairs: int, vocabulary_size: int
) -> Tensor:
    """``sim [P]`` of pairs given each side's ``(owner, term, weight)`` entries (sorted by owner, term)."""
    a_key = a[0] * vocabulary_size + a[1]
    b_key = b[0] * vocabulary_size + b[1]
    if len(a_key) == 0:
        return torch.zeros(n_pairs, device=a_key.device)
    position = torch.searchsorted(a_key, b_key).clamp_max(len(a_key) - 1)
    shared = a_key[position] == b_key
    products = a[2][position[shared]] * b[2][shared]
    return torch.zeros(n_pairs, device=products.device, dtype=products.dtype).index_add(0, b[0][shared], products)


class LinkLearnModule(PassLimit, pl.LightningModule):
    """Trains ``TermWeight`` on (d, l+, l-) triples; validates on the linked-documents retrieval task.

    The corpus comes from the datamodule (``trainer.datamodule.corpus``); training batches are
    ``[B, 3]`` document indices; validation batches are query document indices whose relevant
    documents are their links among the validation documents (AP, ``val/map``).
    """

    def __init__(
        self,
        *,
        hidden: int = 8,
        init: str = "tfidf",
        margin: float = 1.0,
        optimizer: Any = None,
        monitor: str = "val/map",
        epochs: int = 10,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["optimizer"])
        self.term_weight = TermWeight(hidden, init=init)
        self.margin, self.monitor = margin, monitor
        self.optimizer_factory = optimizer
        self.val_map, self.val_map_bm25 = MeanMetric(), MeanMetric()
        self.bm25_index: Tensor | None = None
        self.corpus: dict[str, Tensor] | None = None
        self.graph: tuple[Tensor, Tensor] | None = None

    # -- data ---------------------------------------------------------------------------------
    def _attach(self) -> None:
        """Corpus tensors (with the distinct-value codes) and link graph on this device, built once."""
        if self.corpus is not None and self.corpus["offsets"].device == self.device:
            return
        datamodule = self.trainer.datamodule
        self.corpus = datamodule.corpus.tensors(self.device)
        self.vocabulary_size = len(datamodule.corpus.vocabulary)
        self.graph = (datamodule.offsets.to(self.device), datamodule.neighbours.to(self.device))
        self.bm25_index = None

    def on_fit_start(self) -> None:
        self.check_passes(self.hparams.epochs)
        self._attach()

    def on_train_epoch_end(self) -> None:
        self.stop_after(self.hparams.epochs)

    def on_validation_start(self) -> None:
        self._attach()

    def weighted_entries(self, docs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(owner, term, f)`` of ``docs [P]``, each MLP run on the corpus's distinct values."""
        assert self.corpus is not None
        return entry_weights(self.term_weight, self.corpus, docs)

    # -- training -----------------------------------------------------------------------------
    def training_step(self, triples: Tensor, batch_idx: int) -> Tensor:
        anchors, positives, negatives = triples.to(self.device).unbind(1)
        n = len(anchors)
        owner, term, weight = self.weighted_entries(torch.cat([anchors, positives, negatives]))
        # one set of MLP evaluations for all 3B documents, then the two sparse intersections
        parts = [(owner >= i * n) & (owner < (i + 1) * n) for i in range(3)]
        sides = [(owner[p] - i * n, term[p], weight[p]) for i, p in enumerate(parts)]
        sim_pos = pair_similarity(sides[0], sides[1], n, self.vocabulary_size)
        sim_neg = pair_similarity(sides[0], sides[2], n, self.vocabulary_size)
        loss = linklearn_hinge(sim_pos, sim_neg, margin=self.margin)
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=n)
        self.log("train/violations", (sim_pos - sim_neg < 0).float().mean(), on_epoch=True, batch_size=n)
        return loss

    # -- validation: each validation document is a query, its links the relevant documents ------
    def on_validation_epoch_start(self) -> None:
        self.val_docs = self.trainer.datamodule.val_docs.to(self.device)
        self.val_index = inverted_index(self.document_matrix(self.val_docs))
        if self.bm25_index is None:  # BM25 has no parameters: one index per attach
            self.bm25_index = inverted_index(self.bm25_matrix(self.val_docs))

    def bm25_matrix(self, docs: Tensor, *, query: bool = False) -> Tensor:
        """Sparse ``[P, V]`` Okapi BM25 weights of ``docs`` with the whole corpus's statistics, or with
        ``query=True`` their term counts (BM25's query side): the baseline of the validation task."""
        assert self.corpus is not None
        datamodule = self.trainer.datamodule
        owner, index = entry_index(self.corpus["offsets"], docs)
        term, values = self.corpus["term_ids"][index], self.corpus["tfs"][index]
        if not query:
            idf = torch.as_tensor(bm25_idf(datamodule.corpus), dtype=torch.float32, device=self.device)
            lengths = self.corpus["lengths"]
            values = bm25_term_weight(
                values, lengths[docs][owner], idf[term], lengths.mean(), k1=datamodule.bm25_k1, b=datamodule.bm25_b
            )
        return sparse_rows(owner, term, values, (len(docs), self.vocabulary_size))

    def document_matrix(self, docs: Tensor) -> Tensor:
        """Sparse COO ``[len(docs), V]`` matrix of term weights ``f``."""
        with torch.no_grad():
            owner, term, weight = self.weighted_entries(docs)
        return sparse_rows(owner, term, weight, (len(docs), self.vocabulary_size))

    def validation_step(self, queries: Tensor, batch_idx: int) -> None:
        queries = queries.to(self.device)
        relevant = linked_matrix(*self.graph, queries, self.val_docs).float()  # [Q, D_val], on device
        mask = self.val_docs.unsqueeze(0) != queries.unsqueeze(1)  # a query does not retrieve itself
        scores = rank(self.val_index, self.document_matrix(queries))
        self.val_map.update(average_precision(scores, relevant, mask))
        self.log("val/map", self.val_map, on_epoch=True, prog_bar=True, batch_size=len(queries))
        bm25 = rank(self.bm25_index, self.bm25_matrix(queries, query=True))
        self.val_map_bm25.update(average_precision(bm25, relevant, mask))
        self.log("val/map_bm25", self.val_map_bm25, on_epoch=True, batch_size=len(queries))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.optimizer_factory is None:
            return torch.optim.SGD(self.parameters(), lr=0.01)
        return self.optimizer_factory(params=self.parameters())

    # -- scoring other collections ----------------------------------------------------------------
    def score_collection(self, documents: Corpus, queries: Corpus) -> Tensor:
        """``[Q, D]`` similarities; both sides use the documents' idf (queries share their vocabulary)."""
        device = self.device
        docs = documents.tensors(device)
        query = queries.tensors(device, idf=documents.idf())
        vocabulary = len(documents.vocabulary)
        with torch.no_grad():
            matrices = []
            for corpus in (docs, query):
                ids = torch.arange(len(corpus["offsets"]) - 1, device=device)
                owner, term, weight = entry_weights(self.term_weight, corpus, ids)
                matrices.append(sparse_rows(owner, term, weight, (len(ids), vocabulary)))
            return rank(inverted_index(matrices[0]), matrices[1])

    def export_model(self, out_dir: str | Path) -> dict[str, str]:
        """``term_weight.pt`` (TorchScript ``f(tf, idf, len)``) and ``meta.json`` (how to score with it)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        scripted = torch.jit.script(TermWeight(self.hparams.hidden, init="ones"))
        scripted.load_state_dict(self.term_weight.state_dict())
        scripted.save(str(out / "term_weight.pt"))
        meta = {
            "model": "linklearn",
            "input": "tf [n], idf [n], length [n] float32 of (document, term) entries -> f [n]",
            "tokenizer": TOKENIZER,
            "idf": "log(N / df) over the collection being scored",
            "length": "number of tokens of the document divided by the mean over the collection's documents "
            "(queries: over the queries; a query's own factor does not change its ranking)",
            "similarity": "sum over the terms a query and a document share of f(query entry) * f(document entry)",
        }
        (out / "meta.json").write_text(json.dumps(meta, indent=1))
        return {"term_weight": str(out / "term_weight.pt"), "meta": str(out / "meta.json")}
