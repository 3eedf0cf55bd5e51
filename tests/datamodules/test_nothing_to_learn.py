"""A run with nothing to learn from is refused where the data comes in, naming the file: never an
index error from inside a learner, never exit 0 after learning nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from datamodules.letor import LetorDataModule
from datamodules.letor_io import LetorFormatError
from datamodules.ordinal import RatingsDataModule, refuse_nothing_to_learn
from datamodules.ratings import HarringtonRatings
from datamodules.ratings_io import RatingsFormatError
from tests.conftest import ROOT


def _letor(tmp_path, name: str, rows: list[str]) -> str:
    path = tmp_path / name
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def test_constant_features_are_refused_naming_the_file(tmp_path):
    rows = [f"{(q + d) % 3} qid:{q} 1:0.5 2:1 3:0" for q in range(6) for d in range(4)]
    path = _letor(tmp_path, "train.txt", rows)
    with pytest.raises(LetorFormatError, match=r"train.txt: no feature varies: all 3 features are constant"):
        LetorDataModule(path, val_fraction=0).setup()


def test_a_file_without_a_preference_is_refused(tmp_path):
    rows = [f"{q % 3} qid:{q} 1:{d} 2:{q}" for q in range(6) for d in range(4)]  # one label per query
    path = _letor(tmp_path, "train.txt", rows)
    with pytest.raises(LetorFormatError, match=r"train.txt: no query has two documents with different labels"):
        LetorDataModule(path, val_fraction=0).setup()


def test_one_varying_feature_and_one_preference_are_enough(tmp_path):
    rows = ["1 qid:1 1:0.5 2:3", "0 qid:1 1:0.5 2:4", "0 qid:2 1:0.5 2:4"]
    data = LetorDataModule(_letor(tmp_path, "train.txt", rows), val_fraction=0)
    data.setup()
    assert data.statistics["train"]["queries"] == 2


def test_ratings_where_no_two_users_share_an_item_are_refused(tmp_path):
    path = tmp_path / "disjoint.tsv"
    path.write_text("".join(f"{u}\t{u * 1000 + i}\t{(i * 7 + u) % 5 + 1}\n" for u in range(4) for i in range(40)))
    protocol = HarringtonRatings(str(path), min_ratings=30, n_items=30, n_train=20, trials=2)
    with pytest.raises(RatingsFormatError, match=r"disjoint.tsv: no qualifying user .* shares an item") as error:
        protocol.trials()
    assert "data.min_ratings" in str(error.value)


@pytest.mark.parametrize(
    "overrides",
    [
        ["model=rankboost", "data=letor"],  # issue 33, case 1: was an IndexError inside RankBoost
        ["model=lambdarank", "data=letor"],
    ],
)
def test_train_py_ends_with_one_line_that_says_what_and_where(tmp_path, overrides):
    rows = [f"{(q + d) % 3} qid:{q} 1:0.5 2:1" for q in range(8) for d in range(4)]
    train = _letor(tmp_path, "constant.txt", rows)
    done = subprocess.run(
        [sys.executable, "train.py", *overrides, f"data.train={train}", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, in the order a terminal shows it
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    assert f"{train}: no feature varies" in done.stdout.strip().splitlines()[-1] and "Traceback" not in done.stdout


def test_a_target_user_sharing_no_item_with_anyone_is_refused(tmp_path):
    path = tmp_path / "ratings.tsv"
    rows = [f"{u}\t{u * 1000 + i}\t{i % 5 + 1}\n" for u in range(3) for i in range(30)]
    path.write_text("".join(rows))
    with pytest.raises(RatingsFormatError, match=r"ratings.tsv, target user 0: no feature varies .* \(0 features\)"):
        RatingsDataModule(str(path)).setup()


@pytest.mark.parametrize(
    ("features", "ranks", "problem"),
    [
        (torch.zeros(0, 3), torch.zeros(0, dtype=torch.long), "no training example"),
        (torch.ones(5, 3), torch.arange(5), "no feature varies over the 5 training examples"),
        (torch.randn(5, 3), torch.full((5,), 2), "all 5 training examples have the same rank"),
    ],
)
def test_an_ordinal_stream_with_nothing_to_learn_is_refused(features, ranks, problem):
    with pytest.raises(RatingsFormatError, match=rf"^src: {problem}.*nothing to learn from; try this$"):
        refuse_nothing_to_learn(features, ranks, source="src", hint="try this")
    refuse_nothing_to_learn(torch.eye(2), torch.arange(2), source="src")  # enough: no error
