"""Seeded MovieLens-like ratings with planted user similarity, for the collaborative-filtering protocols.

What makes it MovieLens-like (the defaults are ml-100k's sizes: 943 users, 1682 items, 100,000
ratings): heavy-tailed user activity (log-normal, at least ``min_per_user`` ratings each, a few users
with several hundred), Zipf-skewed item popularity (users pick items in proportion to popularity),
so the matrix is ~6% dense; user and item biases (popular items rated a little higher); 1-5 stars
with MovieLens' shares (about 6/11/27/34/22%), or ml-latest's half stars 0.5-5 (``half_stars``);
timestamps per user.

The planted similarity: users belong to ``n_clusters`` taste groups. A user's taste vector is its
group's centroid plus individual noise, an item has a latent vector, and the rating is
``mu + b_user + b_item + taste . item + noise``, cut into stars at the quantiles of the shares. Users
of one group rate alike, so another user's ratings predict the target's: the signal the perceptrons
of Harrington's section 4.2 learn to weigh.
"""

from __future__ import annotations

import numpy as np

from datamodules.ratings_io import RatingsTable

# share of ratings at 1, 2, 3, 4, 5 stars in MovieLens 100k
STAR_SHARES = (0.061, 0.114, 0.271, 0.342, 0.212)
# share of ratings at 0.5, 1, ..., 5 stars in MovieLens "latest" (half stars)
HALF_STAR_SHARES = (0.014, 0.028, 0.018, 0.075, 0.055, 0.199, 0.130, 0.266, 0.085, 0.130)


def movielens_like(
    *,
    n_users: int = 943,
    n_items: int = 1682,
    n_ratings: int = 100_000,
    n_clusters: int = 6,
    latent_dim: int = 8,
    taste_spread: float = 0.5,
    noise: float = 0.8,
    user_bias: float = 0.35,
    item_bias: float = 0.45,
    popularity_exponent: float = 1.0,
    activity_sigma: float = 1.0,
    min_per_user: int = 20,
    half_stars: bool = False,
    seed: int = 0,
) -> RatingsTable:
    """A seeded ratings table (rows grouped by user, in each user's time order; ids ``"1".."n"``).

    ``taste_spread`` is the individual deviation from the group centroid (relative to the centroid
    spread of 1): small means strongly planted similarity. ``noise`` is the per-rating noise, in the
    same units as the taste signal (whose standard deviation is about 1).
    """
    rng = np.random.default_rng(seed)
    counts = _activity(rng, n_users, n_items, n_ratings, activity_sigma, min_per_user)
    popularity = 1.0 / np.arange(1, n_items + 1) ** popularity_exponent
    popularity = popularity[rng.permutation(n_items)]
    users, items = _pick_items(rng, counts, np.log(popularity))

    groups = rng.integers(n_clusters, size=n_users)
    centroids = rng.normal(size=(n_clusters, latent_dim))
    tastes = centroids[groups] + taste_spread * rng.normal(size=(n_users, latent_dim))
    factors = rng.normal(size=(n_items, latent_dim)) / np.sqrt(latent_dim)
    log_pop = np.log(popularity)
    item_offsets = item_bias * (rng.normal(size=n_items) + (log_pop - log_pop.mean()) / log_pop.std()) / np.sqrt(2)
    signal = np.einsum("nd,nd->n", tastes[users], factors[items])
    signal /= signal.std()
    value = signal + user_bias * rng.normal(size=n_users)[users] + item_offsets[items]
    value += noise * rng.normal(size=len(value))
    shares = np.array(HALF_STAR_SHARES if half_stars else STAR_SHARES)
    cuts = np.quantile(value, np.cumsum(shares / shares.sum())[:-1])
    grade = np.searchsorted(cuts, value).astype(np.float64)
    stars = 0.5 + 0.5 * grade if half_stars else 1.0 + grade

    # each user's ratings at increasing times from a random start (seconds, like MovieLens)
    start = rng.integers(874_724_710, 893_286_638, size=n_users)
    steps = rng.exponential(3600.0, size=len(users)).cumsum()
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    timestamps = np.floor(start[users] + steps - (steps[first] - 1)[users])
    ids = np.array([str(i) for i in range(1, max(n_users, n_items) + 1)], dtype=object)
    return RatingsTable(
        users=users,
        items=items,
        ratings=stars,
        timestamps=timestamps,
        lines=np.arange(1, len(users) + 1),
        user_ids=ids[:n_users],
        item_ids=ids[:n_items],
        path=f"<movielens_like seed={seed}>",
        statistics={"groups": groups},
    )


def _activity(
    rng: np.random.Generator, n_users: int, n_items: int, n_ratings: int, sigma: float, minimum: int
) -> np.ndarray:
    """Ratings per user: log-normal, at least ``minimum``, at most 60% of the items, summing to ~n_ratings."""
    raw = rng.lognormal(0.0, sigma, size=n_users)
    spare = max(n_ratings - minimum * n_users, 0)
    counts = minimum + np.floor(raw / raw.sum() * spare).astype(np.int64)
    return np.minimum(counts, int(0.6 * n_items))


def _pick_items(rng: np.random.Generator, counts: np.ndarray, log_weights: np.ndarray) -> tuple[np.ndarray, ...]:
    """For each user, ``counts[u]`` distinct items drawn in proportion to ``exp(log_weights)``
    (Gumbel top-k, without replacement), in random order. Returns ``(users, items)`` ``[n]``."""
    users, items = [], []
    for user, count in enumerate(counts):
        keys = log_weights + rng.gumbel(size=len(log_weights))
        # argpartition's order within the chosen set depends on numpy's build and the CPU's SIMD
        # (it differed between two machines); sorting makes the data a function of the seed alone
        chosen = np.sort(np.argpartition(-keys, count - 1)[:count])
        users.append(np.full(count, user))
        items.append(rng.permutation(chosen))
    return np.concatenate(users).astype(np.int64), np.concatenate(items).astype(np.int64)
