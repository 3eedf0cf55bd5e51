"""bench/letor_peers.py's splits and blends: what its tables rest on."""

from __future__ import annotations

import numpy as np
import pytest

from bench.letor_peers import folds, held_out_validation, main, per_query_zscores, seed_spread, trec_metrics
from datamodules.letor import LetorDataModule
from datamodules.letor_io import read_letor
from datamodules.synthetic import generate_letor


@pytest.fixture
def train_file(tmp_path) -> str:
    files = generate_letor(tmp_path, n_queries={"train": 23, "val": 2, "test": 2}, num_features=5, mean_docs=6)
    return files["train"]


def _query_ids(path: str) -> set[int]:
    return set(np.unique(read_letor(path).qids).tolist())


@pytest.mark.parametrize("with_val", [True, False])
def test_every_query_is_tested_once_and_never_trained_on_in_its_fold(train_file, tmp_path, with_val):
    everything = _query_ids(train_file)
    triples = folds(read_letor(train_file), 5, seed=3, workdir=tmp_path, with_val=with_val)
    tested = [_query_ids(files["test"]) for files in triples]
    assert set().union(*tested) == everything and sum(map(len, tested)) == len(everything)
    for f, files in enumerate(triples):
        assert set(files) == ({"train", "val", "test"} if with_val else {"train", "test"})
        held = _query_ids(files["test"]) | (_query_ids(files["val"]) if with_val else set())
        assert _query_ids(files["train"]) == everything - held
        if with_val:  # the next fold validates
            assert _query_ids(files["val"]) == tested[(f + 1) % 5]


def test_small_folds_train_on_one_fold_and_test_on_the_others(train_file, tmp_path):
    everything = _query_ids(train_file)
    (tmp_path / "large").mkdir()
    (tmp_path / "small").mkdir()
    large = folds(read_letor(train_file), 5, seed=3, workdir=tmp_path / "large", with_val=False)
    small = folds(read_letor(train_file), 5, seed=3, workdir=tmp_path / "small", with_val=False, small=True)
    trained = [_query_ids(files["train"]) for files in small]
    assert set().union(*trained) == everything and sum(map(len, trained)) == len(everything)
    for big, little in zip(large, small, strict=True):  # the same folds, roles swapped
        assert _query_ids(little["train"]) == _query_ids(big["test"])
        assert _query_ids(little["test"]) == everything - _query_ids(little["train"])


def test_peers_hold_out_the_queries_our_datamodule_holds_out(train_file):
    ours = LetorDataModule(train=train_file, val_fraction=0.1, seed=11, cache_dir=None)
    ours.setup()
    split = held_out_validation(read_letor(train_file), seed=11)
    for name in ("train", "val"):
        assert np.array_equal(np.unique(ours.splits[name].qids), np.unique(split[name].qids)), name


def test_the_defaults_peers_train_on_every_training_query(train_file, tmp_path, monkeypatch):
    # lightgbm/xgboost early-stop on a held-out tenth; the -defaults rows (the issues' settings) do not
    import argparse

    import bench.letor_peers as peers

    seen = {}

    def recorder(name):
        def fit(splits, seed):
            seen[name] = (splits["train"].num_queries, "val" in splits)
            return np.zeros(len(splits["test"].labels)), 0.0

        return fit

    for name in ("lightgbm", "lightgbm-defaults", "xgboost", "xgboost-defaults"):
        monkeypatch.setitem(peers.PEERS, name, recorder(name))
    files = {"train": train_file, "test": train_file}
    args = argparse.Namespace(seeds=[0], peers=list(peers.PEERS), models=[], blends=[], override=[])
    peers.evaluate_setting(files, args, tmp_path)
    everything = read_letor(train_file).num_queries
    assert seen["lightgbm-defaults"] == seen["xgboost-defaults"] == (everything, False)
    assert seen["lightgbm"] == seen["xgboost"] == (everything - round(0.1 * everything), True)


def test_blend_scores_are_per_query_zscores_and_trec_metrics_see_the_order(train_file):
    data = read_letor(train_file)
    scores = np.random.default_rng(0).normal(size=len(data.labels)) * 100 + 7
    scores[data.offsets[0] : data.offsets[1]] = 2.0  # a constant list stays finite (centred)
    z = per_query_zscores(scores, data)
    for start, stop in zip(data.offsets[:-1], data.offsets[1:], strict=True):
        part = z[start:stop]
        assert abs(part.mean()) < 1e-9 and (part.std() == pytest.approx(1.0) or np.all(part == 0))
        assert np.array_equal(np.argsort(part, kind="stable"), np.argsort(scores[start:stop], kind="stable"))
    assert trec_metrics(data, z) == pytest.approx(trec_metrics(data, scores))
    perfect = trec_metrics(data, data.labels.astype(np.float64))
    judged = [data.labels[a:b].max() > 0 for a, b in zip(data.offsets[:-1], data.offsets[1:], strict=True)]
    assert perfect["ndcg@10"] == pytest.approx(np.mean(judged))  # trec_eval: 0 for a query with no relevant


def test_seed_spread_pools_each_splits_variance_over_seeds():
    runs = [{"ndcg@10": v} for v in (0.70, 0.72, 0.80, 0.80, 0.60, 0.66)]  # 3 splits x 2 seeds
    expected = np.sqrt(np.mean([np.var([0.70, 0.72], ddof=1), 0.0, np.var([0.60, 0.66], ddof=1)]))
    assert seed_spread(runs, 2) == pytest.approx(expected)
    assert seed_spread(runs, 1) is None  # one seed: no spread to measure


@pytest.mark.parametrize("extra", [[], ["--folds", "5"], ["--no-val"]])
def test_small_without_folds_and_no_val_is_refused(train_file, capsys, extra):
    with pytest.raises(SystemExit):
        main(["--train", train_file, "--test", train_file, "--small", *extra])
    assert "--small needs --folds and --no-val" in capsys.readouterr().err


def test_paired_differences_are_run_by_run_and_refuse_unequal_runs():
    from bench.letor_peers import paired_difference, paired_lines

    ours = [{"ndcg@10": v} for v in (0.80, 0.70, 0.90)]
    peer = [{"ndcg@10": v} for v in (0.75, 0.72, 0.80)]
    # gaps +0.05, -0.02, +0.10: mean 0.0433, sd 0.0603, se 0.0348, 2 wins of 3
    assert paired_difference(ours, peer) == "+0.0433 ± 0.0348 (2 / 3)"
    assert paired_lines({"ours": ours, "peer": peer}, {"peer": peer}) == ["ours - peer: +0.0433 ± 0.0348 (2 / 3)"]
    with pytest.raises(ValueError, match="cannot pair 3 runs with 2"):
        paired_difference(ours, peer[:2])


def test_paired_names_must_exist(train_file, capsys):
    with pytest.raises(SystemExit):
        main(["--train", train_file, "--folds", "2", "--models", "--peers", "--paired", "nothing"])
    assert "--paired names rows" in capsys.readouterr().err
