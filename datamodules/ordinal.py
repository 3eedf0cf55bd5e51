"""Ordinal-regression streams: Harrington's synthetic data (section 4.1) and collaborative filtering.

Batches are ``{"features": [B, d], "labels": [B]}`` (0-based ranks), taken from the stream in order.
"""

from __future__ import annotations

import logging

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from datamodules.batching import StreamBatch
from datamodules.harrington_data import HARRINGTON_CUTS, harrington_synthetic, polynomial_features
from datamodules.normalization import FeatureNormalizer
from datamodules.ratings_io import RatingScale, RatingsFormatError, read_ratings

__all__ = [
    "HARRINGTON_CUTS",
    "RatingsDataModule",
    "RatingsFormatError",
    "harrington_synthetic",
    "polynomial_features",
    "read_ratings",
]

log = logging.getLogger(__name__)


def refuse_nothing_to_learn(features: torch.Tensor, ranks: torch.Tensor, *, source: str, hint: str = "") -> None:
    """A training stream ``features [T, d]``, ``ranks [T]`` with no example, no feature that varies or
    a single rank teaches nothing: a ``RatingsFormatError`` (a ``DataError``) naming ``source``."""
    if len(ranks) == 0:
        problem = "no training example"
    elif features.shape[1] == 0 or not bool((features != features[:1]).any()):
        problem = f"no feature varies over the {len(ranks)} training examples ({features.shape[1]} features)"
    elif bool((ranks == ranks[0]).all()):
        problem = f"all {len(ranks)} training examples have the same rank ({int(ranks[0])})"
    else:
        return
    raise RatingsFormatError(f"{source}: {problem}: nothing to learn from" + (f"; {hint}" if hint else ""))


class OrdinalStreamDataModule(pl.LightningDataModule):
    """A training stream and val/test sets of ``(x [d], y in 0..k-1)``, served in stream order."""

    def __init__(self, *, batch_size: int = 1000, eval_batch_size: int = 1000) -> None:
        super().__init__()
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.splits: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.statistics: dict[str, dict[str, int]] = {}

    @property
    def num_features(self) -> int:
        return self.splits["train"][0].shape[1]

    def model_inputs(self) -> dict:
        """What the model is built with: the feature width and the normalizer it carries into the export."""
        return {"n_features": self.num_features, "normalizer": self.build_normalizer()}

    def build_normalizer(self) -> FeatureNormalizer:
        return FeatureNormalizer("none", num_features=self.num_features)

    def _finish(
        self, splits: dict[str, tuple[torch.Tensor, torch.Tensor]], *, source: str = "", hint: str = ""
    ) -> None:
        """Adopt the splits; a training stream with nothing to learn from is refused, naming ``source``
        and, in ``hint``, the settings that would change it."""
        refuse_nothing_to_learn(*splits["train"], source=source, hint=hint)
        self.splits = splits
        for name, (_features, y) in splits.items():
            counts = {f"rank_{r}": int((y == r).sum()) for r in range(self.n_ranks)}
            self.statistics[name] = {"examples": len(y), **counts}
            log.info("%s: %s", name, self.statistics[name])

    def _loader(self, split: str, batch_size: int) -> DataLoader:
        x, y = self.splits[split]
        dataset = TensorDataset(x, y)
        return DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=_as_batch)

    @property
    def has_validation(self) -> bool:
        return "val" in self.splits

    @property
    def has_test(self) -> bool:
        return "test" in self.splits

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.batch_size)

    def val_dataloader(self) -> DataLoader | list:
        return self._loader("val", self.eval_batch_size) if self.has_validation else []

    def test_dataloader(self) -> DataLoader | list:
        return self._loader("test", self.eval_batch_size) if self.has_test else []


def _as_batch(items: list) -> StreamBatch:
    x, y = zip(*items, strict=True)
    return {"features": torch.stack(x), "labels": torch.stack(y)}


class HarringtonSyntheticDataModule(OrdinalStreamDataModule):
    """Section 4.1's data: 50,000 training and 1,000 test examples, ranks 0..4, optional kernel map."""

    n_ranks = 5

    def __init__(
        self,
        *,
        n_train: int = 50000,
        n_val: int = 1000,
        n_test: int = 1000,
        kernel_degree: int = 2,
        noise: float = 0.125,
        data_seed: int = 0,
        n_ranks: int = 5,
        **loader_options,
    ) -> None:
        super().__init__(**loader_options)
        if n_ranks != 5:
            raise ValueError(f"the synthetic data of section 4.1 has 5 ranks, not {n_ranks}")
        self.sizes = {"train": n_train, "val": n_val, "test": n_test}
        self.kernel_degree, self.noise, self.data_seed = kernel_degree, noise, data_seed

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        splits = {}
        for offset, (name, size) in enumerate(self.sizes.items()):
            x, y = harrington_synthetic(
                size, torch.Generator().manual_seed(self.data_seed * 10 + offset), noise=self.noise
            )
            splits[name] = (polynomial_features(x, self.kernel_degree) if self.kernel_degree else x, y)
        self._finish(splits, source="Harrington's synthetic data")


class RatingsDataModule(OrdinalStreamDataModule):
    """Collaborative filtering as in Harrington's section 4.2 (and Crammer & Singer's EachMovie run).

    Each item the target user rated is one example: the label is the target user's rating (shifted
    to 0-based), the features are the other users' ratings of that item (0 where unseen; ratings are
    shifted to ``1..k`` so 0 stays "unseen"). Items are split into train/val/test with a seed; the
    training stream is in a seeded random order.

    Args: ``path`` to a ratings file (``datamodules.ratings_io``: ``user item rating [timestamp]``,
    tabs/spaces/commas/``::``, optional header); ``target_user`` (an id as written in the file;
    default: the user with the most ratings); ``min_rating``/``max_rating``/``rating_step`` the scale
    (k = (max - min) / step + 1; a rating off the scale is an error naming its line);
    ``min_common`` drops other users with fewer ratings of the target's items (dimension control);
    ``duplicates`` what a repeated (user, item) rating does (``last``, ``first``, ``error``; counted).
    The papers' protocols (a random target per trial, the first 300 items) are
    ``datamodules.ratings.HarringtonRatings`` and ``CrammerSingerRatings``.
    """

    def __init__(
        self,
        path: str,
        *,
        target_user: int | str | None = None,
        min_rating: float = 1,
        max_rating: float = 5,
        rating_step: float = 1,
        min_common: int = 1,
        val_fraction: float = 0.1,
        test_fraction: float = 0.2,
        data_seed: int = 0,
        duplicates: str = "last",
        n_ranks: int | None = None,
        **loader_options,
    ) -> None:
        super().__init__(**loader_options)
        self.path, self.target_user = path, target_user
        self.scale = RatingScale(float(min_rating), float(max_rating), float(rating_step))
        self.min_common, self.duplicates = min_common, duplicates
        self.fractions, self.data_seed = (val_fraction, test_fraction), data_seed
        self.n_ranks = self.scale.n_ranks
        if n_ranks is not None and n_ranks != self.n_ranks:
            raise ValueError(f"n_ranks={n_ranks} but the rating scale {self.scale} has {self.n_ranks}")

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        table = read_ratings(self.path, duplicates=self.duplicates)
        self.scale.check(table)
        ranks = self.scale.ranks(table.ratings)
        counts = np.bincount(table.users, minlength=len(table.user_ids))
        if self.target_user is None:
            target = int(np.argmax(counts))
        else:
            found = np.flatnonzero(table.user_ids == str(self.target_user))
            if not len(found):
                raise RatingsFormatError(f"{self.path}: no user {self.target_user!r} in the file")
            target = int(found[0])
        mine = table.users == target
        if mine.sum() < 3:
            raise RatingsFormatError(f"{self.path}: target user {self.target_user} rated {mine.sum()} items, need >= 3")
        items = table.items[mine]
        others_mask = ~mine & np.isin(table.items, items)
        other_users, per_user = np.unique(table.users[others_mask], return_counts=True)
        kept = other_users[per_user >= self.min_common]
        others_mask &= np.isin(table.users, kept)
        others = np.stack([table.users[others_mask], table.items[others_mask], ranks[others_mask] + 1], 1)
        mine_ranks = ranks[mine]
        # rows follow the target's items, columns the kept users (sorted by np.unique)
        by_item = np.argsort(items, kind="stable")
        rows = by_item[np.searchsorted(items[by_item], others[:, 1])]
        columns = np.searchsorted(kept, others[:, 0])
        x = np.zeros((len(items), len(kept)), dtype=np.float32)
        x[rows, columns] = others[:, 2]  # rank + 1: 1..k, 0 = not rated
        y = mine_ranks
        order = np.random.default_rng(self.data_seed).permutation(len(items))
        n_val = max(1, round(self.fractions[0] * len(items)))
        n_test = max(1, round(self.fractions[1] * len(items)))
        parts = {"val": order[:n_val], "test": order[n_val : n_val + n_test], "train": order[n_val + n_test :]}
        self._finish(
            {name: (torch.from_numpy(x[idx]), torch.from_numpy(y[idx])) for name, idx in parts.items()},
            source=f"{self.path}, target user {table.user_ids[target]}",
            hint=f"its items' features are the {len(kept)} other users who rated at least data.min_common="
            f"{self.min_common} of them; pick another data.target_user or lower data.min_common",
        )
        self.statistics["data"] = table.statistics
        log.info(
            "ratings: target user %s, %d items, %d other users as features",
            table.user_ids[target],
            len(items),
            len(kept),
        )
