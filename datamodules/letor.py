"""LightningDataModule for LETOR-format files (LETOR 3/4, MSLR-WEB10K/30K, Yahoo, Istella)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from datamodules.batching import DeviceBatches, QueryBatchSampler, QueryDataset, make_collate
from datamodules.feature_maps import RAW_COLUMNS, ThresholdInputs
from datamodules.letor_io import LetorData, LetorFormatError, read_letor, refuse_overflowing_gains
from datamodules.normalization import KINDS, FeatureNormalizer

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")


def split_statistics(data: LetorData) -> dict[str, int]:
    """Counts reported for each split: queries kept for evaluation are never dropped silently."""
    lengths = data.lengths
    relevant = np.add.reduceat(data.labels > 0, data.offsets[:-1]) if len(data.labels) else np.zeros(0)
    return {
        "queries": int(data.num_queries),
        "documents": len(data.labels),
        "queries_without_relevant": int((relevant == 0).sum()),
        "single_document_queries": int((lengths == 1).sum()),
        "max_list_length": int(lengths.max()) if len(lengths) else 0,
    }


def refuse_nothing_to_learn(data: LetorData) -> None:
    """A training split no ranker can learn from is an error here, naming the file, rather than a
    trivial model (or an index error deep inside a learner) later: every feature constant over all
    documents, or no query with two documents of different labels (no preference to learn)."""
    features = data.features
    varying = features.min(axis=0) != features.max(axis=0) if len(features) else np.zeros(0, bool)
    if not varying.any():
        raise LetorFormatError(
            f"{data.path}: no feature varies: all {data.num_features} features are constant over the "
            f"{len(data.labels)} training documents, so every ranker would score them alike; were the "
            "features filled in when the file was exported?"
        )
    starts = data.offsets[:-1][data.lengths > 0]
    spread = np.maximum.reduceat(data.labels, starts) != np.minimum.reduceat(data.labels, starts)
    if not spread.any():
        raise LetorFormatError(
            f"{data.path}: no query has two documents with different labels ({data.num_queries} queries): "
            "a ranker learns from preferences within a query, and this file has none"
        )


def hold_out_queries(train: LetorData, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded share ``fraction`` of ``train``'s queries held out for validation (at least one):
    ``(validation query indices, training query indices)``, each sorted."""
    order = np.random.default_rng(seed).permutation(train.num_queries)
    n_val = max(1, round(fraction * train.num_queries))
    if n_val >= train.num_queries:
        raise ValueError(f"{train.path}: {train.num_queries} queries, too few to hold out validation")
    return np.sort(order[:n_val]), np.sort(order[n_val:])


class LetorDataModule(pl.LightningDataModule):
    """Queries from LETOR text files, batched as ``features [B, L, F]``, ``labels [B, L]``, ``mask``.

    Args:
        train, val, test: file paths (``.txt``, ``.gz``, ``.bz2``). Without ``val``, a seeded
            ``val_fraction`` of the training queries is held out (0: none; every training query
            trains, nothing is validated, and the last epoch's model is the result).
        num_features: number of feature columns; default the largest index over all given files.
        zero_based: whether feature indices start at 0 (LETOR's start at 1).
        normalization: ``none``, ``zscore`` (training statistics), ``query_zscore`` or ``log1p``;
            applied by a ``FeatureNormalizer`` inside the model, hence inside the exported scorer.
        batch_size, eval_batch_size: queries per batch.
        max_list_length: training lists longer than this are randomly cut down to it (at least one
            relevant document kept); evaluation always sees whole lists.
        bucket_by_length: group training queries of similar length into batches (less padding).
        device_resident: keep each split on the training device and build batches by indexing.
        pad_multiple: round training batches' list width up to a multiple of this (fewer shapes
            for ``model.compile`` / CUDA graphs; padding is masked, results do not change).
        steps_per_batch: with ``device_resident``, hand the trainer lists of this many consecutive
            training batches, for ``model.step_graphs`` (one optimizer step per batch of the list, so
            Lightning's loop runs once per list; the batches and their order do not change).
        cache_dir: where parsed files are cached (``None``: no cache).
        n_ranks: number of grades, for the ordinal rankers (PRank, OAP) trained on this data.
        gain: the metrics' and losses' gain (``model.gain``); with ``"exp2"`` a label whose gain
            overflows float32 is refused here, naming file and line, rather than turning into NaN.
        max_dense_gib: the largest dense feature matrix a file may make (default: half of what the
            process may still allocate: free memory, ``ulimit -v``, the cgroup limit).
        max_features: keep features 1..K only; the values of higher indices are dropped and counted
            (a warning names the first line). For files with a stray huge feature index.
        feature_map: ``none``, or ``thresholds``: the model's input is each normalized feature plus
            the indicators of its ``bins - 1`` training quantiles (the live ones), standardized
            (``datamodules.feature_maps.ThresholdInputs``, inside the model and its export).
        raw_columns: with ``feature_map=thresholds``, the first F columns: ``features`` (the
            normalized features) or ``cdf`` (each feature's training CDF, ``QuantileCDF``).
    """

    def __init__(
        self,
        train: str,
        val: str | None = None,
        test: str | None = None,
        *,
        num_features: int | None = None,
        zero_based: bool = False,
        normalization: str = "zscore",
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        max_list_length: int | None = None,
        bucket_by_length: bool = True,
        device_resident: bool = False,
        pad_multiple: int = 1,
        steps_per_batch: int = 1,
        val_fraction: float = 0.1,
        num_workers: int = 0,
        cache_dir: str | None = None,
        seed: int = 0,
        n_ranks: int = 5,
        gain: str = "exp2",
        max_dense_gib: float | None = None,
        max_features: int | None = None,
        feature_map: str = "none",
        bins: int = 32,
        raw_columns: str = "features",
    ) -> None:
        super().__init__()
        if normalization not in KINDS:
            raise ValueError(f"normalization must be one of {KINDS}, got {normalization!r}")
        if feature_map not in ("none", "thresholds"):
            raise ValueError(f"feature_map must be 'none' or 'thresholds', got {feature_map!r}")
        if raw_columns not in RAW_COLUMNS:
            raise ValueError(f"raw_columns must be one of {RAW_COLUMNS}, got {raw_columns!r}")
        self.paths = {"train": train, "val": val, "test": test}
        self.feature_map, self.bins, self.raw_columns = feature_map, bins, raw_columns
        self.n_ranks = n_ranks  # for ordinal rankers, which read the labels as ranks 0..n_ranks-1
        self.num_features_option, self.zero_based = num_features, zero_based
        self.normalization, self.batch_size = normalization, batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.max_list_length, self.bucket_by_length = max_list_length, bucket_by_length
        self.device_resident, self.val_fraction = device_resident, val_fraction
        if not 0 <= val_fraction < 1:
            raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
        if pad_multiple < 1:
            raise ValueError(f"pad_multiple must be >= 1, got {pad_multiple}")
        self.pad_multiple = pad_multiple
        if steps_per_batch < 1 or (steps_per_batch > 1 and not device_resident):
            raise ValueError(
                f"steps_per_batch must be >= 1, and above 1 only with device_resident=true; got {steps_per_batch}"
            )
        self.steps_per_batch = steps_per_batch
        self.num_workers, self.cache_dir, self.seed = num_workers, cache_dir, seed
        self.gain = gain
        self.max_dense_bytes = None if max_dense_gib is None else int(max_dense_gib * 2**30)
        self.max_features = max_features
        self.splits: dict[str, LetorData] = {}
        self.tensors: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.statistics: dict[str, dict[str, int]] = {}

    @property
    def has_validation(self) -> bool:
        """Whether there is a validation split (a file, or held-out training queries)."""
        return self.paths["val"] is not None or self.val_fraction > 0

    @property
    def has_test(self) -> bool:
        """Whether a test file was given: without one nothing is reported as ``test`` (the validation
        split is reported as what it is, ``val``)."""
        return self.paths["test"] is not None or "test" in self.splits

    def split_sources(self) -> dict[str, str]:
        """What each evaluated split is, for results.json's ``"evaluated"``."""
        sources = {name: str(path) for name, path in self.paths.items() if path is not None and name != "train"}
        if self.paths["val"] is None and self.val_fraction > 0:
            sources["val"] = f"{self.val_fraction:g} of the training queries of {self.paths['train']}, held out"
        return sources

    @property
    def num_features(self) -> int:
        return self.splits["train"].num_features

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return  # called by train.py before the trainer exists, and again by Lightning
        for split, path in self.paths.items():
            if path is not None:
                self.splits[split] = read_letor(
                    path,
                    zero_based=self.zero_based,
                    cache_dir=self.cache_dir,
                    max_dense_bytes=self.max_dense_bytes,
                    max_features=self.max_features,
                )
        self.use_splits(self.splits)

    def use_splits(self, splits: dict[str, LetorData]) -> None:
        """Adopt in-memory splits (``setup`` passes what it read; benchmarks pass generated data)."""
        self.splits = dict(splits)
        for data in self.splits.values():
            refuse_overflowing_gains(data, self.gain)
        refuse_nothing_to_learn(self.splits["train"])
        if "val" not in self.splits and self.val_fraction > 0:
            self._hold_out_validation()
        width = self.num_features_option or max(data.num_features for data in self.splits.values())
        for split, data in self.splits.items():
            self.splits[split] = data.with_num_features(width)
            self.statistics[split] = split_statistics(self.splits[split])
            log.info("%s split: %s", split, self.statistics[split])
            self.tensors[split] = (
                torch.from_numpy(self.splits[split].features),
                torch.from_numpy(self.splits[split].labels),
                torch.from_numpy(self.splits[split].offsets),
            )

    def _hold_out_validation(self) -> None:
        val, kept = hold_out_queries(self.splits["train"], self.val_fraction, self.seed)
        train = self.splits["train"]
        self.splits["val"], self.splits["train"] = train.subset(val), train.subset(kept)

    def model_inputs(self) -> dict:
        """What the model is built with: the feature width and the normalizer it carries into the export."""
        normalizer = self.build_normalizer()
        return {"n_features": getattr(normalizer, "out_features", self.num_features), "normalizer": normalizer}

    def build_normalizer(self) -> FeatureNormalizer | ThresholdInputs:
        """The model's first step: a ``FeatureNormalizer`` fitted on the training split, followed by
        the quantile thresholds with ``feature_map=thresholds``."""
        train = self.splits["train"]
        normalizer = FeatureNormalizer.fit(self.normalization, train.features)
        if self.feature_map == "none":
            return normalizer
        features = torch.from_numpy(train.features)
        with torch.no_grad():
            if normalizer.kind != "query_zscore":  # document by document: the whole split at once
                documents = normalizer(features)
            else:  # its statistics are the query's: query by query, as batches are
                bounds = zip(train.offsets[:-1], train.offsets[1:], strict=True)
                documents = torch.cat([normalizer(features[a:b][None])[0] for a, b in bounds])
        return ThresholdInputs.fit(normalizer, documents, bins=self.bins, raw_columns=self.raw_columns)

    def _loader(self, split: str, *, train: bool):
        features, labels, offsets = self.tensors[split]
        lengths = self.splits[split].lengths
        sampler = QueryBatchSampler(
            lengths,
            self.batch_size if train else self.eval_batch_size,
            shuffle=train,
            bucket=self.bucket_by_length or not train,
            seed=self.seed,
            with_seeds=train,
        )
        max_length = self.max_list_length if train else None
        pad_multiple = self.pad_multiple if train else 1
        if self.device_resident:
            device = self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")
            moved = (features.to(device), labels.to(device), offsets.to(device))
            epoch_fn = (lambda: self.trainer.current_epoch) if self.trainer is not None else (lambda: 0)
            group = self.steps_per_batch if train else 1
            return DeviceBatches(*moved, sampler, max_length, epoch_fn, pad_multiple, steps_per_batch=group)
        return DataLoader(
            QueryDataset(features, labels, offsets),
            batch_sampler=sampler,
            collate_fn=make_collate(max_length, pad_multiple),
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self):
        return self._loader("train", train=True)

    def val_dataloader(self):
        return self._loader("val", train=False) if "val" in self.splits else []

    def test_dataloader(self):
        return self._loader("test", train=False) if "test" in self.splits else []

    def data_files(self) -> dict[str, str]:
        return {split: str(Path(p)) for split, p in self.paths.items() if p is not None}
