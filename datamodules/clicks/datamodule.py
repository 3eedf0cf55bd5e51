"""``data=clicks``: a click log (``features`` + ``clicks``) as query batches for ``model=unbiased``.

Training and validation queries (split by query, ``val_fraction`` held out) are lists of the
query's shown documents with, besides ``features [B, L, F]``, ``labels [B, L]`` (the naive
click-through rate, for reporting) and ``mask``, the log's counts per position:
``clicks [B, L, K]`` and ``impressions [B, L, K]`` (K: the deepest position in the log). The test
split, when ``test`` is given, is an ordinary LETOR file with relevance labels (evaluation only).
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch.utils.data import DataLoader

from datamodules.batching import QueryBatchSampler, QueryDataset, make_collate
from datamodules.clicks.cells import ClickCells, aggregate
from datamodules.clicks.io import ClickLog, read_click_log
from datamodules.letor import LetorDataModule, hold_out_queries
from datamodules.letor_io import LetorData, read_letor

log = logging.getLogger(__name__)


def query_rows(offsets: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """The rows of ``queries`` (in that order) under ``offsets [Q+1]``."""
    parts = [np.arange(offsets[q], offsets[q + 1]) for q in queries]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


class ClickLogDataModule(LetorDataModule):
    """Click log batches; see the module docstring. Options as ``LetorDataModule`` (normalization,
    feature map, batching), plus ``features``, ``clicks`` (the log) and ``test`` (labelled LETOR)."""

    def __init__(self, features: str, clicks: str, test: str | None = None, **options) -> None:
        super().__init__(train=features, val=None, test=test, **options)
        self.clicks_path = clicks
        self.log_data: ClickLog | None = None
        self.cells: ClickCells | None = None
        self.split_queries: dict[str, np.ndarray] = {}
        self.counts: dict[str, torch.Tensor] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        self.log_data = read_click_log(self.paths["train"], self.clicks_path, cache_dir=self.cache_dir)
        data = self.log_data.features
        self.cells = aggregate(
            self.log_data.row, self.log_data.position, self.log_data.click, self.log_data.session, data.offsets
        )
        k = self.cells.max_position
        clicks = np.zeros((len(data.labels), k), np.float32)
        shown = np.zeros((len(data.labels), k), np.float32)
        clicks[self.cells.row, self.cells.position - 1] = self.cells.clicks
        shown[self.cells.row, self.cells.position - 1] = self.cells.impressions
        self.per_row = (clicks, shown)
        ctr = (clicks.sum(1) / np.maximum(shown.sum(1), 1)).astype(np.float32)
        splits = {"train": LetorData(data.features, ctr, data.qids, data.offsets, data.path)}
        if self.paths["test"] is not None:
            splits["test"] = read_letor(self.paths["test"], cache_dir=self.cache_dir)
        self.split_queries = {"train": np.arange(data.num_queries)}
        self.use_splits(splits)
        self.statistics["click_log"] = dict(self.log_data.counts)
        log.info("click log: %s", self.statistics["click_log"])

    def _hold_out_validation(self) -> None:
        """Validation by query (as ``LetorDataModule``), remembering which queries went where."""
        train = self.splits["train"]
        val, kept = hold_out_queries(train, self.val_fraction, self.seed)
        self.split_queries = {"val": val, "train": kept}
        self.splits["val"] = train.subset(self.split_queries["val"])
        self.splits["train"] = train.subset(self.split_queries["train"])

    def model_inputs(self) -> dict:
        """The feature width, the normalizer, and the whole log's cells (propensities are estimated
        from the log alone: every session, whatever split its query is in; no label is read)."""
        return {**super().model_inputs(), "click_cells": self.cells}

    def _click_loader(self, split: str, *, train: bool) -> DataLoader:
        data = self.splits[split]
        rows = query_rows(self.log_data.features.offsets, self.split_queries[split])
        clicks, shown = (torch.from_numpy(m[rows]) for m in self.per_row)
        width, k = data.num_features, clicks.shape[1]
        packed = torch.cat([torch.from_numpy(data.features), clicks, shown], 1)  # [N, F + 2K], split after padding
        sampler = QueryBatchSampler(
            data.lengths,
            self.batch_size if train else self.eval_batch_size,
            shuffle=train,
            bucket=self.bucket_by_length or not train,
            seed=self.seed,
            with_seeds=train,
        )
        collate = make_collate(self.max_list_length if train else None, self.pad_multiple if train else 1)

        def unpack(items: list):
            batch = collate(items)
            whole = batch["features"]
            batch["features"] = whole[..., :width]
            batch["clicks"] = whole[..., width : width + k]
            batch["impressions"] = whole[..., width + k :]
            return batch

        dataset = QueryDataset(packed, torch.from_numpy(data.labels), torch.from_numpy(data.offsets))
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=unpack, num_workers=self.num_workers)

    def train_dataloader(self):
        return self._click_loader("train", train=True)

    def val_dataloader(self):
        return self._click_loader("val", train=False) if "val" in self.splits else []

    def test_dataloader(self):
        if "test" in self.splits:
            return self._loader("test", train=False)
        return self._click_loader("val", train=False)

    @property
    def has_test(self) -> bool:
        return self.paths["test"] is not None

    def data_files(self) -> dict[str, str]:
        return {**super().data_files(), "clicks": self.clicks_path}
