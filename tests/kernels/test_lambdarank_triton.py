"""The LambdaRank Triton kernel against the tensor path of the pairwise scaffold: on CPU through
Triton's interpreter (CI), and through the loss on CUDA when present."""

from __future__ import annotations

import pytest
import torch

from kernels import lambdarank_triton
from losses.lambdarank import lambdarank_loss
from losses.pairwise import delta_ndcg_weight, logistic_pair, pairwise_sums
from metrics.ranking import discounts, gains, ideal_dcg, sort_by_scores
from tests.conftest import cuda_only

pytestmark = pytest.mark.skipif(lambdarank_triton.triton is None, reason="triton is not installed")


def _inputs(batch: int, length: int, seed: int, device: str = "cpu"):
    generator = torch.Generator().manual_seed(seed)
    scores = (torch.randn(batch, length, generator=generator) * 2).round() / 2  # ties too
    labels = torch.randint(0, 5, (batch, length), generator=generator).float()
    mask = torch.rand(batch, length, generator=generator) > 0.2
    mask[-1] = False  # a list with no real document
    return scores.to(device), labels.to(device), mask.to(device)


def _tensor_path(scores, labels, mask, monkeypatch, **options):
    monkeypatch.setenv("LTR_CPU_KERNELS", "0")
    monkeypatch.setenv("LTR_TRITON_KERNELS", "0")
    with torch.no_grad():
        return pairwise_sums(scores, labels, mask, pair_fn=logistic_pair, lambdaweight_fn=delta_ndcg_weight, **options)


def _kernel(scores, labels, mask, *, k=None, sigma=1.0, block_i=16, block_j=64):
    """The kernel on ranked inputs, its gradient put back in list order."""
    length = scores.shape[1]
    order = sort_by_scores(scores, mask)
    s, y, m = scores.gather(1, order), labels.gather(1, order), mask.gather(1, order)
    discount = discounts(length + 1, scores.device, scores.dtype)
    if k is not None:
        discount = discount * (torch.arange(length + 1, device=scores.device) < k)
    inverse = 1.0 / ideal_dcg(labels, mask, k=k, gain="exp2")
    inverse = torch.where(torch.isfinite(inverse), inverse, torch.zeros_like(inverse))
    top = length if k is None else min(k, length)
    cost, grad, count = lambdarank_triton.lambdarank_pairs(
        s, y, gains(y, "exp2") * m, m.sum(1), discount, inverse, sigma=sigma, top=top, block_i=block_i, block_j=block_j
    )
    return cost, torch.zeros_like(grad).scatter(1, order, grad), count


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
def test_interpreted_kernel_equals_the_tensor_path(shape, options, blocks, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    scores, labels, mask = _inputs(*shape, seed=sum(shape))
    expected = _tensor_path(scores, labels, mask, monkeypatch, **options)
    got = _kernel(scores, labels, mask, block_i=blocks[0], block_j=blocks[1], **options)
    for name, ours, reference in zip(("cost", "grad", "count"), got, expected, strict=True):
        torch.testing.assert_close(ours, reference, rtol=2e-5, atol=1e-6, msg=name)


def test_a_failing_launch_falls_back_once_with_a_warning(monkeypatch):
    monkeypatch.setattr(lambdarank_triton, "_FAILED", [])

    def broken(*args, **kwargs):
        raise RuntimeError("no such PTX version")

    monkeypatch.setattr(lambdarank_triton, "lambdarank_pairs", broken)
    with pytest.warns(UserWarning, match="tensor path"):
        assert lambdarank_triton.try_lambdarank_pairs() is None
    assert not lambdarank_triton.enabled()


@cuda_only
@pytest.mark.parametrize("k", [None, 10])
def test_on_cuda_the_loss_uses_the_kernel_and_matches_the_tensor_path(k, monkeypatch):
    scores, labels, mask = _inputs(32, 300, seed=5, device="cuda")
    expected = _tensor_path(scores, labels, mask, monkeypatch, k=k)
    monkeypatch.setenv("LTR_TRITON_KERNELS", "1")
    calls = []
    real = lambdarank_triton.lambdarank_pairs
    monkeypatch.setattr(lambdarank_triton, "lambdarank_pairs", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    x = scores.clone().requires_grad_(True)
    value = lambdarank_loss(x, labels, mask, k=k, reduction="sum")
    value.backward()
    assert calls, "the Triton kernel did not run"
    torch.testing.assert_close(value.detach(), expected[0].sum(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, expected[1], rtol=1e-4, atol=1e-6)
