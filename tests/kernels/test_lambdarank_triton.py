"""The pairwise Triton kernel (RankNet, LambdaRank, LambdaLoss) against the tensor path of the pairwise
scaffold: on CPU through Triton's interpreter (CI), and through the losses on CUDA when present."""

from __future__ import annotations

import pytest
import torch

from kernels import lambdarank_triton
from losses.lambdaloss import lambdaloss
from losses.lambdarank import lambdarank_loss
from losses.pairwise import _ranked_kernel_sums, fused_weighting, pairwise_sums
from losses.ranknet import ranknet_loss
from tests.conftest import cuda_only
from tests.kernels.test_lambdarank_cpu import PAIRWISE

pytestmark = pytest.mark.skipif(lambdarank_triton.triton is None, reason="triton is not installed")


def _inputs(batch: int, length: int, seed: int, device: str = "cpu"):
    generator = torch.Generator().manual_seed(seed)
    scores = (torch.randn(batch, length, generator=generator) * 2).round() / 2  # ties too
    labels = torch.randint(0, 5, (batch, length), generator=generator).float()
    mask = torch.rand(batch, length, generator=generator) > 0.2
    mask[-1] = False  # a list with no real document
    return scores.to(device), labels.to(device), mask.to(device)


def _tensor_path(scores, labels, mask, monkeypatch, loss="lambdarank", **options):
    monkeypatch.setenv("LTR_CPU_KERNELS", "0")
    monkeypatch.setenv("LTR_TRITON_KERNELS", "0")
    pair_fn, weight = PAIRWISE[loss]
    with torch.no_grad():
        return pairwise_sums(scores, labels, mask, pair_fn=pair_fn, lambdaweight_fn=weight, **options)


@pytest.mark.parametrize("loss", list(PAIRWISE))
@pytest.mark.parametrize(
    ("shape", "options", "blocks"),
    [
        ((4, 37), {}, (16, 64)),  # one column tile, partial
        ((3, 150), {}, (16, 32)),  # several row programs and column tiles
        ((3, 150), {"k": 10}, (8, 64)),  # rows only in the top 10
        ((2, 9), {"k": 50, "sigma": 2.0}, (4, 4)),
        ((2, 1), {}, (16, 64)),  # single documents: no pair
    ],
)
def test_interpreted_kernel_equals_the_tensor_path(shape, options, blocks, loss, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    scores, labels, mask = _inputs(*shape, seed=sum(shape))
    expected = _tensor_path(scores, labels, mask, monkeypatch, loss=loss, **options)
    real = lambdarank_triton.logistic_pairs
    tiles = {"block_i": blocks[0], "block_j": blocks[1]}
    monkeypatch.setattr(lambdarank_triton, "logistic_pairs", lambda *a, **kw: real(*a, **kw, **tiles))
    weighting = fused_weighting(*PAIRWISE[loss])
    sigma, k = options.get("sigma", 1.0), options.get("k")
    got = _ranked_kernel_sums(scores, labels, mask, weighting, sigma=sigma, k=k, gain="exp2")
    for name, ours, reference in zip(("cost", "grad", "count"), got, expected, strict=True):
        scale = max(1.0, float(reference.abs().max()))
        torch.testing.assert_close(ours, reference, rtol=2e-5, atol=1e-6 * scale, msg=name)


def test_a_failing_launch_falls_back_once_with_a_warning(monkeypatch):
    monkeypatch.setattr(lambdarank_triton, "_FAILED", [])

    def broken(*args, **kwargs):
        raise RuntimeError("no such PTX version")

    monkeypatch.setattr(lambdarank_triton, "logistic_pairs", broken)
    with pytest.warns(UserWarning, match="tensor path"):
        assert lambdarank_triton.try_logistic_pairs() is None
    assert not lambdarank_triton.enabled()


@cuda_only
@pytest.mark.parametrize(
    "loss",
    [
        lambdarank_loss,
        lambda *a: lambdarank_loss(*a, k=10),
        ranknet_loss,
        lambdaloss,
        lambda *a: lambdaloss(*a, k=10, scheme="ndcg_loss2"),
    ],
)
def test_on_cuda_the_losses_use_the_kernel_and_match_the_tensor_path(loss, monkeypatch):
    scores, labels, mask = _inputs(32, 300, seed=5, device="cuda")
    calls, real = [], lambdarank_triton.logistic_pairs
    monkeypatch.setattr(lambdarank_triton, "logistic_pairs", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    results = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("LTR_TRITON_KERNELS", flag)
        x = scores.clone().requires_grad_(True)
        value = loss(x, labels, mask)
        value.backward()
        results[flag] = (value.detach(), x.grad)
    assert calls == [1], "the Triton kernel did not run"
    for ours, reference in zip(results["1"], results["0"], strict=True):
        scale = max(1.0, float(reference.abs().max()))
        torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-6 * scale)
