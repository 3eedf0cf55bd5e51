"""The learner harness: whole splits from every loader kind, the single-process check, checkpoints
that name their run, resume, and an interrupted fit that goes on exactly where it stopped."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from datamodules.batching import DeviceBatches, QueryBatchSampler, QueryDataset, make_collate
from rankers import harness
from rankers.boosting.module import RankBoostModule
from rankers.learner import LabelSplit, QuerySplit
from rankers.pipeline import train
from rankers.run_identity import RunConflict, run_config, run_identity

DATA = [
    "data=synthetic",
    "data.n_train_queries=30",
    "data.n_val_queries=10",
    "data.n_test_queries=10",
    "data.mean_docs=8",
    "data.num_features=4",
    "callbacks.progress_bar.refresh_rate=0",
]


def _split(seed: int = 0, n_queries: int = 12, n_features: int = 4) -> QuerySplit:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 9, (n_queries,), generator=g)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    features = torch.randn(int(offsets[-1]), n_features, generator=g)
    labels = torch.randint(0, 3, (int(offsets[-1]),), generator=g).float()
    return QuerySplit(features, labels, offsets)


def test_every_loader_kind_gives_the_same_whole_split():
    split = _split()
    sampler = QueryBatchSampler(split.offsets.diff().numpy(), 5, shuffle=True, bucket=True, seed=1, with_seeds=True)
    loader = torch.utils.data.DataLoader(
        QueryDataset(split.features, split.labels, split.offsets), batch_sampler=sampler, collate_fn=make_collate(3, 1)
    )
    device_batches = DeviceBatches(split.features, split.labels, split.offsets, sampler, 3, lambda: 0)
    for collected in (harness.collect_split(loader), harness.collect_split(device_batches)):
        # never the list-sampled training batches (max_list_length=3): every document, in file order
        assert torch.equal(collected.features, split.features) and torch.equal(collected.offsets, split.offsets)
        assert not collected.stream
    # iterated padded batches (a loader without a dataset of queries): the queries in batch order
    batches = [split.padded(slice(0, 5)), split.padded(slice(5, 12))]
    iterated = harness.collect_split(batches)
    assert torch.equal(iterated.features, split.features) and torch.equal(iterated.labels, split.labels)
    # an ordinal stream is one query in stream order; multilabel batches a LabelSplit
    stream = harness.collect_split([{"features": torch.ones(3, 2), "labels": torch.tensor([0, 1, 2])}] * 2)
    assert stream.stream and stream.n_queries == 1 and len(stream.labels) == 6
    labels = harness.collect_split([{"features": torch.ones(4, 2), "labels": torch.eye(4)[:, :3]}])
    assert isinstance(labels, LabelSplit) and labels.labels.shape == (4, 3)


def test_the_padded_split_holds_each_query_in_its_row():
    split = _split()
    batch = split.padded()
    for q in range(split.n_queries):
        a, b = int(split.offsets[q]), int(split.offsets[q + 1])
        assert torch.equal(batch["features"][q, : b - a], split.features[a:b])
        assert int(batch["mask"][q].sum()) == b - a


@pytest.mark.parametrize("model", ["gp_preference", "random_forest", "rankboost", "oap_bpm"])
def test_a_distributed_trainer_is_refused_for_every_learner(make_cfg, model):
    with pytest.raises(ValueError, match="fits in one process"):
        train(make_cfg(f"model={model}", *DATA, "trainer.devices=2", tiny=False))


class _StopAfter:
    """A FitLog that asks the learner to stop after ``chunks`` safe points (a signal, in a test)."""

    def __init__(self, chunks: int) -> None:
        self.left = chunks
        self.scalars: list[tuple[str, float, int]] = []

    def scalar(self, name: str, value: float, step: int) -> None:
        self.scalars.append((name, value, step))
        if name == "train/rounds":
            self.left -= 1

    def should_stop(self) -> bool:
        return self.left <= 0


def test_an_interrupted_fit_resumed_from_its_checkpoint_equals_an_uninterrupted_one(tmp_path):
    train_split, val_split = _split(0, 30), _split(1, 10)
    options = dict(n_features=4, rounds=20, rounds_per_epoch=5, patience=None)
    whole = RankBoostModule(**options)
    whole.fit(train_split, val_split, log=_StopAfter(10**6))
    first = RankBoostModule(**options)
    first.fit(train_split, val_split, log=_StopAfter(1))
    assert int(first.n_rounds) == 5
    cfg = OmegaConf.create({"model": {"_target_": "rankboost", "rounds": 5}, "data": {"train": "a"}})
    path = tmp_path / "checkpoints" / "last.ckpt"
    harness.save_checkpoint(path, first, run_identity(cfg), epoch=1, run_config=run_config(cfg))
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]  # written atomically: no tmp left
    resumed = RankBoostModule.load_from_checkpoint(str(path))
    assert int(resumed.n_rounds) == 5
    resumed.fit(train_split, val_split, log=_StopAfter(10**6))
    for name in ("ens_feature", "ens_threshold", "ens_q_def", "ens_alpha", "n_rounds", "n_best"):
        torch.testing.assert_close(getattr(resumed, name), getattr(whole, name))
    other = OmegaConf.create({"model": {"_target_": "rankboost", "rounds": 6}, "data": {"train": "a"}})
    with pytest.raises(RunConflict, match=r"it belongs to rankboost .*this run is rankboost .*model.rounds: 5 .* vs 6"):
        harness.load_checkpoint(path, RankBoostModule(**options), other)


def test_train_py_resumes_a_learner_and_refuses_another_runs_checkpoint(make_cfg, tmp_path):
    overrides = ["model=rankboost", "model.rounds=10", "model.rounds_per_epoch=5", *DATA]
    first = train(make_cfg(*overrides, out=tmp_path / "a", tiny=False))
    last = tmp_path / "a" / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, weights_only=False)
    assert checkpoint["run_identity"]["model"] == "rankers.boosting.module.RankBoostModule"
    again = train(make_cfg(*overrides, f"ckpt_path={last}", out=tmp_path / "b", tiny=False))
    assert again["test"] == first["test"]  # a finished fit resumed: nothing more to fit
    with pytest.raises(RunConflict, match="belongs to"):
        train(make_cfg(*overrides, "model.rounds=12", f"ckpt_path={last}", out=tmp_path / "c", tiny=False))
    saved = json.loads((tmp_path / "a" / "results.json").read_text())
    assert {"val", "test", "fit_seconds", "epochs", "conventions", "export"} <= set(saved)


def test_run_identity_follows_the_model_and_data_config():
    cfg = OmegaConf.create({"model": {"_target_": "x.Y", "a": 1}, "data": {"path": "p"}, "seed": 1})
    other = OmegaConf.create({"model": {"_target_": "x.Y", "a": 2}, "data": {"path": "p"}, "seed": 1})
    assert run_identity(cfg)["fingerprint"] != run_identity(other)["fingerprint"]


def test_sigterm_stops_at_a_safe_point_checkpoints_and_the_resumed_run_finishes_the_same(
    make_cfg, tmp_path, monkeypatch
):
    import os
    import signal

    overrides = ["model=rankboost", "model.rounds=15", "model.rounds_per_epoch=5", *DATA]
    whole = train(make_cfg(*overrides, out=tmp_path / "whole", tiny=False))
    chunk = RankBoostModule._chunk

    def interrupted(self, *args, **kwargs):
        result = chunk(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # caught by the harness: the fit stops after this chunk
        return result

    monkeypatch.setattr(RankBoostModule, "_chunk", interrupted)
    with pytest.raises(SystemExit) as stopped:
        train(make_cfg(*overrides, out=tmp_path / "cut", tiny=False))
    assert stopped.value.code == harness.EXIT_SIGTERM
    record = json.loads((tmp_path / "cut" / "results.json").read_text())
    last = tmp_path / "cut" / "checkpoints" / "last.ckpt"
    assert record["interrupted"] == "SIGTERM" and record["resume"] == f"ckpt_path={last}"
    assert int(torch.load(last, weights_only=False)["state_dict"]["n_rounds"]) == 5
    monkeypatch.setattr(RankBoostModule, "_chunk", chunk)
    resumed = train(make_cfg(*overrides, f"ckpt_path={last}", out=tmp_path / "cut", tiny=False))
    assert resumed["test"] == whole["test"] and resumed["val"] == whole["val"]


def test_the_documented_minimal_learner_plugs_in(tmp_path):
    """docs/architecture.md's example, run through the harness's evaluation and export."""
    from datamodules.normalization import FeatureNormalizer
    from rankers.learner import Learner, Normalized
    from rankers.scorers import LinearScorer

    class MeanFeatureRanker(Learner):
        name = "mean_feature"

        def __init__(self, *, n_features: int, normalizer=None, **conventions) -> None:
            super().__init__(**conventions)
            self.save_hyperparameters(ignore=["normalizer"])
            self.normalizer = normalizer or FeatureNormalizer("none", num_features=n_features)
            self.register_buffer("weights", torch.zeros(n_features))

        def fit(self, train, val, *, log):
            x = train.normalized(self.normalizer)
            self.weights.copy_((x * train.labels[:, None]).mean(0))

        def scorer(self):
            return Normalized(self.normalizer, LinearScorer.from_weights(self.weights))

    split = _split(3, 20)
    learner = MeanFeatureRanker(n_features=4)
    learner.fit(split, None, log=_StopAfter(1))
    values = harness.evaluate(learner, split, "test")
    assert set(values) == {"ndcg@1", "ndcg@5", "ndcg@10", "map", "mrr"}
    # the harness's scores are the scorer's, query by query
    flat = harness.scores_of(learner, split)
    expected = split.features @ learner.weights
    torch.testing.assert_close(flat, expected)
    paths = learner.export_model(tmp_path)
    scripted = torch.jit.load(paths["torchscript"])
    torch.testing.assert_close(scripted(split.features[:5]), expected[:5])
    assert json.loads((tmp_path / "meta.json").read_text())["model"] == "mean_feature"


def test_a_stream_resumed_after_its_first_epoch_equals_an_uninterrupted_one(make_cfg, tmp_path, monkeypatch):
    import os
    import signal

    from rankers.perceptron.module import OnlineOrdinalModule

    stream = ["model=oap_bpm", "model.n_perceptrons=5", "model.epochs=3", "data=ordinal_synthetic"]
    stream += ["data.n_train=400", "data.n_val=100", "data.n_test=100", "callbacks.progress_bar.refresh_rate=0"]
    whole = train(make_cfg(*stream, out=tmp_path / "whole", tiny=False))
    partial_fit = OnlineOrdinalModule.partial_fit

    def interrupted(self, *args, **kwargs):
        partial_fit(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(OnlineOrdinalModule, "partial_fit", interrupted)
    with pytest.raises(SystemExit):
        train(make_cfg(*stream, out=tmp_path / "cut", tiny=False))
    last = tmp_path / "cut" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["epoch"] == 1
    monkeypatch.setattr(OnlineOrdinalModule, "partial_fit", partial_fit)
    resumed = train(make_cfg(*stream, f"ckpt_path={last}", out=tmp_path / "cut", tiny=False))
    assert resumed["test"] == whole["test"] and resumed["val"] == whole["val"]
    assert resumed["epochs"] == whole["epochs"] == 3
