"""The CPU MLP paths (``rankers.neural.onednn_mlp``; ``rankers.neural.mkl_mlp`` a product at a time, and
through the one-pass kernel ``kernels.mlp_cpu``) against autograd through the same ``nn.Sequential``;
then what only the MKL paths have: their reused buffers and ``normalize_into``."""

from __future__ import annotations

import copy
import pickle
from functools import partial

import pytest
import torch
from torch import nn

from datamodules.normalization import FeatureNormalizer
from kernels import mlp_cpu
from losses import lambdarank_loss, ranknet_loss
from rankers import RankerModule
from rankers.neural import mkl_mlp, onednn_mlp
from rankers.scorers import MLPScorer

MODULES = {"onednn": onednn_mlp, "mkl": mkl_mlp, "kernel": mkl_mlp}
MKL_PATHS = ["mkl", pytest.param("kernel", marks=pytest.mark.skipif(not mlp_cpu.available(), reason="no MLP kernel"))]
PATHS = [
    pytest.param("onednn", marks=pytest.mark.skipif(not onednn_mlp.available(), reason="no oneDNN linear op")),
    *MKL_PATHS,
]


@pytest.fixture(autouse=True)
def _kernel_for_the_kernel_path_only(request, monkeypatch):
    """Every test but the kernel path's runs ``mkl_mlp`` a product at a time (``kernels.mlp_cpu`` off)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is None or callspec.params.get("path") != "kernel":
        monkeypatch.setattr(mlp_cpu, "available", lambda: False)


def _scores_fn(path: str):
    """The path's ``scores(layers, features)`` and its workspace (None for oneDNN's)."""
    if path == "onednn":
        return onednn_mlp.mlp_scores, None
    workspace = mkl_mlp.Workspace()
    if path == "kernel":

        def scores(layers, features):
            identity = FeatureNormalizer("none", num_features=features.shape[-1])
            return mkl_mlp.training_scores(layers, features, None, identity, workspace)

        return scores, workspace
    return partial(mkl_mlp.mlp_scores, workspace=workspace), workspace


def _use_path(monkeypatch, path: str) -> None:
    """The module takes ``path`` (while ``LTR_CPU_KERNELS`` allows): oneDNN's MLP as where MKL runs its
    AVX2 kernels, or set aside as where it runs AVX-512 (``kernels.mkl_vendor``), so that an MKL path runs
    (the kernel where ``kernels.mlp_cpu`` is available: the fixture turns it off for the other paths)."""
    if path == "onednn":
        monkeypatch.setattr(onednn_mlp.mkl_vendor, "active", lambda: False)
    else:
        monkeypatch.setattr(onednn_mlp, "enabled", lambda: False)


def _grads(module: nn.Module, run) -> tuple[torch.Tensor, list[torch.Tensor]]:
    module.zero_grad(set_to_none=True)
    value = run()
    value.backward()
    return value.detach(), [p.grad.clone() for p in module.parameters()]


def _assert_equal_to_autograd(scorer: nn.Module, scores_fn, features: torch.Tensor, **tolerance) -> None:
    """Value and every parameter's gradient of ``sum(scores * w)`` through ``scores_fn`` and through ``scorer``."""
    weights = torch.randn(features.shape[:-1])
    layers = onednn_mlp.plain_layers(scorer)
    fast_value, fast = _grads(scorer, lambda: (scores_fn(layers, features) * weights).sum())
    ref_value, ref = _grads(scorer, lambda: (scorer(features) * weights).sum())
    torch.testing.assert_close(fast_value, ref_value, rtol=1e-5, atol=1e-5)
    for a, b in zip(fast, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("hidden", [(), (7,), (256, 128, 64)])
def test_values_and_gradients_equal_autograd(path, hidden):
    torch.manual_seed(0)
    scorer = MLPScorer(13, hidden=hidden)
    assert onednn_mlp.plain_layers(scorer) is not None and len(onednn_mlp.plain_layers(scorer)) == len(hidden) + 1
    scores_fn, workspace = _scores_fn(path)
    _assert_equal_to_autograd(scorer, scores_fn, torch.randn(5, 11, 13))
    if workspace is not None:  # each hidden layer's output, and (a product at a time) its gradient
        assert len(workspace) == (1 if path == "kernel" else 2) * len(hidden)


@pytest.mark.parametrize("path", PATHS)
def test_layers_without_bias_and_of_equal_widths(path):
    torch.manual_seed(7)
    scorer = MLPScorer(8, hidden=(8, 8))
    for linear in onednn_mlp.plain_layers(scorer)[::2]:
        linear.bias = None
    _assert_equal_to_autograd(scorer, _scores_fn(path)[0], torch.randn(4, 6, 8))


@pytest.mark.parametrize("path", PATHS)
def test_input_gradient_when_the_input_needs_one(path):
    torch.manual_seed(1)
    scorer = MLPScorer(6, hidden=(8, 4))
    features = torch.randn(9, 6, requires_grad=True)
    _scores_fn(path)[0](onednn_mlp.plain_layers(scorer), features).square().sum().backward()
    fast, features.grad = features.grad.clone(), None
    scorer(features).square().sum().backward()
    torch.testing.assert_close(fast, features.grad, rtol=1e-4, atol=1e-6)
    # and the finite differences of the function itself, in float64 through the reference network
    assert torch.autograd.gradcheck(lambda x: scorer.double()(x), (features.detach().double().requires_grad_(),))


@pytest.mark.parametrize("path", PATHS)
def test_other_networks_and_inputs_take_the_generic_path(path, monkeypatch):
    _use_path(monkeypatch, path)
    assert onednn_mlp.plain_layers(MLPScorer(4, hidden=(8,), dropout=0.1)) is None
    assert onednn_mlp.plain_layers(MLPScorer(4, hidden=(8,), norm="layer")) is None
    assert onednn_mlp.plain_layers(MLPScorer(4, hidden=(8,), activation="gelu")) is None
    assert onednn_mlp.plain_layers(MLPScorer(4, hidden=(8,), members=3)) is None
    scorer, features = MLPScorer(4, hidden=(8,)), torch.randn(2, 3, 4)
    applies = MODULES[path].applies
    assert applies(scorer, features) is not None
    assert applies(MLPScorer(4, hidden=(8,), dropout=0.1), features) is None
    assert applies(scorer, features.double()) is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert applies(scorer, features) is None
    other = "mkl" if path == "onednn" else "onednn"
    assert MODULES[other].applies(scorer, features) is None  # one path at a time


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", ["zscore", "none", "log1p"])
@pytest.mark.parametrize("loss", [partial(lambdarank_loss, k=10), ranknet_loss])
def test_training_loss_equals_the_generic_path_and_padding_never_leaks(path, loss, kind, monkeypatch):
    """The module's training loss through the path and through the generic one (``LTR_CPU_KERNELS=0``
    turns off both the MLP paths and the loss kernel, so compare against the same loss path), over two
    steps so that the second reuses the first's buffers; padded entries hold NaN and inf, and nothing
    non-finite comes out."""
    _use_path(monkeypatch, path)
    torch.manual_seed(4)
    model = RankerModule(
        partial(MLPScorer, hidden=(32, 16)),
        loss,
        partial(torch.optim.Adam),
        n_features=6,
        normalizer=FeatureNormalizer(kind, torch.randn(6), torch.rand(6) + 0.5),
    )
    applies = MODULES[path].applies
    for step in range(2):
        features = torch.randn(4, 20, 6) + step
        labels = torch.randint(0, 5, (4, 20)).float()
        mask = torch.arange(20) < torch.tensor([20, 13, 1, 0])[:, None]
        features[~mask] = float("nan")
        features[~mask & (torch.arange(20) % 2 == 0)] = float("inf")
        labels[~mask] = float("nan")
        monkeypatch.setenv("LTR_CPU_KERNELS", "1")
        assert applies(model.scorer, features) is not None
        fast_value, fast = _grads(model, lambda: model._loss_of(features, labels, mask))
        monkeypatch.setenv("LTR_CPU_KERNELS", "0")
        assert applies(model.scorer, features) is None
        ref_value, ref = _grads(model, lambda: model._loss_of(features, labels, mask))
        assert torch.isfinite(fast_value)
        torch.testing.assert_close(fast_value, ref_value, rtol=1e-5, atol=1e-6)
        for a, b in zip(fast, ref, strict=True):
            assert torch.isfinite(a).all()
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    # per product: the input buffer for none and zscore, outputs and gradients; the kernel: the outputs
    buffers = {"onednn": 0, "mkl": 5 if kind != "log1p" else 4, "kernel": 2}[path]
    assert len(model._workspace) == buffers


# ---- the MKL path's buffers


def test_buffers_are_reused_and_grown_across_steps_of_any_size():
    """Steps of 40, 25 and 90 rows through one workspace: each equals autograd, the 25-row step
    reuses the 40-row buffers (same storage), the 90-row step grows them."""
    torch.manual_seed(2)
    scorer = MLPScorer(5, hidden=(16, 8))
    scores_fn, workspace = _scores_fn("mkl")
    storages = []
    for rows in (40, 25, 90):
        _assert_equal_to_autograd(scorer, scores_fn, torch.randn(rows, 5))
        storages.append(workspace.rows("hidden0", 1, 16).data_ptr())
    assert storages[0] == storages[1] != storages[2]


@pytest.mark.parametrize("path", MKL_PATHS)
def test_a_second_forward_before_the_backward_is_refused_not_wrong(path):
    """The second forward overwrites the buffers the first one saved: autograd's version check
    refuses the first backward rather than returning gradients of the second batch."""
    scorer = MLPScorer(4, hidden=(8,))
    scores_fn, _ = _scores_fn(path)
    layers = onednn_mlp.plain_layers(scorer)
    first = scores_fn(layers, torch.randn(6, 4)).sum()
    scores_fn(layers, torch.randn(6, 4)).sum()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        first.backward()


@pytest.mark.parametrize("path", MKL_PATHS)
def test_the_module_refuses_a_backward_through_overwritten_buffers(path, monkeypatch):
    """Two training losses before one backward: the second wrote the buffers (normalized input and
    activations) the first saved, and the first backward is refused."""
    _use_path(monkeypatch, path)
    model = RankerModule(partial(MLPScorer, hidden=(8,)), ranknet_loss, torch.optim.Adam, n_features=3)
    labels, mask = torch.tensor([[1.0, 0.0, 2.0]]), torch.ones(1, 3, dtype=torch.bool)
    first = model._loss_of(torch.randn(1, 3, 3), labels, mask)
    model._loss_of(torch.randn(1, 3, 3), labels, mask)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        first.backward()


@pytest.mark.parametrize("path", MKL_PATHS[1:])  # the kernel
def test_the_kernel_refuses_changed_features_and_a_second_derivative(path):
    """The kernel's backward reads the features again: changed in place since the forward, autograd refuses
    it (not a wrong gradient); its backward is not differentiable, and says so when asked to be."""
    scorer = MLPScorer(4, hidden=(8,))
    scores_fn, workspace = _scores_fn(path)
    layers = onednn_mlp.plain_layers(scorer)
    features = torch.randn(6, 4)
    loss = scores_fn(layers, features).square().sum()
    features.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
    loss = scores_fn(layers, torch.randn(6, 4)).square().sum()
    (grad,) = torch.autograd.grad(loss, [layers[0].weight], create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        grad.sum().backward()
    assert len(workspace) == 1  # the kernel ran: its one hidden buffer, none of the per-product path's


@pytest.mark.parametrize("path", MKL_PATHS[1:])  # the kernel
def test_a_normalizer_that_learns_gets_its_gradient(path):
    """A normalizer with parameters: its gradient through the MLP equals autograd's (the kernel computes no
    input gradient, so such inputs go a product at a time)."""

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.full((5,), 0.5))

        def forward(self, features, mask=None):
            return features * self.weight

    torch.manual_seed(8)
    scorer, normalizer = MLPScorer(5, hidden=(6,)), Scale()
    layers, features = onednn_mlp.plain_layers(scorer), torch.randn(3, 4, 5)
    mkl_mlp.training_scores(layers, features, None, normalizer, mkl_mlp.Workspace()).square().sum().backward()
    fast, normalizer.weight.grad = normalizer.weight.grad.clone(), None
    scorer(normalizer(features)).square().sum().backward()
    torch.testing.assert_close(fast, normalizer.weight.grad, rtol=1e-4, atol=1e-6)


def test_copies_of_a_module_start_with_an_empty_workspace():
    workspace = mkl_mlp.Workspace()
    workspace.rows("hidden0", 10, 3)
    assert len(copy.deepcopy(workspace)) == 0
    assert len(pickle.loads(pickle.dumps(workspace))) == 0


@pytest.mark.parametrize("kind", ["none", "zscore"])
def test_normalize_into_writes_what_forward_returns(kind):
    torch.manual_seed(3)
    normalizer = FeatureNormalizer(kind, torch.randn(6) * 100, torch.rand(6) + 0.5)
    features = torch.randn(3, 7, 6) * 1000 + 5000  # raw, large offsets: the same arithmetic, bit for bit
    mask = torch.arange(7) < torch.tensor([7, 2, 0])[:, None]
    features[~mask] = float("nan")
    out = torch.empty_like(features)
    assert normalizer.normalize_into(features, mask, out) is out
    assert torch.equal(out, normalizer(features, mask))
    assert torch.equal(normalizer.normalize_into(features[:1], None, out[:1]), normalizer(features[:1]))


def test_normalize_into_declines_the_kinds_it_does_not_write_and_features_that_need_a_gradient():
    for kind in ("log1p", "query_zscore"):
        normalizer = FeatureNormalizer(kind, num_features=3)
        assert normalizer.normalize_into(torch.ones(1, 2, 3), None, torch.empty(1, 2, 3)) is None
    wanting = torch.ones(1, 2, 3, requires_grad=True)
    zscore = FeatureNormalizer("zscore", num_features=3)
    assert zscore.normalize_into(wanting, None, torch.empty(1, 2, 3)) is None
    with torch.no_grad():
        assert zscore.normalize_into(wanting, None, torch.empty(1, 2, 3)) is not None


@pytest.mark.parametrize("path", MKL_PATHS)
def test_features_that_need_a_gradient_get_it_through_the_module(path, monkeypatch):
    """Attributions: the raw features' gradient through the MKL paths equals the generic path's (the
    kernel computes no input gradient: such features go a product at a time)."""
    _use_path(monkeypatch, path)
    torch.manual_seed(5)
    normalizer = FeatureNormalizer("zscore", torch.randn(6), torch.rand(6) + 0.5)
    model = RankerModule(
        partial(MLPScorer, hidden=(8, 8)), ranknet_loss, torch.optim.Adam, n_features=6, normalizer=normalizer
    )
    labels, mask = torch.randint(0, 3, (2, 5)).float(), torch.ones(2, 5, dtype=torch.bool)
    gradients = []
    for kernels in ("1", "0"):
        monkeypatch.setenv("LTR_CPU_KERNELS", kernels)
        features = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(6)).requires_grad_()
        model._loss_of(features, labels, mask).backward()
        gradients.append(features.grad)
    torch.testing.assert_close(gradients[0], gradients[1], rtol=1e-4, atol=1e-6)
