"""Seed ensembles in one scorer: each member trains on its own loss; the mean is evaluated and exported."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
import torch
from hydra.utils import instantiate

from datamodules.normalization import FeatureNormalizer
from losses import lambdarank_loss, ranknet_loss
from rankers import RankerModule
from rankers.export import export_scorer
from rankers.scorers import MLPScorer


def batch(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(3, 6, 4, generator=generator)
    labels = torch.randint(0, 3, (3, 6), generator=generator).float()
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[1, 4:] = False
    return features, labels, mask


@pytest.mark.parametrize("loss", [lambdarank_loss, ranknet_loss])
def test_each_member_trains_on_its_own_loss(loss):
    torch.manual_seed(0)
    module = RankerModule(
        lambda n_features: MLPScorer(n_features, [8], members=3), loss, torch.optim.Adam, n_features=4
    )
    features, labels, mask = batch()
    stacked, scores = module._scored_loss(features, labels, mask)
    members = module.scorer.member_scores(module.normalizer(features, mask))
    separate = [loss(members[..., k], labels, mask) for k in range(3)]
    torch.testing.assert_close(stacked, torch.stack(separate).mean())
    torch.testing.assert_close(scores, members.mean(-1))
    # member 1's gradient comes from member 1's loss alone
    stacked.backward()
    first_layer = module.scorer.others[0][0].weight
    expected = torch.autograd.grad(separate[1] / 3, first_layer)[0]
    torch.testing.assert_close(first_layer.grad, expected)


def test_the_exported_ensemble_is_the_members_mean(tmp_path):
    torch.manual_seed(1)
    scorer = MLPScorer(4, [8], members=3, norm="layer").eval()
    export = export_scorer(FeatureNormalizer("query_zscore", num_features=4), scorer, tmp_path, 4)
    raw = torch.randn(5, 4)
    with torch.no_grad():
        expected = scorer.member_scores(FeatureNormalizer("query_zscore", num_features=4)(raw[None]))[0].mean(-1)
        torch.testing.assert_close(torch.jit.load(export["torchscript"])(raw), expected)
    onnx = onnxruntime.InferenceSession(export["onnx"]).run(None, {"features": raw.numpy()})[0]
    np.testing.assert_allclose(onnx, expected.numpy(), atol=1e-5)


def test_members_start_apart_and_one_member_is_the_plain_scorer(make_cfg):
    torch.manual_seed(2)
    ensemble = MLPScorer(4, [8], members=2)
    assert not torch.equal(ensemble.layers[0].weight, ensemble.others[0][0].weight)
    torch.manual_seed(2)
    single = MLPScorer(4, [8])
    torch.testing.assert_close(single(batch()[0]), ensemble.layers(batch()[0]).squeeze(-1))
    model = instantiate(make_cfg("model.scorer.members=3").model, n_features=8)
    assert len(model.scorer.others) == 2
