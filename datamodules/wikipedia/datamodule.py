"""``data=linked_corpus`` / ``data=wikipedia``: hyperlinked corpora as LinkLearn's training and validation data.

Each entry of ``data.path`` is a MediaWiki dump (``.xml`` / ``.xml.bz2``) or a linked-corpus folder
(Wikispeedia's layout or ``docs.tsv`` + ``links.tsv``, ``datamodules.wikipedia.folder``); several
train one model, each keeping its own term statistics.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from datamodules.adhoc import Collection, read_collection
from datamodules.wikipedia.cache import load_or_parse
from datamodules.wikipedia.dump import WikipediaFormatError
from datamodules.wikipedia.sampling import NEGATIVE_SAMPLING, LinkExamples
from datamodules.wikipedia.task import QUERY_KINDS, LinkTask, build_task, hard_negatives, limit_training_links

log = logging.getLogger(__name__)


class LinkedCorpusDataModule(pl.LightningDataModule):
    """Training examples and the validation retrieval task of Grangier & Bengio, section 4.

    Args:
        path: a ``pages-articles.xml`` / ``.xml.bz2`` dump or a linked-corpus folder, or a list of them
            (several fragments, language editions or corpora train one model; each keeps its own term
            statistics).
        cache_dir: where parsed dumps are cached (None: parse every time).
        max_articles: keep the first N articles of each dump (the paper used 2 x 150,000).
        max_tokens: keep each article's first N tokens as its text (abstract-length documents; None: all).
        val_fraction: share of articles in D_valid; links crossing the split are removed.
        batch_size: examples per SGD step.
        query_kinds: what stands for the query of a training example: ``document`` (the paper: the
            whole article d), ``title``, ``lead`` (its first sentence); one is drawn per example.
        negatives: l- per example; hard_negatives: how many of them are BM25's best non-linked articles.
        negative_sampling: ``uniform`` (every non-linked training article alike) or ``degree`` (each
            as often as it has links, so that l+ and l- are equally popular).
        max_train_links: keep this many training links (a seeded sample; None: all), for learning curves.
        cloze: inverse-cloze examples per training article and epoch, besides the link examples (a
            sentence of d the query, d without it l+, other articles l-; 0: links only).
        max_val_queries: validation articles used as queries (every validation article is ranked).
        adhoc_dir: an ad-hoc collection folder (``docs.tsv``, ``queries.tsv``, ``qrels.txt``) or a list
            of them, ranked after training (each named by its folder's name).
        bm25_k1, bm25_b: Okapi BM25's parameters, the baseline on validation and on that collection.
    """

    has_test = False  # the held-out evaluation is the ad-hoc collection

    def __init__(
        self,
        path: str | Sequence[str],
        *,
        cache_dir: str | None = None,
        max_articles: int | None = None,
        max_tokens: int | None = None,
        val_fraction: float = 0.5,
        batch_size: int = 32,
        query_kinds: Sequence[str] = ("document", "title", "lead"),
        negatives: int = 4,
        hard_negatives: int = 0,
        negative_sampling: str = "uniform",
        max_train_links: int | None = None,
        cloze: int = 0,
        max_val_queries: int = 500,
        adhoc_dir: str | Sequence[str] | None = None,
        bm25_k1: float = 1.2,
        bm25_b: float = 0.75,
        data_seed: int = 0,
    ) -> None:
        super().__init__()
        self.paths = [str(path)] if isinstance(path, str | Path) else [str(p) for p in path]
        if not self.paths:
            raise ValueError("data.path: give at least one dump or linked-corpus folder")
        unknown = set(query_kinds) - set(QUERY_KINDS)
        if unknown or not query_kinds:
            raise ValueError(f"data.query_kinds: {sorted(unknown) or 'empty'}; choose among {sorted(QUERY_KINDS)}")
        if negatives < 1 or not 0 <= hard_negatives <= negatives:
            raise ValueError(
                f"need negatives >= 1 and 0 <= hard_negatives <= negatives ({negatives}, {hard_negatives})"
            )
        self.cache_dir, self.max_articles, self.max_tokens = cache_dir, max_articles, max_tokens
        self.val_fraction, self.batch_size, self.max_val_queries = val_fraction, batch_size, max_val_queries
        self.query_kinds = tuple(QUERY_KINDS[kind] for kind in query_kinds)
        self.negatives, self.hard_negatives = negatives, hard_negatives
        if cloze < 0:
            raise ValueError(f"data.cloze must be >= 0, got {cloze}")
        if negative_sampling not in NEGATIVE_SAMPLING:
            raise ValueError(f"data.negative_sampling must be one of {NEGATIVE_SAMPLING}, got {negative_sampling!r}")
        if max_train_links is not None and max_train_links < 1:
            raise ValueError(f"data.max_train_links must be >= 1 or null, got {max_train_links}")
        self.cloze, self.negative_sampling, self.max_train_links = cloze, negative_sampling, max_train_links
        self.adhoc_dirs = adhoc_folders(adhoc_dir)
        self.data_seed = data_seed
        self.bm25_k1, self.bm25_b = bm25_k1, bm25_b
        self.task: LinkTask | None = None
        self.hard: torch.Tensor | None = None
        self.collections: dict[str, Collection] = {}
        self.statistics: dict[str, object] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.task is not None:
            return
        # read first: a broken collection fails before hours of training
        self.collections = {name: read_collection(folder) for name, folder in self.adhoc_dirs.items()}
        linked = [
            load_or_parse(path, self.cache_dir, max_articles=self.max_articles, max_tokens=self.max_tokens)
            for path in self.paths
        ]
        self.task = build_task(
            linked, val_fraction=self.val_fraction, max_val_queries=self.max_val_queries, seed=self.data_seed
        )
        if self.max_train_links is not None:
            self.task = limit_training_links(self.task, self.max_train_links, seed=self.data_seed)
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
        if self.collections:
            self.statistics["adhoc"] = {name: c.statistics for name, c in self.collections.items()}
        log.info("linked corpus: %s", self.statistics)

    def model_inputs(self) -> dict:
        """The task (term features, links, split) and the ad-hoc collections, for the module's constructor."""
        self.setup()
        return {
            "task": self.task,
            "collections": self.collections,
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
            negative_sampling=self.negative_sampling,
        )

    def val_dataloader(self) -> DataLoader:
        # batches of validation article ids; the module ranks every validation article for each
        assert self.task is not None, "call setup() first"
        return DataLoader(self.task.val_queries, batch_size=128, shuffle=False)


def adhoc_folders(adhoc_dir: str | Sequence[str] | None) -> dict[str, str]:
    """``{name: folder}`` of ``data.adhoc_dir`` (one folder or a list): each named by its folder's name,
    or by its whole path where two share a name.

    Example:
        >>> adhoc_folders(["data/med", "data/cran"])
        {'med': 'data/med', 'cran': 'data/cran'}
        >>> adhoc_folders(["a/med", "b/med"])
        {'a/med': 'a/med', 'b/med': 'b/med'}
        >>> adhoc_folders(None)
        {}
    """
    if not adhoc_dir:
        return {}
    folders = [str(adhoc_dir)] if isinstance(adhoc_dir, str | Path) else [str(folder) for folder in adhoc_dir]
    names = [Path(folder).name or folder for folder in folders]
    if len(set(folders)) != len(folders):
        raise ValueError(f"data.adhoc_dir lists a collection twice: {folders}")
    if len(set(names)) != len(names):
        names = folders
    return dict(zip(names, folders))


# the name it had when dumps were the only input
WikipediaDataModule = LinkedCorpusDataModule

__all__ = ["LinkedCorpusDataModule", "WikipediaDataModule", "adhoc_folders"]
