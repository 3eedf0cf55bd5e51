"""The oneDNN MLP path (``rankers.neural.onednn_mlp``) against autograd through the same ``nn.Sequential``."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from torch import nn

from datamodules.normalization import FeatureNormalizer
from losses import lambdarank_loss, ranknet_loss
from rankers import RankerModule
from rankers.neural import onednn_mlp
from rankers.scorers import MLPScorer

pytestmark = pytest.mark.skipif(not onednn_mlp.available(), reason="no oneDNN linear op in this torch build")


def _grads(module: nn.Module, run) -> tuple[torch.Tensor, list[torch.Tensor]]:
    module.zero_grad(set_to_none=True)
    value = run()
    value.backward()
    return value.detach(), [p.grad.clone() for p in module.parameters()]


@pytest.mark.parametrize("hidden", [(), (7,), (256, 128, 64)])
def test_values_and_gradients_equal_autograd(hidden):
    torch.manual_seed(0)
    scorer = MLPScorer(13, hidden=hidden)
    layers = onednn_mlp.plain_layers(scorer)
    assert layers is not None and len(layers) == len(hidden) + 1
    features = torch.randn(5, 11, 13)
    weights = torch.randn(5, 11)
    fast_value, fast = _grads(scorer, lambda: (onednn_mlp.mlp_scores(layers, features) * weights).sum())
    ref_value, ref = _grads(scorer, lambda: (scorer(features) * weights).sum())
    torch.testing.assert_close(fast_value, ref_value, rtol=1e-5, atol=1e-5)
    for a, b in zip(fast, ref):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_input_gradient_when_the_input_needs_one():
    torch.manual_seed(1)
    scorer = MLPScorer(6, hidden=(8, 4))
    layers = onednn_mlp.plain_layers(scorer)
    features = torch.randn(9, 6, requires_grad=True)
    (onednn_mlp.mlp_scores(layers, features).square().sum()).backward()
    fast = features.grad.clone()
    features.grad = None
    scorer(features).square().sum().backward()
    torch.testing.assert_close(fast, features.grad, rtol=1e-4, atol=1e-6)
    # and the finite differences of the function itself, in float64 through the reference network
    assert torch.autograd.gradcheck(lambda x: scorer.double()(x), (features.detach().double().requires_grad_(),))


def test_other_networks_take_the_generic_path():
    assert onednn_mlp.plain_layers(MLPScorer(4, hidden=(8,), dropout=0.1)) is None
    assert onednn_mlp.plain_layers(MLPScorer(4, hidden=(8,), norm="layer")) is None
    assert onednn_mlp.plain_layers(MLPScorer(4, hidden=(8,), activation="gelu")) is None
    assert onednn_mlp.plain_layers(MLPScorer(4, hidden=(8,), members=3)) is None
    features = torch.randn(2, 3, 4)
    scorer = MLPScorer(4, hidden=(8,))
    assert onednn_mlp.applies(scorer, features.double()) is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert onednn_mlp.applies(scorer, features) is None


@pytest.mark.parametrize("loss", [partial(lambdarank_loss, k=10), ranknet_loss])
def test_training_loss_equals_the_generic_path_and_padding_never_leaks(loss, monkeypatch):
    """The module's training loss with the oneDNN path and without it (``LTR_CPU_KERNELS=0`` turns
    both the MLP and the loss kernel off, so compare against the same loss path): values and every
    gradient; padded entries hold NaN and inf, and nothing non-finite comes out."""
    torch.manual_seed(2)
    model = RankerModule(
        partial(MLPScorer, hidden=(32, 16)),
        loss,
        partial(torch.optim.Adam),
        n_features=6,
        normalizer=FeatureNormalizer("zscore", torch.randn(6), torch.rand(6) + 0.5),
    )
    features = torch.randn(4, 20, 6)
    labels = torch.randint(0, 5, (4, 20)).float()
    mask = torch.arange(20) < torch.tensor([20, 13, 1, 0])[:, None]
    features[~mask] = float("nan")
    features[~mask & (torch.arange(20) % 2 == 0)] = float("inf")
    labels[~mask] = float("nan")
    assert onednn_mlp.applies(model.scorer, features) is not None
    fast_value, fast = _grads(model, lambda: model._loss_of(features, labels, mask))
    monkeypatch.setenv("LTR_CPU_KERNELS", "0")
    assert onednn_mlp.applies(model.scorer, features) is None
    ref_value, ref = _grads(model, lambda: model._loss_of(features, labels, mask))
    assert torch.isfinite(fast_value)
    torch.testing.assert_close(fast_value, ref_value, rtol=1e-5, atol=1e-6)
    for a, b in zip(fast, ref):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
