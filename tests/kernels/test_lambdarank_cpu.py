"""The fused CPU kernel of the logistic pairwise losses (RankNet, LambdaRank, LambdaLoss) against the
tensor path of the pairwise scaffold (value, lambdas, pair counts), over cut-offs, ties, padding,
gains and shapes; and the fallback without it."""

from __future__ import annotations

import pytest
import torch

from kernels import lambdarank_cpu
from losses.lambdaloss import lambdaloss
from losses.lambdarank import lambdarank_loss, lambdas
from losses.pairwise import (
    binary_logistic_pair,
    delta_ndcg_weight,
    logistic_pair,
    ndcg_loss2_weight,
    ndcg_loss2pp_weight,
    pairwise_sums,
)
from losses.ranknet import ranknet_loss


@pytest.fixture(scope="module", autouse=True)
def built():
    assert lambdarank_cpu.kernel() is not None, "the LambdaRank CPU kernel could not be built"


def _inputs(batch: int, length: int, seed: int, *, ties: bool = False, levels: int = 5):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, length, generator=generator)
    if ties:  # scores on a coarse grid: many ties, broken by list position in both paths
        scores = (scores * 2).round() / 2
    labels = torch.randint(0, levels, (batch, length), generator=generator).float()
    lengths = torch.randint(0, length + 1, (batch,), generator=generator)
    lengths[0] = length
    mask = torch.arange(length)[None] < lengths[:, None]
    # real documents anywhere in the list, not only first
    mask = mask.gather(1, torch.argsort(torch.rand(batch, length, generator=generator), dim=1))
    return scores, labels, mask


PAIRWISE = {  # every pair function and weight the kernel computes
    "ranknet": (logistic_pair, None),
    "lambdarank": (logistic_pair, delta_ndcg_weight),
    "lambdaloss ndcg_loss2": (binary_logistic_pair, ndcg_loss2_weight),
    "lambdaloss ndcg_loss2pp": (binary_logistic_pair, ndcg_loss2pp_weight(10.0)),
    "lambdaloss lambdarank": (binary_logistic_pair, delta_ndcg_weight),
}


def _sums(scores, labels, mask, *, fused: bool, monkeypatch, loss: str = "lambdarank", **options):
    monkeypatch.setenv("LTR_CPU_KERNELS", "1" if fused else "0")
    pair_fn, weight = PAIRWISE[loss]
    with torch.no_grad():
        return pairwise_sums(scores, labels, mask, pair_fn=pair_fn, lambdaweight_fn=weight, **options)


CASES = {
    "all pairs": ({}, {}),
    "k=10": ({}, {"k": 10}),
    "k=1": ({}, {"k": 1}),
    "k longer than the list": ({}, {"k": 500}),
    "sigma=2.5": ({}, {"sigma": 2.5}),
    "linear gain": ({}, {"gain": "linear"}),
    "tied scores": ({"ties": True}, {}),
    "binary labels": ({"levels": 2}, {"k": 5}),
}


@pytest.mark.parametrize("loss", list(PAIRWISE))
@pytest.mark.parametrize("shape", [(7, 33), (3, 200), (1, 2)])
@pytest.mark.parametrize("case", list(CASES))
def test_fused_kernel_equals_the_tensor_path(case, shape, loss, monkeypatch):
    data_options, options = CASES[case]
    scores, labels, mask = _inputs(*shape, seed=sum(shape), **data_options)
    fused = _sums(scores, labels, mask, fused=True, monkeypatch=monkeypatch, loss=loss, **options)
    tensor = _sums(scores, labels, mask, fused=False, monkeypatch=monkeypatch, loss=loss, **options)
    for name, ours, reference in zip(("cost", "grad", "count"), fused, tensor, strict=True):
        # float32 sums in another order: absolute error relative to the largest entry (RankNet's
        # unnormalized lambdas reach ~100 on 200 documents)
        scale = max(1.0, float(reference.abs().max()))
        torch.testing.assert_close(ours, reference, rtol=2e-5, atol=1e-6 * scale, msg=name)
    assert torch.equal(fused[1][~mask], torch.zeros_like(fused[1][~mask]))  # nothing reaches padding


LOSSES = {
    "ranknet": ranknet_loss,
    "lambdarank": lambdarank_loss,
    "lambdaloss": lambdaloss,
    "lambdaloss k=5": lambda *a: lambdaloss(*a, k=5, scheme="ndcg_loss2"),
}


@pytest.mark.parametrize("loss", list(LOSSES))
def test_the_loss_uses_it_and_autograd_gets_the_same_gradient(loss, monkeypatch):
    scores, labels, mask = _inputs(16, 64, seed=3)
    calls, real = [], lambdarank_cpu.logistic_pairs
    monkeypatch.setattr(lambdarank_cpu, "logistic_pairs", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    results = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("LTR_CPU_KERNELS", flag)
        x = scores.clone().requires_grad_(True)
        value = LOSSES[loss](x, labels, mask)
        value.backward()
        results[flag] = (value.detach(), x.grad)
    assert calls == [1]  # the run with the kernel allowed used it
    for ours, reference in zip(results["1"], results["0"], strict=True):
        torch.testing.assert_close(ours, reference, rtol=2e-5, atol=1e-6)


def test_lambdas_take_the_kernel_too(monkeypatch):
    scores, labels, mask = _inputs(8, 40, seed=4)
    monkeypatch.setenv("LTR_CPU_KERNELS", "1")
    fused = lambdas(scores, labels, mask, k=10)
    monkeypatch.setenv("LTR_CPU_KERNELS", "0")
    torch.testing.assert_close(fused, lambdas(scores, labels, mask, k=10), rtol=2e-5, atol=1e-6)


def test_lists_without_pairs_give_zero(monkeypatch):
    scores = torch.randn(3, 5)
    labels = torch.tensor([[1.0, 1, 1, 1, 1], [0, 2, 0, 0, 0], [3, 1, 2, 0, 1]])
    mask = torch.tensor([[True] * 5, [False, True, False, False, False], [False] * 5])
    cost, grad, count = _sums(scores, labels, mask, fused=True, monkeypatch=monkeypatch)
    assert cost.tolist() == [0.0, 0.0, 0.0] and count.tolist() == [0.0, 0.0, 0.0]
    assert torch.equal(grad, torch.zeros_like(grad))


def test_without_the_kernel_the_tensor_path_runs(monkeypatch):
    scores, labels, mask = _inputs(4, 20, seed=9)
    expected = _sums(scores, labels, mask, fused=False, monkeypatch=monkeypatch)
    monkeypatch.setattr(lambdarank_cpu.KERNEL, "_library", None)
    monkeypatch.setattr(lambdarank_cpu.KERNEL, "_tried", True)
    ones = torch.ones(21)
    options = {"unit": False, "rho": 1.0, "delta": 0.0, "scale": 1.0, "sigma": 1.0, "top": 20}
    assert lambdarank_cpu.logistic_pairs(scores, labels, labels, mask, ones, ones, **options) is None
    got = _sums(scores, labels, mask, fused=True, monkeypatch=monkeypatch)
    for ours, reference in zip(got, expected, strict=True):
        torch.testing.assert_close(ours, reference)


@pytest.mark.parametrize("fused", [True, False])
def test_a_cutoff_below_one_is_refused_on_both_paths(fused, monkeypatch):
    monkeypatch.setenv("LTR_CPU_KERNELS", "1" if fused else "0")
    scores, labels, mask = _inputs(2, 6, seed=0)
    for k in (0, -1):
        with pytest.raises(ValueError, match="k must be >= 1"):
            lambdarank_loss(scores, labels, mask, k=k)


def test_the_kernel_refuses_inputs_it_cannot_read():
    """The C loop trusts its pointers: the wrapper refuses shapes that would make it read out of
    bounds, and converts dtypes (float64 scores, a float mask) rather than misreading them."""
    scores, labels, mask = _inputs(2, 5, seed=1)
    discount = torch.ones(6)
    options = {"unit": False, "rho": 1.0, "delta": 0.0, "scale": 1.0, "sigma": 1.0, "top": 5}
    with pytest.raises(ValueError, match="L \\+ 1"):
        lambdarank_cpu.logistic_pairs(scores, labels, labels, mask, discount[:5], discount, **options)
    with pytest.raises(ValueError, match="\\[B, L\\]"):
        lambdarank_cpu.logistic_pairs(scores, labels[:, :4], labels, mask, discount, discount, **options)
    expected = lambdarank_cpu.logistic_pairs(scores, labels, labels, mask, discount, discount, **options)
    converted = lambdarank_cpu.logistic_pairs(
        scores.double(), labels, labels, mask.float(), discount.double(), discount, **options
    )
    for ours, reference in zip(converted, expected, strict=True):
        assert torch.equal(ours, reference)
