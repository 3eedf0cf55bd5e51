"""``data=wikipedia``: one or more MediaWiki dumps as LinkLearn's training and validation data."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from datamodules.adhoc import Collection, read_collection
from datamodules.wikipedia.corpus import load_or_parse
from datamodules.wikipedia.dump import WikipediaFormatError
from datamodules.wikipedia.sampling import LinkExamples
from datamodules.wikipedia.task import QUERY_KINDS, LinkTask, build_task, hard_negatives

log = logging.getLogger(__name__)


class WikipediaDataModule(pl.LightningDataModule):
    """Training examples and the validation retrieval task of Grangier & Bengio, section 4.

    Args:
        path: a ``pages-articles.xml`` / ``.xml.bz2`` dump, or a list of them (several fragments or
            language editions train one model; each keeps its own term statistics).
        cache_dir: where parsed dumps are cached (None: parse every time).
        max_articles: keep the first N articles of each dump (the paper used 2 x 150,000).
        val_fraction: share of articles in D_valid; links crossing the split are removed.
        batch_size: examples per SGD step.
        query_kinds: what stands for the query of a training example: ``document`` (the paper: the
            whole article d), ``title``, ``lead`` (its first sentence); one is drawn per example.
        negatives: l- per example; hard_negatives: how many of them are BM25's best non-linked articles.
        cloze: inverse-cloze examples per training article and epoch, besides the link examples (a
            sentence of d the query, d without it l+, other articles l-; 0: links only).
        max_val_queries: validation articles used as queries (every validation article is ranked).
        adhoc_dir: an ad-hoc collection (``docs.tsv``, ``queries.tsv``, ``qrels.txt``) ranked after training.
        bm25_k1, bm25_b: Okapi BM25's parameters, the baseline on validation and on that collection.
    """

    has_test = False  # the held-out evaluation is the ad-hoc collection

    def __init__(
        self,
        path: str | Sequence[str],
        *,
        cache_dir: str | None = None,
        max_articles: int | None = None,
        val_fraction: float = 0.5,
        batch_size: int = 32,
        query_kinds: Sequence[str] = ("document", "title", "lead"),
        negatives: int = 4,
        hard_negatives: int = 0,
        cloze: int = 0,
        max_val_queries: int = 500,
        adhoc_dir: str | None = None,
        bm25_k1: float = 1.2,
        bm25_b: float = 0.75,
        data_seed: int = 0,
    ) -> None:
        super().__init__()
        self.paths = [str(path)] if isinstance(path, str | Path) else [str(p) for p in path]
        if not self.paths:
            raise ValueError("data.path: give at least one dump")
        unknown = set(query_kinds) - set(QUERY_KINDS)
        if unknown or not query_kinds:
            raise ValueError(f"data.query_kinds: {sorted(unknown) or 'empty'}; choose among {sorted(QUERY_KINDS)}")
        if negatives < 1 or not 0 <= hard_negatives <= negatives:
            raise ValueError(
                f"need negatives >= 1 and 0 <= hard_negatives <= negatives ({negatives}, {hard_negatives})"
            )
        self.cache_dir, self.max_articles = cache_dir, max_articles
        self.val_fraction, self.batch_size, self.max_val_queries = val_fraction, batch_size, max_val_queries
        self.query_kinds = tuple(QUERY_KINDS[kind] for kind in query_kinds)
        self.negatives, self.hard_negatives = negatives, hard_negatives
        if cloze < 0:
            raise ValueError(f"data.cloze must be >= 0, got {cloze}")
        self.cloze = cloze
        self.adhoc_dir, self.data_seed = adhoc_dir, data_seed
        self.bm25_k1, self.bm25_b = bm25_k1, bm25_b
        self.task: LinkTask | None = None
        self.hard: torch.Tensor | None = None
        self.collection: Collection | None = None
        self.statistics: dict[str, object] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.task is not None:
            return
        if self.adhoc_dir:  # read first: a broken collection fails before hours of training
            self.collection = read_collection(self.adhoc_dir)
        linked = [load_or_parse(path, self.cache_dir, max_articles=self.max_articles) for path in self.paths]
        self.task = build_task(
            linked, val_fraction=self.val_fraction, max_val_queries=self.max_val_queries, seed=self.data_seed
        )
        stats = self.task.statistics
        self.statistics = {
            **stats,
            "dumps": {path: dump.statistics for path, dump in zip(self.paths, linked)},
            "vocabulary": len(self.task.features.idf),
        }
        if stats["val_queries"] == 0 or stats["train_anchors"] == 0:
            side = "validation" if stats["val_queries"] == 0 else "training"
            raise WikipediaFormatError(
                f"{', '.join(self.paths)}: after the split no {side} article has a link; use more articles or "
                f"another val_fraction ({stats})"
            )
        if self.hard_negatives:
            self.hard = hard_negatives(self.task, per_article=4 * self.hard_negatives, k1=self.bm25_k1, b=self.bm25_b)
        if self.collection is not None:
            self.statistics["adhoc"] = self.collection.statistics
        log.info("wikipedia: %s", self.statistics)

    def model_inputs(self) -> dict:
        """The task (term features, links, split) and the ad-hoc collection, for the module's constructor."""
        self.setup()
        return {
            "task": self.task,
            "collection": self.collection,
            "bm25": {"k1": self.bm25_k1, "b": self.bm25_b},
        }

    def train_dataloader(self) -> LinkExamples:
        assert self.task is not None, "call setup() first"
        task = self.task
        return LinkExamples(
            task.train_docs,
            task.part,
            task.offsets,
            task.neighbours,
            query_kinds=self.query_kinds,
            hard=self.hard,
            negatives=self.negatives,
            hard_negatives=self.hard_negatives,
            batch_size=self.batch_size,
            seed=self.data_seed,
            sentence_owner=task.sentence_owner,
            cloze=self.cloze,
        )

    def val_dataloader(self) -> DataLoader:
        # batches of validation article ids; the module ranks every validation article for each
        assert self.task is not None, "call setup() first"
        return DataLoader(self.task.val_queries, batch_size=128, shuffle=False)


__all__ = ["WikipediaDataModule"]
