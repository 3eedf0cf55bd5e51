"""The papers' collaborative-filtering protocols on a ratings file written here, against a direct construction."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datamodules.ratings import CrammerSingerRatings, HarringtonRatings
from datamodules.ratings_io import RatingsFormatError, write_ratings
from datamodules.synthetic_ratings import movielens_like

ITEMS = [f"m{i}" for i in range(20)]
# ratings per user: a-d qualify for "more than 10"; e has exactly 10 (not more); f has 3
PER_USER = {"a": 14, "b": 20, "c": 12, "d": 11, "e": 10, "f": 3}


def _write(path, seed: int = 0) -> dict[tuple[str, str], tuple[int, int]]:
    """A shuffled ``user,item,rating,timestamp`` file with a header; returns {(user, item): (stars, time)}."""
    rng = np.random.default_rng(seed)
    truth = {}
    for user, count in PER_USER.items():
        for item in rng.choice(ITEMS, size=count, replace=False):
            truth[user, str(item)] = (int(rng.integers(1, 6)), int(rng.integers(10**9, 2 * 10**9)))
    lines = [f"{u},{i},{stars},{time}" for (u, i), (stars, time) in truth.items()]
    order = rng.permutation(len(lines))  # file order is not time order
    path.write_text("userId,movieId,rating,timestamp\n" + "\n".join(lines[j] for j in order) + "\n")
    return truth


def _first_by_time(truth, user: str, count: int) -> list[str]:
    rated = sorted((time, item) for (u, item), (_stars, time) in truth.items() if u == user)
    return [item for _time, item in rated[:count]]


def _direct_features(truth, feature_users, target: str, item: str) -> list[float]:
    """The paper's instance written out: each other user's stars scaled to [-0.5, 0.5], 0 if unseen."""
    return [
        (truth[user, item][0] - 1) / 4 - 0.5 if user != target and (user, item) in truth else 0.0
        for user in feature_users
    ]


@pytest.fixture
def ratings_file(tmp_path):
    path = tmp_path / "ratings.csv"
    return path, _write(path)


def test_harrington_protocol_matches_a_direct_construction(ratings_file):
    path, truth = ratings_file
    protocol = HarringtonRatings(
        str(path), min_ratings=11, n_items=10, n_train=7, trials=30, data_seed=3, normalize="none"
    )
    trials = protocol.trials()
    # users with more than 10 ratings: a, b, c, d (e has exactly 10, f 3); d = 4 feature columns
    assert list(trials.feature_users) == ["a", "b", "c", "d"]
    assert protocol.statistics["data"]["qualifying_users"] == 4
    assert trials.train_x.shape == (30, 7, 4) and trials.test_x.shape == (30, 3, 4)
    assert trials.train_y.shape == (30, 7) and trials.test_y.shape == (30, 3) and trials.n_ranks == 5
    assert set(trials.targets) == {"a", "b", "c", "d"}
    for r, target in enumerate(trials.targets):
        train, test = list(trials.train_items[r]), list(trials.test_items[r])
        # the target's first 10 items by timestamp, split 7 / 3 without overlap
        assert sorted(train + test) == sorted(_first_by_time(truth, target, 10))
        for items, x, y in ((train, trials.train_x[r], trials.train_y[r]), (test, trials.test_x[r], trials.test_y[r])):
            assert y.tolist() == [truth[target, item][0] - 1 for item in items]
            expected = torch.tensor([_direct_features(truth, trials.feature_users, target, item) for item in items])
            torch.testing.assert_close(x, expected)
    # the training stream is in the random order of the split, not in time order
    assert any(
        list(t) != sorted(t, key=lambda item: truth[tg, item][1]) for tg, t in zip(trials.targets, trials.train_items)
    )


def test_unit_normalization_scales_each_instance(ratings_file):
    path, _truth = ratings_file
    options = dict(min_ratings=11, n_items=10, n_train=7, trials=10, data_seed=3)
    raw = HarringtonRatings(str(path), normalize="none", **options).trials()
    unit = HarringtonRatings(str(path), **options).trials()
    norms = raw.train_x.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(unit.train_x, torch.where(norms > 0, raw.train_x / norms, 0.0))
    assert ((unit.train_x.norm(dim=-1) - 1).abs() < 1e-5).sum() == (norms > 0).sum()


def test_trials_are_reproducible_independent_and_seeded(ratings_file):
    path, _truth = ratings_file
    options = dict(min_ratings=11, n_items=10, n_train=7)
    every = HarringtonRatings(str(path), trials=12, data_seed=5, **options).trials()
    again = HarringtonRatings(str(path), trials=12, data_seed=5, **options).trials()
    torch.testing.assert_close(every.train_x, again.train_x)
    assert every.targets == again.targets
    # trial 7 is the same drawn alone, or among more trials: it depends on (seed, 7) only
    alone = HarringtonRatings(str(path), trials=40, data_seed=5, **options).trials([7])
    torch.testing.assert_close(alone.train_x[0], every.train_x[7])
    assert alone.targets == [every.targets[7]]
    other = HarringtonRatings(str(path), trials=12, data_seed=6, **options).trials()
    assert other.targets != every.targets or not torch.equal(other.train_y, every.train_y)
    # trials of the same target still differ in their split
    by_target = {}
    for r, target in enumerate(every.targets):
        by_target.setdefault(target, []).append(tuple(every.train_items[r]))
    assert any(len(set(splits)) > 1 for splits in by_target.values() if len(splits) > 1)


def test_crammer_singer_protocol_streams_the_first_ratings_in_time_order(ratings_file):
    path, truth = ratings_file
    protocol = CrammerSingerRatings(str(path), min_ratings=10, n_rounds=8, n_test=2, trials=20, normalize="none")
    trials = protocol.trials()
    # "at least" 10 ratings: e qualifies here
    assert list(trials.feature_users) == ["a", "b", "c", "d", "e"]
    assert trials.train_x.shape == (20, 8, 5) and trials.test_x.shape == (20, 2, 5)
    for r, target in enumerate(trials.targets):
        first = _first_by_time(truth, target, 10)
        assert list(trials.train_items[r]) == first[:8] and list(trials.test_items[r]) == first[8:]
        expected = torch.tensor([_direct_features(truth, trials.feature_users, target, item) for item in first[:8]])
        torch.testing.assert_close(trials.train_x[r], expected)


def test_a_trial_under_train_py_is_a_stream_datamodule(ratings_file):
    path, _truth = ratings_file
    protocol = HarringtonRatings(str(path), min_ratings=11, n_items=10, n_train=7, trial=2, batch_size=4)
    protocol.setup()
    assert protocol.model_inputs()["n_features"] == 4
    batches = list(protocol.train_dataloader())
    assert [len(b["labels"]) for b in batches] == [4, 3] and batches[0]["features"].shape == (4, 4)
    one = protocol.trials([2])
    torch.testing.assert_close(torch.cat([b["features"] for b in batches]), one.train_x[0])
    assert len(protocol.splits["test"][1]) == 3


def test_half_star_files_get_ten_ranks(tmp_path):
    table_path = tmp_path / "half.tsv"
    write_ratings(movielens_like(n_users=80, n_items=300, n_ratings=8000, half_stars=True, seed=1), table_path)
    protocol = HarringtonRatings(str(table_path), min_ratings=101, n_items=100, n_train=70, trials=3, normalize="none")
    trials = protocol.trials()
    assert trials.n_ranks == 10 and protocol.scale.step == 0.5 and protocol.scale.minimum == 0.5
    allowed = np.concatenate([[0.0], (np.arange(0.5, 5.01, 0.5) - 0.5) / 4.5 - 0.5])
    values = np.unique(trials.train_x.numpy())
    assert np.abs(values[:, None] - allowed[None, :]).min(1).max() < 1e-6
    assert len(values) > 8  # half-star grades do occur as features
    assert set(trials.train_y.unique().tolist()) <= set(range(10))


def test_too_few_qualifying_users_is_a_clear_error(ratings_file):
    path, _truth = ratings_file
    with pytest.raises(RatingsFormatError, match="1 users rated 20 items or more"):
        HarringtonRatings(str(path), min_ratings=20, n_items=10, n_train=7).trials()
    with pytest.raises(ValueError, match="min_ratings=5 is below the 10 items"):
        HarringtonRatings(str(path), min_ratings=5, n_items=10, n_train=7).trials()


def test_generator_is_movielens_like_and_seeded():
    table = movielens_like(seed=0)
    again = movielens_like(seed=0)
    np.testing.assert_array_equal(table.ratings, again.ratings)
    per_user = np.bincount(table.users)
    assert 95_000 <= len(table) <= 100_000 and per_user.min() >= 20 and per_user.max() > 300
    shares = np.bincount(table.ratings.astype(int))[1:] / len(table)
    np.testing.assert_allclose(shares, [0.061, 0.114, 0.271, 0.342, 0.212], atol=0.01)
    popularity = np.sort(np.bincount(table.items))[::-1]
    assert popularity[:10].sum() > 20 * popularity[-500:].sum() / 50  # skewed: head items far above the tail
    # planted similarity: users of one taste group agree more than users of different groups
    groups = table.statistics["groups"]
    dense = np.full((per_user.size, table.item_ids.size), np.nan)
    dense[table.users, table.items] = table.ratings
    heavy = np.flatnonzero(per_user > 250)
    same, different = [], []
    for i in heavy:
        for j in heavy:
            both = ~np.isnan(dense[i]) & ~np.isnan(dense[j])
            if i < j and both.sum() > 30:
                c = np.corrcoef(dense[i, both], dense[j, both])[0, 1]
                (same if groups[i] == groups[j] else different).append(c)
    assert np.mean(same) > np.mean(different) + 0.2


def test_ratings_datamodule_counts_a_repeated_rating_once(tmp_path):
    # issue 9: on the old reader the target's second rating of item 1 was an extra example with another label
    from datamodules.ordinal import RatingsDataModule

    path = tmp_path / "ratings.txt"
    lines = [f"7 {item} {1 + item % 5}\n1 {item} {1 + item % 5}\n" for item in range(20)]
    path.write_text("".join(lines) + "7 1 5\n")
    datamodule = RatingsDataModule(str(path), target_user=7)
    datamodule.setup()
    assert sum(len(y) for _x, y in datamodule.splits.values()) == 20
    assert datamodule.statistics["data"]["duplicates_dropped"] == 1
    with pytest.raises(RatingsFormatError, match=r"ratings.txt:41: user '7' rated item '1' again \(first on line 3\)"):
        RatingsDataModule(str(path), target_user=7, duplicates="error").setup()
