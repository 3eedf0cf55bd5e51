"""Ratings as Yu, Yu & Tresp (2005, section 4) build them for collaborative ordinal regression.

From a ratings file (any form ``datamodules.ratings_io`` reads: MovieLens ``u.data``, ``ratings.dat``,
``ratings.csv``, RecBole's atomic ``.inter`` files with their ``user_id:token ...`` header, ...):

1. items rated fewer than ``min_item_ratings`` times are removed (the paper: 50), then users with
   fewer than ``min_user_ratings`` ratings of the remaining items (the paper: 20). If fewer than
   ``min_items`` items pass the first filter, the ``min_items`` most-rated items are kept instead
   (a warning, and ``statistics["items_rule"]`` says so): an experiment needs its largest training
   set plus test items;
2. the ``n_tasks`` users with most ratings are the *tasks* (the regression functions, "users"), their
   ratings the labels (0-based ranks of the file's grade scale);
3. every other user is a *feature* of the items: the item's vector holds each feature user's rating
   minus that user's mean rating, and an unrated entry is "filled in as the user mean", i.e. 0
   after the subtraction (so the matrix stays sparse);
4. the prior kernel is the correlation kernel (Basilico & Hofmann 2004): the cosine of two item
   vectors. An item no feature user rated has a zero vector; it gets ``k(i, i) = 1`` and 0 to every
   other item (an independent item), counted in ``statistics["items_without_features"]``. A
   feature user whose ratings are all equal (a constant column) is all zeros after centering and
   changes nothing.

The kernel is a Gram matrix of unit vectors, positive semi-definite with unit diagonal; only the
columns a split needs are formed (``kernel(rows, cols)``), never the whole ``[m, m]`` matrix.

Example:
    >>> import tempfile, pathlib
    >>> lines = [f"{u} {i} {1 + (u * i) % 5}" for u in range(8) for i in range(6) if (u + i) % 3]
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "r.txt"; _ = path.write_text("\\n".join(lines))
    >>> data = build_collaborative_ratings(path, n_tasks=3, min_item_ratings=1, min_user_ratings=1, min_items=1)
    >>> data.labels.shape, data.n_ranks, len(data.feature_users)
    ((3, 6), 5, 5)
    >>> k = data.kernel(np.arange(6), np.arange(6)); bool(np.allclose(np.diag(k), 1.0))
    True
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from datamodules.ratings_io import RatingScale, RatingsFormatError, read_ratings, resolve_scale

log = logging.getLogger(__name__)


@dataclass
class CollaborativeRatings:
    """Tasks' labels and the items' feature vectors.

    ``labels [T, m] int64``: task ``t``'s 0-based rank of item ``i``, -1 where not rated;
    ``unit [m, U + e]`` (CSR): unit-length centered feature vectors (``e`` extra one-hot columns for
    the items without features); ``task_users``/``feature_users``/``item_ids`` the file's ids.
    """

    labels: np.ndarray
    unit: sp.csr_matrix
    task_users: np.ndarray
    feature_users: np.ndarray
    item_ids: np.ndarray
    scale: RatingScale
    statistics: dict = field(default_factory=dict)

    @property
    def n_ranks(self) -> int:
        return self.scale.n_ranks

    @property
    def n_items(self) -> int:
        return self.labels.shape[1]

    def kernel(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Correlation kernel ``[len(rows), len(cols)] float64`` between items ``rows`` and ``cols``."""
        product = self.unit[rows] @ self.unit[cols].T
        return np.asarray(product.todense(), dtype=np.float64)


def build_collaborative_ratings(
    path: str | Path,
    *,
    n_tasks: int = 100,
    min_item_ratings: int = 50,
    min_user_ratings: int = 20,
    min_items: int = 500,
    duplicates: str = "last",
    min_rating: float | None = None,
    max_rating: float | None = None,
    rating_step: float | None = None,
) -> CollaborativeRatings:
    """Read ``path`` and build the tasks, labels and item features of section 4 (module docstring).

    Raises :class:`~datamodules.ratings_io.RatingsFormatError` (a ``DataError``) for a malformed
    file (naming the line) and for data that cannot make the experiment: fewer than ``n_tasks + 1``
    users left after the filters, or fewer than two items.
    """
    table = read_ratings(path, duplicates=duplicates)
    scale = resolve_scale(table, min_rating=min_rating, max_rating=max_rating, rating_step=rating_step)
    per_item = np.bincount(table.items, minlength=len(table.item_ids))
    items = np.flatnonzero(per_item >= min_item_ratings)
    items_rule = f"rated >= {min_item_ratings} times"
    if len(items) < min_items:
        items = np.sort(np.argsort(-per_item, kind="stable")[:min_items])
        items = items[per_item[items] > 0]
        passing = int((per_item >= min_item_ratings).sum())
        items_rule = f"the {len(items)} most-rated items (only {passing} rated >= {min_item_ratings} times)"
        log.warning("%s: %s", path, items_rule)
    if len(items) < 2:
        raise RatingsFormatError(f"{path}: {len(items)} items left after the filters; nothing to rank")
    keep = np.isin(table.items, items)
    per_user = np.bincount(table.users[keep], minlength=len(table.user_ids))
    users = np.flatnonzero(per_user >= min_user_ratings)
    if len(users) < n_tasks + 1:
        raise RatingsFormatError(
            f"{path}: {len(users)} users rated {min_user_ratings} or more of the {len(items)} kept items; "
            f"the experiment needs {n_tasks} task users and at least one feature user (lower n_tasks or "
            "min_user_ratings)"
        )
    order = users[np.argsort(-per_user[users], kind="stable")]  # most ratings first, ties by id order
    tasks, features = order[:n_tasks], np.sort(order[n_tasks:])
    item_column = np.full(len(table.item_ids), -1)
    item_column[items] = np.arange(len(items))
    rows = keep & np.isin(table.users, users)
    item_of, user_of, rating_of = item_column[table.items[rows]], table.users[rows], table.ratings[rows]

    task_index = np.full(len(table.user_ids), -1)
    task_index[tasks] = np.arange(n_tasks)
    labels = np.full((n_tasks, len(items)), -1, dtype=np.int64)
    is_task = task_index[user_of] >= 0
    labels[task_index[user_of[is_task]], item_of[is_task]] = scale.ranks(rating_of[is_task])

    feature_index = np.full(len(table.user_ids), -1)
    feature_index[features] = np.arange(len(features))
    f_rows = ~is_task
    f_user = feature_index[user_of[f_rows]]
    f_rating = rating_of[f_rows]
    means = np.bincount(f_user, weights=f_rating, minlength=len(features)) / np.maximum(
        np.bincount(f_user, minlength=len(features)), 1
    )
    centered = sp.csr_matrix((f_rating - means[f_user], (item_of[f_rows], f_user)), shape=(len(items), len(features)))
    centered.eliminate_zeros()  # a constant feature user's column is all zeros now
    norms = np.sqrt(np.asarray(centered.multiply(centered).sum(1)).ravel())
    empty = np.flatnonzero(norms <= 1e-12)
    unit = sp.diags(np.where(norms > 1e-12, 1.0 / np.maximum(norms, 1e-300), 0.0)) @ centered
    # an item without features: its own one-hot column, so k(i, i) = 1 and k(i, j) = 0
    extra = sp.csr_matrix((np.ones(len(empty)), (empty, np.arange(len(empty)))), shape=(len(items), len(empty)))
    unit = sp.hstack([unit, extra], format="csr")
    statistics = {
        **table.statistics,
        "scale": {"min": scale.minimum, "max": scale.maximum, "step": scale.step, "n_ranks": scale.n_ranks},
        "items": len(items),
        "items_rule": items_rule,
        "users_kept": len(users),
        "tasks": n_tasks,
        "feature_users": len(features),
        "task_label_density": float((labels >= 0).mean()),
        "items_without_features": len(empty),
        "constant_feature_users": int(len(features) - len(np.unique(centered.nonzero()[1]))),
    }
    log.info("%s: %s", path, {k: v for k, v in statistics.items() if k != "header"})
    return CollaborativeRatings(
        labels,
        unit,
        table.user_ids[tasks],
        table.user_ids[features],
        table.item_ids[items],
        scale,
        statistics,
    )
