"""The composed configuration: one source per setting, directions from the metrics, early errors."""

from __future__ import annotations

import pytest
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from torchmetrics import MaxMetric, MinMetric

from metrics import higher_is_better, monitor_mode, ranking_metrics
from rankers.runlog import RunLogFileHandler

ONLINE = ["prank", "prank_vp", "oap_bpm", "oap_bagg", "oap_vp", "widrow_hoff"]


@pytest.mark.parametrize(("model", "mode"), [("lambdarank", "max"), ("ranknet", "max"), *[(m, "min") for m in ONLINE]])
def test_checkpoint_and_early_stopping_follow_the_monitored_metric(make_cfg, model, mode):
    cfg = make_cfg(f"model={model}", tiny=False)
    assert cfg.callbacks.model_checkpoint.mode == mode and cfg.callbacks.early_stopping.mode == mode
    assert cfg.callbacks.model_checkpoint.monitor == cfg.model.monitor


def test_every_logged_metric_declares_its_direction():
    for name, metric in ranking_metrics().items():
        assert metric.higher_is_better is higher_is_better(f"val/{name}") is True
    assert monitor_mode("val/rank_loss") == "min" and monitor_mode("test/ndcg@10") == "max"
    with pytest.raises(KeyError, match="no known direction"):
        higher_is_better("val/unheard_of")


def test_the_running_best_follows_the_direction(make_cfg):
    assert isinstance(instantiate(make_cfg().model, n_features=8).val_best, MaxMetric)
    assert isinstance(instantiate(make_cfg().model, n_features=8, monitor="val/loss").val_best, MinMetric)


def test_the_gain_has_one_source(make_cfg):
    cfg = make_cfg("model=lambdarank", "data.gain=linear", tiny=False)
    assert cfg.model.loss.gain == cfg.model.gain == cfg.data.gain == "linear"


@pytest.mark.parametrize("model", ONLINE)
def test_online_configs_set_only_what_their_algorithm_reads(make_cfg, model):
    keys = set(make_cfg(f"model={model}", tiny=False).model)
    assert ("tau" in keys) == ("n_perceptrons" in keys) == model.startswith("oap")
    assert ("eta" in keys) == (model == "widrow_hoff")


def test_a_bad_loss_option_fails_when_the_model_is_built(make_cfg):
    with pytest.raises(InstantiationException, match=r"model.loss lambdarank_loss\(.*\) cannot be computed"):
        instantiate(make_cfg("model.loss.k=abc").model, n_features=8)


def test_an_unwritable_run_directory_is_a_clear_exit(tmp_path, make_cfg):
    assert make_cfg().hydra.job_logging.handlers.file["class"] == "rankers.runlog.RunLogFileHandler"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit, match=r"cannot write the run's log file .*a-file/train.log"):
        RunLogFileHandler(str(blocker / "train.log"))
