"""Collaborative filtering as the papers ran it: Harrington (2003) section 4.2 and Crammer & Singer (2001).

Both predict one *target* user's grade of an item from the other users' grades of it. An example
is one item the target rated: its label is the target's rank, its features are the other
qualifying users' ratings of the item, shifted so that 0 means "not rated" (:class:`RatingScale`).
By default each instance is then scaled to unit length (``normalize="unit"``; ``"none"`` keeps the
raw shifted scores). The paper's section 4.2 does not say; its perceptron analysis "is assuming the
instances to be normalized" (footnote 1), and a Bayes point is the centre of a version space of
normalized instances (Herbrich et al.), which OAP-BPM approximates by averaging. It also keeps an
item that many users rated from outweighing one that few rated. On MovieLens-like data with 10
half-star grades it decides whether averaging weights (BPM) beats averaging ranks (Bagg/VP); see
``docs/reproductions.md`` (Table 2).

Each Monte-Carlo trial draws its own target user, so trials differ in data; all trials share the
feature columns (every qualifying user, with the target's own column zero in its trial: a zero
feature is never updated by a perceptron or Widrow-Hoff, so this equals dropping the column, and
it lets all trials run as one ``[R, T, d]`` tensor).

``HarringtonRatings`` (``data=ratings_harrington``), section 4.2 on EachMovie: users who rated more
than 300 items qualify; each trial draws a target uniformly among them; the first 300 items the
target rated (by timestamp, then file line; file order where there are no timestamps: "the first
300 movies scored") are split at random into 210 training items, streamed in that random order,
and 90 test items.

``CrammerSingerRatings`` (``data=ratings_crammer_singer``), "Pranking with ranking" section 5 on
EachMovie. What differs from Harrington: users with *at least* ``min_ratings`` ratings qualify
(the paper ran two thresholds, a lower and a higher one; the numbers are stripped from our copy of
the text, so ``min_ratings`` and ``n_rounds`` are options, default 200); the target's ratings
are fed "one at a time, in an online fashion" for ``n_rounds`` rounds (the target's first ratings
in time order, no shuffling), and the measure is the time-averaged online rank loss of the
predictions made before each update; no test set unless ``n_test`` > 0 (the paper's "batch
setting": the last hypothesis ranks unseen items, here the target's next ``n_test`` ratings).

Trial ``t`` is drawn from ``numpy.random.default_rng([data_seed, t])`` alone: trials are
independent, reproducible, and the same whatever the number of trials.

Under ``train.py`` (one trial, ``data.trial``) these are ordinary stream datamodules serving
``StreamBatch`` ``{features [B, d], labels [B]}`` in stream order, e.g. for RankBoost;
``experiments.harrington2003_cf.table2`` takes all trials at once through :meth:`RatingsProtocol.trials`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import torch

from datamodules.ordinal import OrdinalStreamDataModule
from datamodules.ratings_io import RatingScale, RatingsFormatError, RatingsTable, read_ratings, resolve_scale

log = logging.getLogger(__name__)


@dataclass
class RatingTrials:
    """All Monte-Carlo trials of a protocol: run ``r`` is trial ``r``.

    ``train_x [R, T, d] float32`` (stream order), ``train_y [R, T] long`` (0-based ranks),
    ``test_x [R, n, d]``, ``test_y [R, n]`` (``n`` may be 0), ``targets`` the target user per trial,
    ``feature_users`` the user id of each feature column, ``train_items [R, T]`` / ``test_items [R, n]``
    the item id of each example.
    """

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    targets: list[str]
    feature_users: np.ndarray
    n_ranks: int
    train_items: np.ndarray
    test_items: np.ndarray
    statistics: dict = field(default_factory=dict)

    @property
    def n_trials(self) -> int:
        return self.train_x.shape[0]

    @property
    def n_features(self) -> int:
        return self.train_x.shape[2]


class RatingsProtocol(OrdinalStreamDataModule):
    """What both protocols share: reading, the scale, qualifying users, the feature matrix, trials.

    Args:
        path: ratings file (``datamodules.ratings_io``: tabs/spaces/commas/``::``, optional header).
        min_ratings: a user qualifies with at least this many rated items.
        trials: Monte-Carlo trials (target users drawn with replacement, one per trial).
        data_seed: seeds every trial (trial ``t`` uses ``default_rng([data_seed, t])``).
        trial: the trial served under ``train.py`` (the Lightning path).
        min_rating, max_rating, rating_step: the grade scale; None takes each from the data
            (smallest, largest rating, the grid step); off-scale ratings are errors naming the line.
        duplicates: ``last`` | ``first`` | ``error``, what a second rating of an item by a user does
            (counted and reported in ``statistics``).
        normalize: ``unit`` (each instance divided by its Euclidean norm) or ``none``.
        n_ranks: if given, must equal the scale's number of grades (a check for model configs).
    """

    def __init__(
        self,
        path: str,
        *,
        min_ratings: int,
        trials: int = 500,
        data_seed: int = 0,
        trial: int = 0,
        min_rating: float | None = None,
        max_rating: float | None = None,
        rating_step: float | None = None,
        duplicates: str = "last",
        normalize: str = "unit",
        n_ranks: int | None = None,
        **loader_options,
    ) -> None:
        super().__init__(**loader_options)
        if normalize not in ("unit", "none"):
            raise ValueError(f"normalize must be 'unit' or 'none', got {normalize!r}")
        self.normalize = normalize
        self.path, self.min_ratings, self.n_trials = path, min_ratings, trials
        self.data_seed, self.trial = data_seed, trial
        self.scale_options = {"min_rating": min_rating, "max_rating": max_rating, "rating_step": rating_step}
        self.duplicates, self.expected_ranks = duplicates, n_ranks
        self.table: RatingsTable | None = None
        self.scale: RatingScale | None = None

    # -- what a protocol decides ------------------------------------------------------------------
    stream_length: int  # training examples per trial
    test_length: int  # test examples per trial

    def draw(self, rng: np.random.Generator, history: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """From one target's items ``history`` (time order), the training stream and test items (indices)."""
        raise NotImplementedError

    # -- shared machinery -------------------------------------------------------------------------
    @property
    def n_ranks(self) -> int:
        return self.prepare().n_ranks

    def prepare(self) -> RatingScale:
        """Read the file once; the scale, the qualifying users, their feature matrix and histories."""
        if self.scale is not None:
            return self.scale
        table = read_ratings(self.path, duplicates=self.duplicates)
        scale = resolve_scale(table, **self.scale_options)
        if self.expected_ranks is not None and self.expected_ranks != scale.n_ranks:
            raise ValueError(f"data.n_ranks={self.expected_ranks} but the ratings have {scale.n_ranks} grades: {scale}")
        needed = self.stream_length + self.test_length
        if self.min_ratings < needed:
            raise ValueError(f"min_ratings={self.min_ratings} is below the {needed} items each trial takes")
        per_user = np.bincount(table.users, minlength=len(table.user_ids))
        qualifying = np.flatnonzero(per_user >= self.min_ratings)
        if len(qualifying) < 2:
            raise RatingsFormatError(
                f"{self.path}: {len(qualifying)} users rated {self.min_ratings} items or more; the protocol needs "
                "a target and at least one other user (lower data.min_ratings)"
            )
        column = np.full(len(table.user_ids), -1)
        column[qualifying] = np.arange(len(qualifying))
        # features [items, qualifying users]: shifted ratings, 0 = not rated
        rows = column[table.users] >= 0
        self.features = np.zeros((len(table.item_ids), len(qualifying)), dtype=np.float32)
        self.features[table.items[rows], column[table.users[rows]]] = scale.features(table.ratings[rows])
        # each qualifying user's first `needed` items and ranks, in the order they were rated
        order = table.chronological()
        order = order[column[table.users[order]] >= 0]
        first = np.searchsorted(table.users[order], qualifying)
        take = first[:, None] + np.arange(needed)
        self.histories = table.items[order][take]  # [U, needed]
        self.history_ranks = scale.ranks(table.ratings[order][take])
        sharing_none = self._refuse_no_shared_items(table, qualifying)
        self.table, self.scale, self.qualifying = table, scale, qualifying
        self.statistics["data"] = {
            **table.statistics,
            "scale": {"min": scale.minimum, "max": scale.maximum, "step": scale.step, "n_ranks": scale.n_ranks},
            "qualifying_users": len(qualifying),
            "min_ratings": self.min_ratings,
            "feature_density": float((self.features != 0).mean()),
            "users_sharing_no_item": sharing_none,
        }
        log.info("%s: %s", self.path, self.statistics["data"])
        return scale

    def _refuse_no_shared_items(self, table: RatingsTable, qualifying: np.ndarray) -> int:
        """The other users' ratings of an item are its features: if no qualifying user's history
        holds an item another qualifying user rated, every trial's features are all zero and there is
        nothing to learn. Refused, naming the file and the settings that would change it; a partial
        overlap is reported: the number of qualifying users who share none of their items."""
        needed = self.stream_length + self.test_length
        rows = np.isin(table.users, qualifying)
        raters = np.bincount(table.items[rows], minlength=len(table.item_ids))  # qualifying raters per item
        order = table.chronological()
        order = order[np.isin(table.users[order], qualifying)]
        first = np.searchsorted(table.users[order], qualifying)
        history_items = table.items[order][first[:, None] + np.arange(needed)]  # [U, needed]
        shared = (raters[history_items] >= 2).sum(axis=1)  # per qualifying user
        if not shared.any():
            # would admitting users below the threshold help? items of these histories that they rated
            everyone = np.bincount(table.items, minlength=len(table.item_ids))
            rated_by_others = int((everyone[history_items] > raters[history_items]).sum())
            raise RatingsFormatError(
                f"{self.path}: no qualifying user (of {len(qualifying)} who rated {self.min_ratings} items or more) "
                f"shares an item of its first {needed} with another, so every item's features (the other users' "
                f"ratings) are empty and there is nothing to learn. Users below the threshold rated "
                f"{rated_by_others} of these items: lower data.min_ratings (with data.n_items and data.n_train, "
                "which it must cover) to admit them, or use a file where users rate common items"
            )
        alone = int((shared == 0).sum())
        if alone:
            log.warning(
                "%s: %d of %d qualifying users share none of their first %d items with another; "
                "a trial drawing one of them as target has only empty features",
                self.path,
                alone,
                len(qualifying),
                needed,
            )
        return alone

    def trials(self, indices: range | list[int] | None = None) -> RatingTrials:
        """Trials ``indices`` (default all ``trials``) as one set of ``[R, T, d]`` tensors."""
        scale = self.prepare()
        indices = list(range(self.n_trials) if indices is None else indices)
        targets, train_items, test_items = [], [], []
        for index in indices:
            rng = np.random.default_rng([self.data_seed, index])
            target = int(rng.integers(len(self.qualifying)))
            train, test = self.draw(rng, np.arange(self.histories.shape[1]))
            targets.append(target)
            train_items.append(train)
            test_items.append(test)
        targets_array = np.array(targets)
        train_positions = np.array(train_items).reshape(len(indices), -1)
        test_positions = np.array(test_items).reshape(len(indices), -1)
        train_x, train_y = self._examples(targets_array, train_positions)
        test_x, test_y = self._examples(targets_array, test_positions)
        user_ids = self.table.user_ids[self.qualifying]
        histories = self.table.item_ids[self.histories[targets_array]]  # [R, needed] item ids
        return RatingTrials(
            train_x,
            train_y,
            test_x,
            test_y,
            [str(user_ids[t]) for t in targets],
            user_ids,
            scale.n_ranks,
            np.take_along_axis(histories, train_positions, 1),
            np.take_along_axis(histories, test_positions, 1),
            dict(self.statistics["data"], trials=len(indices), train=train_x.shape[1], test=test_x.shape[1]),
        )

    def _examples(self, targets: np.ndarray, positions: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Features ``[R, n, d]`` and ranks ``[R, n]`` of the targets' history ``positions [R, n]``."""
        items = np.take_along_axis(self.histories[targets], positions, 1)
        x = self.features[items]  # [R, n, d]
        x[np.arange(len(targets)), :, targets] = 0.0  # the target is not its own feature
        if self.normalize == "unit":  # each instance on the unit sphere (an item nobody else rated stays 0)
            norms = np.linalg.norm(x, axis=-1, keepdims=True)
            np.divide(x, norms, out=x, where=norms > 0)
        y = np.take_along_axis(self.history_ranks[targets], positions, 1)
        return torch.from_numpy(x), torch.from_numpy(y)

    # -- the Lightning path: one trial as stream datamodule ------------------------------------------
    @property
    def num_features(self) -> int:
        self.prepare()
        return len(self.qualifying)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        one = self.trials([self.trial])
        train = (one.train_x[0], one.train_y[0])
        # no validation items in either paper, and no test items with n_test=0 (Crammer & Singer): the
        # run then reports the training stream's online figures as "train", never as "val" or "test"
        splits = {"train": train} | ({"test": (one.test_x[0], one.test_y[0])} if one.test_y.shape[1] else {})
        self._finish(
            splits,
            source=f"{self.path}, trial {self.trial} (target user {one.targets[0]})",
            hint="pick another data.trial (data.data_seed draws the targets)",
        )
        log.info("trial %d: target user %s", self.trial, one.targets[0])


class HarringtonRatings(RatingsProtocol):
    """Harrington (2003), section 4.2: users with more than 300 ratings, the target's first 300
    items, 210 random ones for training (streamed in that random order), the other 90 for test."""

    def __init__(self, path: str, *, min_ratings: int = 301, n_items: int = 300, n_train: int = 210, **options):
        if not 0 < n_train < n_items:
            raise ValueError(f"need 0 < n_train < n_items, got {n_train} and {n_items}")
        super().__init__(path, min_ratings=min_ratings, **options)
        self.stream_length, self.test_length = n_train, n_items - n_train

    def draw(self, rng: np.random.Generator, history: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        shuffled = rng.permutation(history)
        return shuffled[: self.stream_length], shuffled[self.stream_length :]


class CrammerSingerRatings(RatingsProtocol):
    """Crammer & Singer (2001), EachMovie: users with at least ``min_ratings`` ratings, the target's
    first ``n_rounds`` ratings fed online in time order; optionally its next ``n_test`` for test."""

    def __init__(self, path: str, *, min_ratings: int = 200, n_rounds: int = 200, n_test: int = 0, **options):
        if n_rounds < 1 or n_test < 0:
            raise ValueError(f"need n_rounds >= 1 and n_test >= 0, got {n_rounds} and {n_test}")
        super().__init__(path, min_ratings=min_ratings, **options)
        self.stream_length, self.test_length = n_rounds, n_test

    def draw(self, rng: np.random.Generator, history: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return history[: self.stream_length], history[self.stream_length :]
