"""Small MovieLens-like ratings files for the ratings protocols' tests (experiments and train.py runs)."""

from __future__ import annotations

from pathlib import Path

from datamodules.ratings_io import write_ratings
from datamodules.synthetic_ratings import movielens_like

# ~25 users with more than 300 ratings: enough for Harrington's protocol, small enough to read fast
SMALL = dict(n_users=300, n_items=1000, n_ratings=45_000)


def ratings_file(folder: Path, **generator) -> str:
    """Write ``movielens_like(**SMALL, **generator)`` to ``folder/ratings.tsv``; returns its path."""
    path = folder / "ratings.tsv"
    write_ratings(movielens_like(**{**SMALL, **generator}), path)
    return str(path)
