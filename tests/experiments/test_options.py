"""Every default in one place: each experiment's options section in conf/experiment states exactly its
driver's options defaults (a run from Python is the run ``train.py experiment=<name>`` makes)."""

from __future__ import annotations

import dataclasses

import pytest
from hydra.utils import get_method
from omegaconf import OmegaConf

from experiments.crammer_singer2001_cf import OnlineOptions
from experiments.harrington2003 import Table1Options
from experiments.harrington2003_cf import Table2Options

# experiment -> (its options section, the options class, the entry that reads them)
EXPERIMENTS = {
    "harrington2003": ("harrington", Table1Options, "experiments.harrington2003.main"),
    "harrington2003_cf": ("harrington_cf", Table2Options, "experiments.harrington2003_cf.main"),
    "crammer_singer2001_cf": ("crammer_singer_cf", OnlineOptions, "experiments.crammer_singer2001_cf.main"),
}


def _defaults(options_class) -> dict:
    values = {field.name: field.default for field in dataclasses.fields(options_class)}
    return {key: list(value) if isinstance(value, tuple) else value for key, value in values.items()}


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_the_config_states_the_drivers_defaults(make_cfg, name):
    section, options_class, entry = EXPERIMENTS[name]
    cfg = make_cfg(f"experiment={name}", tiny=False)
    assert cfg.entry == entry and callable(get_method(cfg.entry))
    assert OmegaConf.to_container(cfg[section], resolve=True) == _defaults(options_class)


def test_the_rankboost_experiment_is_table2_plus_its_row(make_cfg):
    cfg = make_cfg("experiment=harrington2003_cf_rankboost", tiny=False)
    stated = OmegaConf.to_container(cfg.harrington_cf, resolve=True)
    assert cfg.entry == "experiments.harrington2003_cf.main"
    row = "experiments.harrington2003_cf_rankboost.rankboost_row"
    assert stated == {**_defaults(Table2Options), "extra_rows": [row]}
    assert callable(get_method(stated["extra_rows"][0]))
