"""``python train.py -m hparams_search=optuna``: the search spaces against their models, the refusals, a
failed trial recorded while the sweep goes on, and optimization_results.yaml against the trials' results.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf

from rankers.hparams_search import SearchSpaceError, check_search, objective, read_trials, trial_record

ROOT = Path(__file__).resolve().parents[2]
SPACES = sorted(p.stem for p in (ROOT / "conf/hparams_search/space").glob("*.yaml") if p.stem != "neural")
# lambdamart's config comes with its own change (conf/model/lambdamart.yaml); until then its space cannot compose
COMPOSABLE = [m for m in SPACES if (ROOT / f"conf/model/{m}.yaml").exists()]
# a sweep small enough for a test: 60 training queries, 2 epochs a trial
SMALL = [
    "data.n_train_queries=60",
    "data.n_val_queries=20",
    "data.n_test_queries=20",
    "data.num_features=8",
    "data.mean_docs=12",
    "trainer.max_epochs=2",
    "callbacks.progress_bar.refresh_rate=0",
    "~logger",
]


def test_every_model_with_a_space_has_every_searched_option(make_cfg):
    assert len(COMPOSABLE) >= 19, COMPOSABLE  # the neural losses, rankboost, trees, perceptrons, linklearn
    for model in COMPOSABLE:
        cfg = make_cfg("hparams_search=optuna", f"model={model}", tiny=False)
        params = cfg.hydra.sweeper.params
        assert len(params) >= 1, model
        check_search(cfg)  # raises on a key the model lacks


@pytest.mark.parametrize(("model", "direction"), [("lambdarank", "maximize"), ("oap_bpm", "minimize")])
def test_direction_and_seed_follow_the_config(make_cfg, model, direction):
    cfg = make_cfg("hparams_search=optuna", f"model={model}", "seed=7", tiny=False)
    assert cfg.optimized_metric == cfg.model.monitor
    assert cfg.hydra.sweeper.direction == direction
    assert cfg.hydra.sweeper.sampler.seed == 7 and cfg.hydra.sweeper.sampler._target_.endswith("TPESampler")
    assert "model.tau" in cfg.hydra.sweeper.params or model != "oap_bpm"


def _editable(cfg: DictConfig) -> DictConfig:
    """A copy whose hydra node (read-only as composed) the test may change."""
    return OmegaConf.create(OmegaConf.to_container(cfg))


def test_a_searched_option_the_model_lacks_is_refused(make_cfg):
    cfg = _editable(make_cfg("hparams_search=optuna", "model=prank", tiny=False))
    cfg.hydra.sweeper.params["model.tau"] = "interval(0.1,0.9)"
    with pytest.raises(SearchSpaceError, match=r"model=prank does not have: model\.tau"):
        check_search(cfg)
    cfg = _editable(make_cfg("hparams_search=optuna", "model=lambdarank"))
    cfg.hydra.overrides.task = ["model.scorer.widht=choice(8,16)"]
    with pytest.raises(SearchSpaceError, match=r"model\.scorer\.widht \(from the command line\)"):
        check_search(cfg)
    cfg.hydra.overrides.task = ["model.loss.0.sigma=interval(1,2)"]
    with pytest.raises(SearchSpaceError, match=r"model\.loss\.0\.sigma"):  # lambdarank's loss is no list
        check_search(cfg)
    cfg.hydra.overrides.task = ["+model.extra=choice(1,2)", "data=choice(synthetic)"]
    check_search(cfg)  # an added key and a config group are not refused


def test_a_search_without_validation_is_refused(make_cfg, tmp_path):
    cfg = make_cfg("hparams_search=optuna", "model=rankboost", "data=letor", f"data.train={tmp_path}/t.txt", tiny=False)
    with pytest.raises(SearchSpaceError, match="no validation"):
        check_search(cfg)
    cfg = make_cfg(
        "hparams_search=optuna", "model=rankboost", "data=letor", "data.train=t", "data.val_fraction=0.2", tiny=False
    )
    check_search(cfg)


def test_the_objective_is_the_float_results_json_holds():
    results = {"val": {"ndcg@10": 0.123456789012345, "map": 0.5}}
    cfg = OmegaConf.create({"optimized_metric": "val/ndcg@10"})
    assert objective(cfg, results) is results["val"]["ndcg@10"]
    with pytest.raises(KeyError, match="needs a validation split"):
        objective(cfg, {"val": {}})
    assert objective(OmegaConf.create({}), {"val": {"rank_loss": 0.7}}) == 0.7  # a plain multirun, as before


def test_a_trial_record_says_why_it_failed():
    config = OmegaConf.create({"hydra": {"job": {"num": 3}, "runtime": {"output_dir": "/x/3"}}})
    failed = JobReturn(overrides=["a=1"], status=JobStatus.FAILED, _return_value=ValueError("bad lr"))
    assert trial_record(config, failed) | {"dir": ""} == {
        "trial": 3,
        "overrides": ["a=1"],
        "dir": "",
        "state": "fail",
        "value": None,
        "error": "ValueError: bad lr",
    }
    for value in (None, float("nan")):
        returned = JobReturn(overrides=[], status=JobStatus.COMPLETED, _return_value=value)
        assert trial_record(config, returned)["state"] == "fail"
    done = JobReturn(overrides=[], status=JobStatus.COMPLETED, _return_value=0.5)
    assert trial_record(config, done)["value"] == 0.5


def _sweep(out: Path, data: Path, *overrides: str, small: bool = True) -> subprocess.CompletedProcess:
    sizes = SMALL if small else SMALL[-3:]  # the synthetic data's sizes, or only the trainer's and logger's
    command = [sys.executable, "train.py", "-m", "hparams_search=optuna", *sizes, f"paths.data_dir={data}"]
    command += [*overrides, f"hydra.sweep.dir={out}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _val(trial_dir: Path, name: str = "ndcg@10") -> float:
    return json.loads((trial_dir / "results.json").read_text())["val"][name]


@pytest.mark.slow
def test_a_sweep_reports_the_best_trial_as_its_results_json_says(tmp_path):
    out = tmp_path / "sweep"
    run = _sweep(out, tmp_path / "data", "model=lambdarank", "hydra.sweeper.n_trials=3")
    assert run.returncode == 0, run.stderr[-3000:]
    trials = read_trials(out)
    assert [t["state"] for t in trials] == ["complete"] * 3
    values = {t["trial"]: _val(out / str(t["trial"])) for t in trials}
    for t in trials:  # each trial an ordinary run: its results.json, its export
        assert t["value"] == values[t["trial"]] and (out / str(t["trial"]) / "export/scorer.pt").exists()
    best = yaml.safe_load((out / "optimization_results.yaml").read_text())
    winner = max(values, key=values.get)
    assert best["best_value"] == values[winner]  # exactly: the same float
    searched = OmegaConf.load(out / "0/.hydra/hydra.yaml").hydra.sweeper.params
    assert set(best["best_params"]) == set(searched)
    overrides = dict(item.split("=", 1) for item in trials[winner]["overrides"])
    assert all(overrides[key] == str(value) for key, value in best["best_params"].items())
    assert len({t["overrides"][0] for t in trials}) == 3  # TPE drew three different learning rates
    assert (out / "trials.png").stat().st_size > 0


@pytest.mark.slow
def test_a_failed_trial_is_recorded_and_the_sweep_goes_on(tmp_path):
    out = tmp_path / "sweep"
    # an unknown activation fails as the scorer is built; with seed 12343 TPE's random start draws it first,
    # then relu (the test asserts both were drawn)
    run = _sweep(
        out,
        tmp_path / "data",
        "model=ranknet",
        "model.scorer.members=1",
        "model.scorer.activation=choice(relu,nosuch)",
        "hydra.sweeper.n_trials=2",
        "seed=12343",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    trials = read_trials(out)
    assert len(trials) == 2
    by_activation = {dict(i.split("=", 1) for i in t["overrides"])["model.scorer.activation"]: t for t in trials}
    assert by_activation["nosuch"]["state"] == "fail" and "nosuch" in by_activation["nosuch"]["error"]
    good = by_activation["relu"]
    assert good["state"] == "complete" and good["value"] == _val(Path(good["dir"]))
    best = yaml.safe_load((out / "optimization_results.yaml").read_text())
    assert best["best_value"] == good["value"] and best["best_params"]["model.scorer.activation"] == "relu"


def test_a_bad_search_space_stops_before_any_trial(tmp_path):
    out = tmp_path / "sweep"
    run = _sweep(out, tmp_path / "data", "model=prank", "model.tau=interval(0.1,0.9)")
    assert run.returncode != 0 and "model=prank does not have: model.tau" in run.stderr
    assert not any(p.is_dir() for p in out.glob("*"))  # no trial ran


@pytest.mark.slow
def test_unusable_input_fails_each_trial_instead_of_ending_the_sweep_at_the_first(tmp_path):
    # outside a search train.py exits 2 on a DataError; inside one each trial is recorded as failed
    rows = [f"{(q + d) % 3} qid:{q} 1:0.5 2:1" for q in range(8) for d in range(4)]  # no feature varies
    train = tmp_path / "constant.txt"
    train.write_text("\n".join(rows) + "\n")
    out = tmp_path / "sweep"
    run = _sweep(
        out,
        tmp_path / "data",
        "model=lambdarank",
        "data=letor",
        f"data.train={train}",
        "hydra.sweeper.n_trials=2",
        small=False,
    )
    trials = read_trials(out)
    assert [t["state"] for t in trials] == ["fail", "fail"]
    assert all(f"{train}: no feature varies" in t["error"] for t in trials)
    assert run.returncode != 0 and "No trials are completed" in run.stderr
