"""model=auto: the same folds for every candidate, the budget, the choice, the refit and its export."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from datamodules.letor_io import read_letor
from rankers import budget
from rankers.epoch_selection import query_folds
from rankers.pipeline import train
from rankers.score import score_file
from rankers.selection import run as selection_run
from rankers.selection.cv import CandidateResult, choose, first_fold_allowance, parse_candidate, plan_budget
from rankers.selection.run import budget_seconds, cross_validate, train_auto

FAST = ["rankboost model.rounds=20", "committee_perceptron model.committee_size=5 model.n_runs=1"]


@pytest.fixture
def letor_files(tmp_path):
    from datamodules.synthetic import generate_letor

    return generate_letor(tmp_path / "data", n_queries={"train": 30, "val": 2, "test": 10}, num_features=5, mean_docs=8)


def auto_cfg(make_cfg, letor_files, *extra: str, out=None):
    files = [f"data.train={letor_files['train']}", f"data.test={letor_files['test']}"]
    quoted = ",".join(f'"{c}"' for c in FAST)
    return make_cfg(
        "model=auto", "data=letor", *files, f"model.candidates=[{quoted}]", "model.folds=3", *extra, out=out, tiny=False
    )


def test_candidates_parse_and_bad_entries_are_refused():
    assert parse_candidate("rankboost").overrides == ()
    with pytest.raises(ValueError, match=r"model\.KEY=VALUE"):
        parse_candidate("lambdarank data.normalization=log1p")
    with pytest.raises(ValueError, match="auto itself"):
        parse_candidate("auto")


def test_plan_budget_drops_the_slowest_first_and_keeps_the_fastest():
    times = {"a": 1.0, "b": 50.0, "c": 5.0}
    # all three: 56 * 4 + 50 * 5/4 = 286.5 s; without b: 6 * 4 + 5 * 5/4 = 30.25 s
    assert plan_budget(times, folds=5, remaining_seconds=300.0) == (["a", "b", "c"], [])
    assert plan_budget(times, folds=5, remaining_seconds=100.0) == (["a", "c"], ["b"])
    assert plan_budget(times, folds=5, remaining_seconds=1.0) == (["a"], ["b", "c"])
    assert plan_budget(times, folds=5, remaining_seconds=1.0, always="c") == (["c"], ["b", "a"])
    assert first_fold_allowance(-5.0, 5) == 0.0


def test_choose_takes_the_best_complete_mean_weighted_by_fold_sizes():
    a = CandidateResult("a", [0.9, 0.1], [1, 9], [1.0, 1.0])  # 0.18 over queries, not 0.5
    b = CandidateResult("b", [0.3, 0.3], [5, 5], [1.0, 1.0])
    assert a.mean == pytest.approx(0.18)
    assert choose([a, b]).label == "b"
    with pytest.raises(ValueError, match="no candidate completed"):
        choose([CandidateResult("c", status="dropped")])


def fake_fits(monkeypatch, seconds: dict[str, float], sleep: dict[str, float] | None = None):
    """Replace the fold fit: record which queries each candidate held out, report ``seconds``. A fit
    "runs" ``sleep`` seconds as a learner does: polling the budget at safe points (every 10 ms)."""
    seen: dict[tuple[str, int], list[int]] = {}

    def fit_fold(cfg, run, fold, parts, unlabeled, workdir):
        end = time.perf_counter() + (sleep or {}).get(run.label, 0.0)
        while time.perf_counter() < end and not budget.expired():
            time.sleep(0.01)
        budget.check(run.label)
        held_out = parts[1]
        seen[(run.label, fold)] = held_out.qids[held_out.offsets[:-1]].tolist()
        run.result.fold_scores.append(0.5)
        run.result.fold_queries.append(held_out.num_queries)
        run.result.fit_seconds.append(seconds[run.label])

    monkeypatch.setattr(selection_run, "_fit_fold", fit_fold)
    return seen


def test_every_candidate_is_scored_on_the_same_seeded_folds(make_cfg, letor_files, monkeypatch, tmp_path):
    cfg = auto_cfg(make_cfg, letor_files, "seed=7", "model.candidates=[rankboost,lambdarank,ranknet]")
    seen = fake_fits(monkeypatch, {"rankboost": 1.0, "lambdarank": 1.0, "ranknet": 1.0})
    data = read_letor(letor_files["train"])
    runs, _ = cross_validate(cfg, data, None, tmp_path, deadline=time.perf_counter() + 600)
    expected = [fold.qids[fold.offsets[:-1]].tolist() for _, fold in query_folds(data, 3, 7)]
    for name in ("rankboost", "lambdarank", "ranknet"):
        assert [seen[(name, f)] for f in range(3)] == expected
    assert all(run.result.complete for run in runs)
    other = auto_cfg(make_cfg, letor_files, "seed=8", "model.candidates=[rankboost,lambdarank,ranknet]")
    cross_validate(other, data, None, tmp_path, deadline=time.perf_counter() + 600)
    assert [seen[("rankboost", f)] for f in range(3)] != expected  # the seed draws the folds


def test_the_budget_drops_the_slowest_candidates_after_their_first_fold(make_cfg, letor_files, monkeypatch, tmp_path):
    cfg = auto_cfg(make_cfg, letor_files, "model.candidates=[a,b,c]")
    monkeypatch.setattr(selection_run, "compose_candidate", lambda candidate: ({}, {}))
    seen = fake_fits(monkeypatch, {"a": 1.0, "b": 50.0, "c": 5.0})
    data = read_letor(letor_files["train"])
    # 3 folds: all: 56 * 2 + 50 * 1.5 = 187 s; without b: 6 * 2 + 5 * 1.5 = 19.5 s
    runs, _ = cross_validate(cfg, data, None, tmp_path, deadline=time.perf_counter() + 100)
    status = {run.label: run.result.status for run in runs}
    assert status["a"] == status["c"] == "complete"
    assert status["b"].startswith("dropped: 3 folds and a refit would pass model.budget_minutes")
    assert sorted(fold for name, fold in seen if name == "b") == [0]
    assert sorted(fold for name, fold in seen if name == "c") == [0, 1, 2]


def test_first_folds_in_list_order_then_the_rest_fastest_first(make_cfg, letor_files, monkeypatch, tmp_path):
    """Every candidate's first fold (the time estimate), then the remaining folds candidate by candidate,
    the fastest first fold first: a deadline then drops the slowest candidates, not the cheap ones."""
    cfg = auto_cfg(make_cfg, letor_files, "model.candidates=[a,b,c]")
    monkeypatch.setattr(selection_run, "compose_candidate", lambda candidate: ({}, {}))
    seen = fake_fits(monkeypatch, {"a": 1.0, "b": 9.0, "c": 3.0})
    cross_validate(cfg, read_letor(letor_files["train"]), None, tmp_path, deadline=time.perf_counter() + 600)
    assert list(seen) == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("a", 2), ("c", 1), ("c", 2), ("b", 1), ("b", 2)]


def test_a_first_fold_past_its_share_of_the_budget_is_stopped(make_cfg, letor_files, monkeypatch, tmp_path):
    cfg = auto_cfg(make_cfg, letor_files, "model.candidates=[first,quick,slow]")
    monkeypatch.setattr(selection_run, "compose_candidate", lambda candidate: ({}, {}))
    fake_fits(monkeypatch, {"first": 0.0, "quick": 0.0, "slow": 0.0}, sleep={"first": 0.3, "slow": 5.0})
    start = time.perf_counter()
    runs, _ = cross_validate(cfg, read_letor(letor_files["train"]), None, tmp_path, deadline=start + 4.5)
    assert time.perf_counter() - start < 4.5  # slow: (4.5 - 0.3) s / (3 + 1.5), stopped after about 1 s
    status = {run.label: run.result.status for run in runs}
    assert status["quick"] == "complete"
    assert status["slow"].startswith("dropped: fold 1 ran past the budget")
    # the first candidate always completes, even past the deadline: there is always a choice
    late, _ = cross_validate(cfg, read_letor(letor_files["train"]), None, tmp_path, deadline=time.perf_counter())
    assert [run.result.status.split(":")[0] for run in late] == ["complete", "dropped", "dropped"]
    assert late[1].result.as_dict()["mean"] is None  # never ran: null in results.json, not NaN
    assert "never started" in late[1].result.status


def test_the_budget_never_uses_a_signal_and_zero_minutes_is_refused(make_cfg, letor_files, monkeypatch, tmp_path):
    """Issue 41: SIGALRM went off inside Hydra's instantiate; a budget of 0 ran without a limit."""
    import signal

    def no_alarm(*args, **kwargs):
        raise AssertionError("model=auto armed a signal timer")

    monkeypatch.setattr(signal, "setitimer", no_alarm)
    monkeypatch.setattr(signal, "alarm", no_alarm)
    cfg = auto_cfg(make_cfg, letor_files, "model.candidates=[first,slow]")
    monkeypatch.setattr(selection_run, "compose_candidate", lambda candidate: ({}, {}))
    fake_fits(monkeypatch, {"first": 0.0, "slow": 0.0}, sleep={"slow": 3.0})
    runs, _ = cross_validate(cfg, read_letor(letor_files["train"]), None, tmp_path, deadline=time.perf_counter() + 1)
    assert runs[1].result.status.startswith("dropped: fold 1 ran past the budget")
    assert json.loads(json.dumps(runs[1].result.as_dict()))["mean"] is None
    with pytest.raises(ValueError, match=r"model\.budget_minutes=0: a budget must be > 0 minutes \(null: no limit\)"):
        train_auto(auto_cfg(make_cfg, letor_files, "model.budget_minutes=0"))
    assert budget_seconds({"budget_minutes": None}) == float("inf")
    assert budget_seconds({"budget_minutes": 0.5}) == 30.0


def test_a_learner_and_a_lightning_fit_stop_at_their_safe_points_when_the_deadline_passes():
    """The harness's log answers should_stop once the deadline passed; the callback ends a Lightning fit."""
    from types import SimpleNamespace

    from rankers.harness import HarnessLog

    log = HarnessLog([])
    callback = budget.BudgetCallback()
    trainer = SimpleNamespace(should_stop=False)
    with budget.deadline(60.0):
        assert not log.should_stop()
        callback.on_train_batch_end(trainer)
        assert not trainer.should_stop
    with budget.deadline(0.0):
        assert log.should_stop() and log.signal_name is None  # a budget's stop, not an interruption
        callback.on_train_batch_end(trainer)
        assert trainer.should_stop
        with pytest.raises(budget.BudgetExceeded):
            budget.check()
    assert not log.should_stop()  # the deadline ends with its block
    # epoch selection's fixed-length fits (min_epochs = max_epochs ignore should_stop) raise at an epoch end
    strict = budget.BudgetCallback(raise_at_epoch_end=True)
    strict.on_train_epoch_end(trainer)
    with budget.deadline(0.0), pytest.raises(budget.BudgetExceeded, match="epoch-selection"):
        strict.on_train_epoch_end(trainer)


@pytest.mark.slow  # two candidates x 3 folds, the refit, its ONNX export and a direct run: about 20 s idle
def test_auto_refits_the_winner_exports_it_and_writes_the_table_and_the_bound(make_cfg, letor_files, tmp_path):
    out = tmp_path / "auto"
    results = train_auto(auto_cfg(make_cfg, letor_files, out=out))
    written = json.loads((out / "results.json").read_text())
    selection = written["selection"]
    assert set(selection["candidates"]) == set(FAST)
    for row in selection["candidates"].values():
        assert row["status"] == "complete"
        assert len(row["fold_scores"]) == 3 and sum(row["fold_queries"]) == 30
        assert 0 <= row["mean"] <= 1 and row["spread"] >= 0 and min(row["fit_seconds"]) > 0
    best = max(FAST, key=lambda c: selection["candidates"][c]["mean"])
    assert selection["chosen"] == best
    assert "| candidate |" in selection["table"]
    bound = written["bound"]
    assert 0 < bound["bound"] <= 1 and bound["folds"] == 3 and bound["selected_among"] == 2
    assert bound["held_out_bound"] >= bound["held_out_risk"]
    assert bound["disagreement_bound"] >= bound["disagreement"] >= 0
    assert bound["unlabeled_queries"] == 10 and "labels unread" in bound["unlabeled"]
    # the export is the winner's, as train.py model=<winner> makes it with the same seed
    scores, data = score_file(out / "export" / "scorer.pt", letor_files["test"])
    assert np.isfinite(scores).all() and len(scores) == len(data.labels)
    name, *overrides = best.split()
    direct = train(
        make_cfg(
            f"model={name}",
            "data=letor",
            f"data.train={letor_files['train']}",
            f"data.test={letor_files['test']}",
            "export=false",
            *overrides,
            out=tmp_path / "direct",
            tiny=False,
        )
    )
    assert direct["test"] == results["test"] == written["test"]


def test_the_unlabeled_queries_come_without_labels_from_the_file_or_the_test_split(make_cfg, letor_files):
    from rankers.selection.run import _unlabeled_sample

    splits = {"train": read_letor(letor_files["train"]), "test": read_letor(letor_files["test"])}
    data, source = _unlabeled_sample(auto_cfg(make_cfg, letor_files), splits)
    assert data.num_queries == 10 and not data.labels.any() and "labels unread" in source
    data, source = _unlabeled_sample(
        auto_cfg(make_cfg, letor_files, f"bound.unlabeled={letor_files['train']}", "bound.max_queries=7"), splits
    )
    assert data.num_queries == 7 and not data.labels.any() and "7 of 30 queries drawn" in source
    none, why = _unlabeled_sample(auto_cfg(make_cfg, letor_files), {"train": splits["train"]})
    assert none is None and "bound.unlabeled" in why


def test_a_run_directory_holding_another_run_is_refused_before_the_cross_validation(make_cfg, letor_files, monkeypatch):
    from rankers.run_identity import RunConflict

    cfg = auto_cfg(make_cfg, letor_files, "model.candidates=[rankboost]")
    checkpoints = Path(cfg.callbacks.model_checkpoint.dirpath)
    checkpoints.mkdir(parents=True)
    (checkpoints / "last.ckpt").write_bytes(b"another run's checkpoint")

    def cross_validation_ran(*args, **kwargs):
        raise AssertionError("the CV ran before the run directory was checked")

    monkeypatch.setattr(selection_run, "cross_validate", cross_validation_ran)
    with pytest.raises(RunConflict, match="already holds"):
        train_auto(cfg)
