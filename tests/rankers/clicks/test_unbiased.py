"""model=unbiased through train.py: a simulated log in, propensities, metrics and an ordinary export out."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.core.global_hydra import GlobalHydra

from datamodules.clicks.simulate import Simulation, load_labeled, simulate
from datamodules.synthetic import generate_letor
from rankers.pipeline import compose_config, train

FAST = ["~callbacks.progress_bar", "+trainer.enable_progress_bar=false", "logger=[]", "model.scorer.hidden=[16]"]


@pytest.fixture(scope="module")
def click_log(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("clicks")
    files = generate_letor(folder, n_queries={"train": 60, "val": 5, "test": 30}, num_features=6, mean_docs=16)
    data, ids = load_labeled(files["train"])
    simulate(data, ids, Simulation(eta=1.0, sessions=(60, 80), seed=0), folder / "log")
    return {"features": folder / "log" / "features.txt", "clicks": folder / "log" / "clicks.tsv", "test": files["test"]}


def run(tmp_path: Path, log: dict[str, Path], *overrides: str) -> dict:
    cfg = compose_config(
        [
            "model=unbiased",
            "data=clicks",
            f"data.features={log['features']}",
            f"data.clicks={log['clicks']}",
            "trainer.max_epochs=3",
            "model.em_bootstrap=3",
            *FAST,
            *overrides,
        ],
        output_dir=tmp_path / "out",
        data_dir=tmp_path / "data",
    )
    try:
        return train(cfg)
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.slow
@pytest.mark.parametrize("debias", ["none", "ips", "dla"])
def test_unbiased_trains_reports_propensities_and_exports(tmp_path, click_log, debias) -> None:
    results = run(tmp_path, click_log, f"model.debias={debias}", f"data.test={click_log['test']}")
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    propensity = saved["propensity"]
    assert len(propensity) == 10 and propensity[0] == 1.0
    assert np.all(np.abs(np.array(propensity) / (1 / np.arange(1, 11)) - 1) < 0.5)  # eta 1, small log
    assert set(saved["test"]) >= {"ndcg@10", "map"} and saved["test"] == results["test"]
    assert saved["data"]["click_log"]["sessions"] > 0 and (tmp_path / "out" / "propensity.png").exists()
    if debias == "dla":
        assert len(saved["propensity_estimates"]["dla"]["propensity"]) == 10
    # the export is the ordinary scorer: raw [L, F] features in, [L] scores out
    scorer = torch.jit.load(str(tmp_path / "out" / "export" / "scorer.pt"))
    assert scorer(torch.randn(7, 6)).shape == (7,)


def test_without_a_test_file_nothing_is_called_test(tmp_path, click_log) -> None:
    saved = run(tmp_path, click_log, "trainer.max_epochs=1", "model.em_bootstrap=0", "export=false")
    assert "test" not in saved and saved["val"]["ndcg@10"] > 0
    offline = saved["offline"]["ranker_ips_estimate_clicks@10_per_session"]
    assert offline["ci95"][0] <= offline["mean"] <= offline["ci95"][1] and offline["mean"] > 0


def test_max_fit_minutes_ends_training_after_the_epoch_that_passes_it(tmp_path, click_log) -> None:
    """A limit of 0 minutes: the first epoch ends past it, so the fit stops there and says why."""
    common = ("trainer.max_epochs=3", "model.em_bootstrap=0", "export=false")
    stopped = run(tmp_path / "a", click_log, *common, "model.max_fit_minutes=0")
    assert stopped["epochs"] == 1 and stopped["stopped_by_max_fit_minutes"] is True
    free = run(tmp_path / "b", click_log, *common, "model.max_fit_minutes=null", "callbacks.early_stopping.patience=5")
    assert free["epochs"] == 3 and free["stopped_by_max_fit_minutes"] is False


def test_a_letor_datamodule_is_refused(tmp_path) -> None:
    with pytest.raises(Exception, match="data=clicks"):
        cfg = compose_config(["model=unbiased", *FAST, "data.n_train_queries=20"], output_dir=tmp_path / "o")
        try:
            train(cfg)
        finally:
            GlobalHydra.instance().clear()


def test_an_unknown_ips_estimator_is_refused() -> None:
    from rankers.clicks.module import UnbiasedModule

    with pytest.raises(ValueError, match=r"model\.ips_estimator must be one of"):
        UnbiasedModule(None, None, ips_estimator="pooled")
