"""Each ``conf/model/<loss>.yaml`` composes, names its loss, shares the metric gain, and trains one step."""

from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate

import losses

MODELS = {
    "ranknet": losses.ranknet_loss,
    "lambdarank": losses.lambdarank_loss,
    "listnet": losses.listnet_loss,
    "listmle": losses.listmle_loss,
    "approxndcg": losses.approx_ndcg_loss,
    "neuralndcg": losses.neural_ndcg_loss,
    "lambdaloss": losses.lambdaloss,
}


@pytest.mark.parametrize("model", MODELS)
def test_model_config_builds_its_loss(make_cfg, model):
    cfg = make_cfg(f"model={model}", "model.gain=linear", tiny=False)
    loss = instantiate(cfg.model.loss)
    assert loss.func is MODELS[model]
    if "gain" in cfg.model.loss:
        assert loss.keywords["gain"] == "linear"
    ranker = instantiate(cfg.model, n_features=5)
    features = torch.randn(2, 6, 5)
    labels = torch.tensor([[2.0, 1, 0, 0, 1, 0], [1.0, 0, 0, 0, 0, 0]])
    mask = torch.ones(2, 6, dtype=torch.bool)
    value = ranker._loss_of(features, labels, mask)
    value.backward()
    assert torch.isfinite(value) and value.item() != 0.0
    assert all(torch.isfinite(p.grad).all() for p in ranker.parameters() if p.grad is not None)
