"""The online ordinal rankers under train.py: every algorithm, LETOR data, ratings, export, Table 1."""

from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from datamodules.letor_io import read_letor
from datamodules.ordinal import HARRINGTON_CUTS, RatingsDataModule, RatingsFormatError, harrington_synthetic
from rankers.perceptron.module import OnlineOrdinalModule
from rankers.pipeline import train
from tests.ratings_files import ratings_file

STREAM = [
    "data=ordinal_synthetic",
    "data.n_train=3000",
    "data.n_val=300",
    "data.n_test=500",
    "data.batch_size=500",
    "trainer.log_every_n_steps=1",
    "callbacks.progress_bar.refresh_rate=0",
]
ALGORITHMS = ["prank", "prank_vp", "oap_bpm", "oap_bagg", "oap_vp", "widrow_hoff"]


def _scalar_tags(run_dir) -> set[str]:
    tags: set[str] = set()
    for events in (run_dir / "tensorboard").glob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        tags |= set(accumulator.Tags()["scalars"])
    return tags


def _majority_rank_loss(labels: torch.Tensor) -> float:
    """Rank loss of always predicting the median rank: the best constant predictor."""
    return float((labels - labels.median()).abs().float().mean())


def test_synthetic_labels_follow_section_4_1():
    x, y = harrington_synthetic(20000, torch.Generator().manual_seed(0), noise=0.0)
    value = 10 * (x[:, 0] - 0.5) * (x[:, 1] - 0.5)
    # without noise, y is the number of cut points c_2..c_5 the value exceeds
    expected = sum((value > cut).long() for cut in HARRINGTON_CUTS)
    assert torch.equal(y, expected)
    assert set(y.tolist()) == {0, 1, 2, 3, 4}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_trains_from_the_config(make_cfg, tmp_path, algorithm):
    extra = ["model.n_perceptrons=10"] if algorithm.startswith("oap") else []
    cfg = make_cfg(f"model={algorithm}", *STREAM, *extra, out=tmp_path / "run", tiny=False)
    results = train(cfg)
    datamodule = instantiate(cfg.data)
    datamodule.setup()
    floor = _majority_rank_loss(datamodule.splits["test"][1])
    assert 0 <= results["test"]["rank_loss"] < floor - 0.2, (results["test"], floor)
    tags = _scalar_tags(tmp_path / "run")
    assert {"train/online_rank_loss", "val/rank_loss"} <= tags
    assert (tmp_path / "run" / "export" / "scorer.pt").exists()


def test_online_loss_curve_is_logged_per_step(make_cfg, tmp_path):
    cfg = make_cfg("model=oap_bpm", "model.n_perceptrons=10", *STREAM, out=tmp_path / "run", tiny=False)
    train(cfg)
    curve = []
    for events in (tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        if "train/online_rank_loss" in accumulator.Tags()["scalars"]:
            curve += [(event.step, event.value) for event in accumulator.Scalars("train/online_rank_loss")]
    # 3000 examples in batches of 500: one point per batch, the cumulative average falling overall
    assert len(curve) == 6
    assert curve[-1][1] < curve[0][1]


def test_grader_and_checkpoint_reproduce_the_trained_model(make_cfg, tmp_path):
    cfg = make_cfg("model=oap_bpm", "model.n_perceptrons=10", *STREAM, out=tmp_path / "run", tiny=False)
    results = train(cfg)
    datamodule = instantiate(cfg.data)
    datamodule.setup()
    test_x, test_y = datamodule.splits["test"]

    restored = OnlineOrdinalModule.load_from_checkpoint(results["best_checkpoint"])
    predicted = restored.predict_ranks(test_x)
    assert float((predicted - test_y).abs().float().mean()) == pytest.approx(results["test"]["rank_loss"], abs=1e-6)

    grader = torch.jit.load(str(tmp_path / "run" / "export" / "grader.pt"))
    assert torch.equal(grader(test_x), predicted)
    scorer = torch.jit.load(str(tmp_path / "run" / "export" / "scorer.pt"))
    torch.testing.assert_close(scorer(test_x), restored.scores(test_x), atol=1e-5, rtol=0)


def test_oap_bpm_ranks_letor_queries(make_cfg, tmp_path):
    cfg = make_cfg(
        "model=oap_bpm",
        "model.n_perceptrons=20",
        "model.epochs=2",
        "data.normalization=zscore",
        "data.n_train_queries=300",
        "data.n_val_queries=30",
        "data.n_test_queries=60",
        "data.mean_docs=12",
        "data.num_features=8",
        "callbacks.progress_bar.refresh_rate=0",
        out=tmp_path / "run",
        tiny=False,
    )
    results = train(cfg)
    assert results["epochs"] == 2
    assert {"ndcg@10", "map", "rank_loss"} <= set(results["test"])
    assert results["test"]["ndcg@10"] > results["test_random_scores"]["ndcg@10"] + 0.1


def _write_ratings(path, n_items: int = 60, seed: int = 0) -> None:
    """User 7 copies user 1's ratings; user 2 rates at random; user 3 rated only some items."""
    generator = torch.Generator().manual_seed(seed)
    lines = ["# user item rating"]
    for item in range(n_items):
        base = int(torch.randint(1, 6, (1,), generator=generator))
        lines += [
            f"1 {item} {base}",
            f"7,{item},{base}",
            f"2 {item} {int(torch.randint(1, 6, (1,), generator=generator))}",
        ]
        if item % 3 == 0:
            lines.append(f"3 {item} 5")
    path.write_text("\n".join(lines) + "\n")


def test_ratings_datamodule_builds_the_collaborative_filtering_task(tmp_path):
    path = tmp_path / "ratings.txt"
    _write_ratings(path)
    datamodule = RatingsDataModule(str(path), target_user=7, data_seed=1)
    datamodule.setup()
    sizes = {name: len(y) for name, (_x, y) in datamodule.splits.items()}
    assert sizes == {"val": 6, "test": 12, "train": 42}
    x = torch.cat([datamodule.splits[name][0] for name in ("train", "val", "test")])
    y = torch.cat([datamodule.splits[name][1] for name in ("train", "val", "test")])
    assert x.shape == (60, 3)  # users 1, 2, 3 are the features
    # label = target's rating - 1; feature of user 1 = its rating (1..5), user 3's unseen items are 0
    assert torch.equal(x[:, 0].long() - 1, y)
    assert set(x[:, 2].tolist()) == {0.0, 5.0}


def test_online_ranker_learns_a_copied_user(make_cfg, tmp_path):
    path = tmp_path / "ratings.txt"
    _write_ratings(path, n_items=400)
    cfg = make_cfg(
        "model=oap_bpm",
        "model.n_perceptrons=10",
        "model.epochs=10",
        "data=ratings",
        f"data.path={path}",
        "data.target_user=7",
        "callbacks.progress_bar.refresh_rate=0",
        out=tmp_path / "run",
        tiny=False,
    )
    results = train(cfg)
    assert results["test"]["rank_loss"] < 0.1  # separable: the target copies user 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1 2 3\n1 2\n", r"ratings.txt:2: expected 'user item rating \[timestamp\]'"),
        ("1 2 3\n\n1 2 x\n", "ratings.txt:3: rating 'x' is not a number"),
        ("1 2 3.5\n", "ratings.txt:1: rating 3.5 is not a grade of the scale 1..5 in steps of 1"),
        ("# only a comment\n", "ratings.txt: no ratings"),
    ],
)
def test_bad_ratings_files_name_the_line(tmp_path, text, message):
    path = tmp_path / "ratings.txt"
    path.write_text(text)
    with pytest.raises(RatingsFormatError, match=message):
        RatingsDataModule(str(path)).setup()


def test_out_of_scale_ratings_are_an_error(tmp_path):
    path = tmp_path / "ratings.txt"
    path.write_text("1 1 3\n1 2 4\n1 3 9\n2 1 1\n")
    with pytest.raises(RatingsFormatError, match=r"ratings.txt:3: rating 9 outside \[1, 5\]"):
        RatingsDataModule(str(path)).setup()


@pytest.mark.parametrize("model", ["prank"])
def test_exported_grader_reproduces_the_test_rank_loss(make_cfg, tmp_path, model):
    """Training, evaluation and export all normalize one query at a time (query_zscore)."""
    cfg = make_cfg(
        f"model={model}",
        *(["model.n_perceptrons=8"] if model == "oap_bpm" else []),
        "data.normalization=query_zscore",
        "data.n_train_queries=200",
        "data.n_val_queries=30",
        "data.n_test_queries=40",
        "data.mean_docs=12",
        "data.num_features=8",
        "callbacks.progress_bar.refresh_rate=0",
        out=tmp_path / "run",
        tiny=False,
    )
    results = train(cfg)
    datamodule = instantiate(cfg.data)
    test = read_letor(datamodule.paths["test"])
    grader = torch.jit.load(str(tmp_path / "run" / "export" / "grader.pt"))
    errors = [
        (grader(torch.from_numpy(test.features[a:b])) - torch.from_numpy(test.labels[a:b])).abs().sum()
        for a, b in zip(test.offsets[:-1], test.offsets[1:])
    ]
    assert float(sum(errors)) / len(test.labels) == pytest.approx(results["test"]["rank_loss"], abs=1e-6)


@pytest.mark.parametrize("world_size", [1, 2])
def test_sequential_learners_refuse_ddp_by_name(world_size):
    from types import SimpleNamespace

    from rankers.neural.module import PassLimit

    module = SimpleNamespace(trainer=SimpleNamespace(world_size=world_size))
    if world_size == 1:
        PassLimit.refuse_ddp(module, "the online rankers stream the examples")
    else:
        with pytest.raises(ValueError, match=r"stream the examples in order in one process.*2 processes"):
            PassLimit.refuse_ddp(module, "the online rankers stream the examples")


def test_one_trial_trains_under_train_py(make_cfg, tmp_path):
    cfg = make_cfg(
        "model=oap_bpm",
        "model.n_perceptrons=10",
        "data=ratings_harrington",
        f"data.path={ratings_file(tmp_path, seed=6)}",
        "data.trial=2",
        "callbacks.progress_bar.refresh_rate=0",
        out=tmp_path / "run",
        tiny=False,
    )
    results = train(cfg)
    assert results["data"]["train"]["examples"] == 210 and results["data"]["test"]["examples"] == 90
    assert 0 < results["test"]["rank_loss"] < 1.2
    assert (tmp_path / "run" / "export" / "scorer.pt").exists()
