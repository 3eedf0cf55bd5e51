"""One or more parsed dumps as LinkLearn's task: rows of term features, the split graph, hard negatives.

Rows of ``LinkTask.features`` come in blocks (all articles of all dumps, in order): block 0 the ``D``
articles, block 1 their titles, block 2 their lead sentences, block 3 the articles without their lead
sentence ("rest"); then the ``S`` kept sentences and the ``S`` articles each without that sentence
("remainders"), the inverse-cloze pairs: a sentence is a verbose query whose one relevant document is
its article, the sentence removed so that the pair is not a trivial copy. Every dump keeps its own
idf (``log(N / df)`` over its articles) and its own mean lengths (articles relative to its articles'
mean, titles to its titles' mean...), so several language editions train one vocabulary-independent
model without their statistics mixing; term ids of different dumps are disjoint, so no pair of
documents from two dumps shares a term, and l+ / l- are always drawn from the anchor's own dump.
"""

from __future__ import annotations

import numpy as np
import torch

from datamodules.wikipedia.corpus import LinkedCorpus
from datamodules.wikipedia.graph import adjacency, split_graph
from retrieval.bm25 import bm25_idf, bm25_term_weight
from retrieval.sparse import entry_index, inverted_index, sparse_rows, top_k
from retrieval.terms import Corpus, TermFeatures

QUERY_KINDS = {"document": 0, "title": 1, "lead": 2}
REST = 3  # the block of the articles without their lead sentence


def subtract_rows(whole: Corpus, owners: np.ndarray, part: Corpus) -> Corpus:
    """Row ``i`` of ``whole`` minus row ``i`` of ``part`` for ``owners [R]`` rows of ``whole`` and the
    ``R`` rows of ``part`` (term counts subtracted, clamped at 0, emptied terms dropped; lengths
    recounted). ``R`` rows over ``whole.vocabulary``."""
    counts = np.diff(whole.offsets)[owners]
    row = np.repeat(np.arange(len(owners)), counts)
    starts = np.repeat(whole.offsets[owners] - (np.cumsum(counts) - counts), counts)
    index = np.arange(counts.sum()) + starts
    size = max(len(whole.vocabulary), 1)
    keys, tfs = row * size + whole.term_ids[index], whole.tfs[index].copy()
    part_keys = np.repeat(np.arange(part.n_docs), np.diff(part.offsets)) * size + part.term_ids
    position = np.searchsorted(keys, part_keys).clip(max=max(len(keys) - 1, 0))
    found = (keys[position] == part_keys) if len(keys) else np.zeros(len(part_keys), bool)
    np.subtract.at(tfs, position[found], part.tfs[found])
    tfs = np.maximum(tfs, 0)
    kept = tfs > 0
    sizes = np.bincount(row[kept], minlength=len(owners))
    return Corpus(
        offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        term_ids=whole.term_ids[index][kept].astype(np.int64),
        tfs=tfs[kept].astype(np.float32),
        lengths=np.bincount(row, weights=tfs, minlength=len(owners)).astype(np.float32),
        vocabulary=whole.vocabulary,
    )


class LinkTask:
    """What ``LinkLearnModule`` trains and validates on (built by ``WikipediaDataModule``).

    ``features``: ``3 D`` rows (see the module docstring); ``bm25_idf [V]``: Robertson-Sparck Jones
    idf per term within its dump (the validation baseline); ``part [D]``: the dump of each article;
    ``offsets``/``neighbours``: CSR links kept by the split (training and validation edges, none
    crossing); ``train_docs``, ``val_docs`` ``[N]``; ``val_queries``: validation articles with links;
    ``sentence_owner [S]``: the article of each kept sentence (rows ``sentence_rows`` / ``remainder_rows``).

    A plain class, not a dataclass: Hydra's ``instantiate`` would turn a dataclass argument into a config.
    """

    def __init__(
        self,
        *,
        features: TermFeatures,
        bm25_idf: np.ndarray,
        part: torch.Tensor,
        offsets: torch.Tensor,
        neighbours: torch.Tensor,
        train_docs: torch.Tensor,
        val_docs: torch.Tensor,
        val_queries: torch.Tensor,
        statistics: dict[str, object],
        sentence_owner: torch.Tensor | None = None,
    ) -> None:
        self.features, self.bm25_idf, self.part = features, bm25_idf, part
        self.offsets, self.neighbours = offsets, neighbours
        self.train_docs, self.val_docs, self.val_queries = train_docs, val_docs, val_queries
        self.statistics = statistics
        self.sentence_owner = torch.zeros(0, dtype=torch.long) if sentence_owner is None else sentence_owner

    @property
    def n_docs(self) -> int:
        return len(self.part)

    def rest_rows(self, articles: torch.Tensor) -> torch.Tensor:
        """Rows of ``articles`` without their lead sentence."""
        return REST * self.n_docs + articles

    def sentence_rows(self, sentences: torch.Tensor) -> torch.Tensor:
        """Rows of the kept sentences ``sentences`` (indices into ``sentence_owner``)."""
        return (REST + 1) * self.n_docs + sentences

    def remainder_rows(self, sentences: torch.Tensor) -> torch.Tensor:
        """Rows of each sentence's article without that sentence."""
        return (REST + 1) * self.n_docs + len(self.sentence_owner) + sentences


def build_task(linked: list[LinkedCorpus], *, val_fraction: float, max_val_queries: int, seed: int) -> LinkTask:
    """Concatenate the dumps, split each (seeded) into training and validation articles, drop crossing links."""
    names = ("document", "title", "lead", "rest", "sentence", "remainder")
    blocks: dict[str, list[TermFeatures]] = {name: [] for name in names}
    idfs, parts, edges, is_val, owners = [], [], [], [], []
    shift = 0
    for number, dump in enumerate(linked):
        idf = dump.corpus.idf()
        mean = float(dump.corpus.lengths.mean())  # rest and remainders are articles: their lengths too
        rest = subtract_rows(dump.corpus, np.arange(dump.corpus.n_docs), dump.leads)
        remainders = subtract_rows(dump.corpus, dump.sentence_owner, dump.sentences)
        for kind, corpus, lengths in (
            ("document", dump.corpus, dump.corpus.relative_lengths()),
            ("title", dump.titles, dump.titles.relative_lengths()),
            ("lead", dump.leads, dump.leads.relative_lengths()),
            ("rest", rest, rest.relative_lengths(mean)),
            ("sentence", dump.sentences, dump.sentences.relative_lengths()),
            ("remainder", remainders, remainders.relative_lengths(mean)),
        ):
            blocks[kind].append(TermFeatures(corpus.offsets, corpus.term_ids, corpus.tfs, idf, lengths))
        owners.append(dump.sentence_owner + shift)
        idfs.append(bm25_idf(dump.corpus).astype(np.float32))
        n = dump.corpus.n_docs
        val, kept = split_graph(n, dump.edges, val_fraction, seed + number)
        parts.append(np.full(n, number))
        edges.append(kept + shift)
        is_val.append(val)
        shift += n
    # one vocabulary space per dump, shared by its three blocks: shift each block's term ids alike
    features = _stack_blocks([TermFeatures.concat(blocks[kind]) for kind in names])
    n_docs = shift
    all_edges = np.concatenate(edges) if edges else np.zeros((0, 2), np.int64)
    offsets, neighbours = adjacency(n_docs, all_edges)
    is_val_all = np.concatenate(is_val)
    degree = np.diff(offsets.numpy())
    train_docs = torch.from_numpy(np.flatnonzero(~is_val_all))
    val_docs = torch.from_numpy(np.flatnonzero(is_val_all))
    with_links = val_docs[torch.from_numpy(degree[is_val_all] > 0)]
    generator = torch.Generator().manual_seed(seed)
    val_queries = with_links[torch.randperm(len(with_links), generator=generator)][:max_val_queries].sort().values
    statistics = {
        "dumps": len(linked),
        "train_docs": len(train_docs),
        "val_docs": len(val_docs),
        "edges_kept": len(all_edges),
        "train_links": int((~is_val_all[all_edges[:, 0]]).sum()) if len(all_edges) else 0,
        "edges_crossing_split_removed": int(sum(len(d.edges) for d in linked) - len(all_edges)),
        "train_anchors": int((degree[~is_val_all] > 0).sum()),
        "mean_links_train": float(degree[~is_val_all].mean()) if (~is_val_all).any() else 0.0,
        "mean_links_val": float(degree[is_val_all].mean()) if is_val_all.any() else 0.0,
        "val_queries": len(val_queries),
        "sentences": int(sum(len(o) for o in owners)),
    }
    return LinkTask(
        features=features,
        bm25_idf=np.concatenate(idfs),
        part=torch.from_numpy(np.concatenate(parts)),
        offsets=offsets,
        neighbours=neighbours,
        train_docs=train_docs,
        val_docs=val_docs,
        val_queries=val_queries,
        statistics=statistics,
        sentence_owner=torch.from_numpy(np.concatenate(owners).astype(np.int64)),
    )


def limit_training_links(task: LinkTask, n_links: int, *, seed: int) -> LinkTask:
    """The task with a seeded sample of ``n_links`` of its training links (all of them if it has fewer);
    validation links, articles and features unchanged. For learning curves against the number of links."""
    n = task.n_docs
    sources = torch.repeat_interleave(torch.arange(n), task.offsets.diff())
    once = sources < task.neighbours  # each undirected edge once
    edges = torch.stack([sources[once], task.neighbours[once]], 1)
    is_val = torch.zeros(n, dtype=torch.bool)
    is_val[task.val_docs] = True
    training = ~is_val[edges[:, 0]]
    train_edges, val_edges = edges[training], edges[~training]
    generator = torch.Generator().manual_seed(seed)
    kept = train_edges[torch.randperm(len(train_edges), generator=generator)[:n_links]]
    offsets, neighbours = adjacency(n, torch.cat([kept, val_edges]).numpy())
    degree = offsets.diff()
    statistics = dict(task.statistics)
    statistics.update(
        train_links=len(kept),
        train_links_dropped=len(train_edges) - len(kept),
        train_anchors=int((degree[task.train_docs] > 0).sum()),
        mean_links_train=float(degree[task.train_docs].float().mean()) if len(task.train_docs) else 0.0,
    )
    return LinkTask(
        features=task.features,
        bm25_idf=task.bm25_idf,
        part=task.part,
        offsets=offsets,
        neighbours=neighbours,
        train_docs=task.train_docs,
        val_docs=task.val_docs,
        val_queries=task.val_queries,
        statistics=statistics,
        sentence_owner=task.sentence_owner,
    )


def _stack_blocks(blocks: list[TermFeatures]) -> TermFeatures:
    """Rows of ``blocks`` one after another, all over the first block's term space (same ids, same idf)."""
    offsets = [blocks[0].offsets]
    for block in blocks[1:]:
        offsets.append(block.offsets[1:] + offsets[-1][-1])
    return TermFeatures(
        offsets=np.concatenate(offsets),
        term_ids=np.concatenate([b.term_ids for b in blocks]),
        tfs=np.concatenate([b.tfs for b in blocks]),
        idf=blocks[0].idf,
        lengths=np.concatenate([b.lengths for b in blocks]),
    )


def hard_negatives(
    task: LinkTask, *, per_article: int, k1: float = 1.2, b: float = 0.75, max_df: float = 0.05
) -> torch.Tensor:
    """``[D, per_article]`` training articles BM25 ranks highest for each training article's title and
    lead sentence, excluding the article and its links (-1 where fewer exist). Query terms in more
    than ``max_df`` of the articles are left out: they hardly change BM25's top and their postings
    would make this quadratic in the corpus size."""
    features, n = task.features, task.n_docs
    out = torch.full((n, per_article), -1, dtype=torch.long)
    if per_article == 0:
        return out
    docs = task.train_docs
    doc_owner, doc_terms, doc_tfs = _entries(features, docs)
    df = np.bincount(doc_terms.numpy(), minlength=len(features.idf))
    weight = bm25_term_weight(
        doc_tfs,
        torch.from_numpy(features.lengths)[docs][doc_owner],
        torch.from_numpy(task.bm25_idf)[doc_terms],
        1.0,
        k1=k1,
        b=b,
    )
    index = inverted_index(sparse_rows(doc_owner, doc_terms, weight.float(), (len(docs), len(features.idf))))
    anchors = docs[(task.offsets[docs + 1] - task.offsets[docs]) > 0]
    q_owner, q_terms, q_tfs = [], [], []
    for base in (n, 2 * n):  # title and lead rows
        owner, terms, tfs = _entries(features, base + anchors)
        q_owner.append(owner), q_terms.append(terms), q_tfs.append(tfs)
    owner, terms, tfs = torch.cat(q_owner), torch.cat(q_terms), torch.cat(q_tfs)
    part_size = torch.bincount(task.part[docs], minlength=int(task.part.max()) + 1).float()
    rare = torch.from_numpy(df).float()[terms] <= max_df * part_size[task.part[anchors][owner]]
    queries = sparse_rows(owner[rare], terms[rare], tfs[rare].float(), (len(anchors), len(features.idf)))
    extra = per_article + 1 + min(int(task.offsets.diff()[anchors].max()), 64) if len(anchors) else 0
    _, best = top_k(index, queries, min(extra, len(docs)))
    best = docs[best]  # [A, extra] article ids
    anchor_column = anchors.unsqueeze(1).expand_as(best)
    linked = _linked(task, anchor_column, best) | (best == anchor_column)
    rank = torch.where(linked, torch.iinfo(torch.long).max, torch.arange(best.shape[1]).expand_as(best))
    order = rank.sort(dim=1, stable=True)
    keep = order.values[:, :per_article] < torch.iinfo(torch.long).max
    chosen = best.gather(1, order.indices[:, :per_article])
    out[anchors] = torch.where(keep, chosen, torch.full_like(chosen, -1))
    return out


def _entries(features: TermFeatures, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    owner, index = entry_index(torch.from_numpy(features.offsets), rows)
    return owner, torch.from_numpy(features.term_ids)[index], torch.from_numpy(features.tfs)[index]


def _linked(task: LinkTask, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    n = task.n_docs
    sources = torch.repeat_interleave(torch.arange(n), task.offsets.diff())
    keys = sources * n + task.neighbours
    if len(keys) == 0:
        return torch.zeros_like(a, dtype=torch.bool)
    query = (a * n + b).flatten()
    position = torch.searchsorted(keys, query).clamp_max(len(keys) - 1)
    return (keys[position] == query).view_as(a)


__all__ = ["QUERY_KINDS", "REST", "LinkTask", "build_task", "hard_negatives", "limit_training_links", "subtract_rows"]
