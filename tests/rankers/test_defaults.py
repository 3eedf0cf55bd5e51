"""Every default in one place: a model's constructor and its config agree, data configs never read
model keys, and what a model sets on its data comes from conf/data_model/<data>/<model>.yaml."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import yaml
from hydra.utils import get_object
from omegaconf import OmegaConf

CONF = Path(__file__).resolve().parents[2] / "conf"
MODELS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
# the data a model's config is written for where the default (synthetic LETOR files) is not it
DATA = {
    "linklearn": "linked_corpus",
    "calibrated_label_ranking": "multilabel",
    "calibrated_label_ranking_mlp": "multilabel",
    "binary_relevance": "multilabel",
}
# keys whose value is the run's, not the model's: ${seed}
RUN_KEYS = {"seed"}


def _parents(name: str) -> list[str]:
    """The conf/model configs ``name`` extends (its defaults list, ``_self_`` left out)."""
    raw = yaml.safe_load((CONF / "model" / f"{name}.yaml").read_text()) or {}
    return [entry for entry in raw.get("defaults", []) if isinstance(entry, str) and entry != "_self_"]


def _composed(make_cfg, name: str):
    overrides = [f"model={name}", *([f"data={DATA[name]}"] if name in DATA else [])]
    return make_cfg(*overrides, tiny=False)


def _disagreements(make_cfg, name: str) -> list[str]:
    """Literal options of ``conf/model/<name>.yaml`` (composed) that differ from the defaults of
    the constructor it instantiates."""
    model = _composed(make_cfg, name).model
    if "_target_" not in model:  # model=auto: an entry point of its own, not a module
        return []
    parameters = inspect.signature(get_object(model._target_).__init__).parameters
    values = OmegaConf.to_container(model, resolve=False)
    found = []
    for key, raw in values.items():
        if key.startswith("_") or key in RUN_KEYS or (isinstance(raw, dict | list) and _has_target(raw)):
            continue
        if key not in parameters:
            found.append(f"{name}: {key} is not a parameter of {model._target_}")
            continue
        default = parameters[key].default
        if default is inspect.Parameter.empty:
            continue
        value = OmegaConf.select(model, key)  # resolved (e.g. the variant's ${first_given:...})
        value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        if (list(default) if isinstance(default, tuple) else default) != value:
            found.append(f"{name}: {key} = {value!r} in the config, {default!r} in {model._target_}")
    return found


def _has_target(raw) -> bool:
    items = raw.values() if isinstance(raw, dict) else raw
    return (isinstance(raw, dict) and "_target_" in raw) or any(isinstance(i, dict) and "_target_" in i for i in items)


def _base(name: str) -> bool:
    """A family's base config: it extends no config of the same class (a derived one holds deltas)."""
    return not _parents(name)


@pytest.mark.parametrize("name", [m for m in MODELS if _base(m)])
def test_a_base_config_states_its_constructors_defaults(make_cfg, name):
    """A model built from Python is the model ``train.py model=<name>`` trains: every literal option
    of a family's base config equals the constructor's default (derived configs hold deltas)."""
    assert _disagreements(make_cfg, name) == []


def test_the_check_sees_a_disagreement(make_cfg, monkeypatch):
    """The check fails where a constructor default and the config part (not a test that cannot fail)."""
    import rankers.linklearn.module as linklearn

    init = linklearn.LinkLearnModule.__init__
    signature = inspect.signature(init)
    parameters = signature.parameters.values()
    changed = signature.replace(
        parameters=[p.replace(default=100.0) if p.name == "regularization" else p for p in parameters]
    )
    monkeypatch.setattr(init, "__signature__", changed, raising=False)
    assert _disagreements(make_cfg, "linklearn") == [
        "linklearn: regularization = 0.1 in the config, 100.0 in rankers.linklearn.module.LinkLearnModule"
    ]


@pytest.mark.parametrize("name", [m for m in MODELS if not _base(m)])
def test_a_derived_config_names_its_base(name):
    for parent in _parents(name):
        assert (CONF / "model" / f"{parent}.yaml").exists(), f"{name} extends {parent}, which is not in conf/model"


def test_no_data_config_reads_a_model_key():
    readers = [
        f"{path.relative_to(CONF)}:{number}: {line.strip()}"
        for path in [*(CONF / "data").glob("*.yaml"), *(CONF / "data_model").rglob("*.yaml")]
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\$\{[^}]*\bmodel\.", line)
    ]
    assert readers == []


@pytest.mark.parametrize(
    ("model", "feature_map", "val_fraction"),
    [
        ("lambdarank", "thresholds", 0.1),
        ("ranknet_listnet", "thresholds", 0.0),
        ("rankboost", "none", 0.0),
        ("committee_perceptron", "none", 0.0),
        ("random_forest", "none", 0.0),
        ("gp_preference", "none", 0.1),
    ],
)
def test_a_model_sets_its_data_options_on_letor_files(make_cfg, model, feature_map, val_fraction):
    cfg = make_cfg("data=letor", "data.train=t.txt", f"model={model}", tiny=False)
    assert (cfg.data.feature_map, cfg.data.val_fraction) == (feature_map, val_fraction)
    # the command line still wins, and other data keep their own options
    cfg = make_cfg("data=letor", "data.train=t.txt", f"model={model}", "data.val_fraction=0.3", tiny=False)
    assert cfg.data.val_fraction == 0.3
    assert "feature_map" not in make_cfg(f"model={model}", tiny=False).data  # synthetic: unchanged


def test_model_auto_reads_the_training_file_whole(make_cfg):
    cfg = make_cfg("model=auto", "data=letor", "data.train=t.txt", tiny=False)
    assert cfg.data.val_fraction == 0.0 and cfg.data.feature_map == "none"


def test_the_gain_follows_the_data(make_cfg):
    cfg = make_cfg("model=rankboost", "data=letor", "data.train=t.txt", "data.gain=linear", tiny=False)
    assert cfg.model.gain == "linear" and cfg.data.gain == "linear"


def test_model_auto_candidates_read_the_data_as_their_own_runs_would(make_cfg, tmp_path):
    from rankers.selection.cv import parse_candidate
    from rankers.selection.run import candidate_config, compose_candidate

    cfg = make_cfg("model=auto", "data=letor", "data.train=t.txt", "data.gain=linear", tiny=False)
    for text, feature_map, val_fraction in [("lambdarank", "thresholds", 0.1), ("rankboost", "none", 0.0)]:
        model, data = compose_candidate(parse_candidate(text))
        out = candidate_config(cfg, model, tmp_path, quiet=True, data=data)
        assert (out.data.feature_map, out.data.val_fraction, out.data.gain) == (feature_map, val_fraction, "linear")
        assert out.model.gain == "linear"
