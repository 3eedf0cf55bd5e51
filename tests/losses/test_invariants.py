"""One parametrized test per invariant, over every loss (the rax habit).

Padding (whatever it holds, NaN and inf included), permutation of the list, degenerate lists,
float64 gradcheck, float32 math under bf16/fp16 autocast, and ``mask=None``.
"""

from __future__ import annotations

import pytest
import torch

from losses import (
    approx_ndcg_loss,
    lambdaloss,
    lambdarank_loss,
    listmle_loss,
    listnet_loss,
    margin_cost,
    neural_ndcg_loss,
    ranknet_loss,
)

LOSSES = {
    "ranknet": lambda s, y, m: ranknet_loss(s, y, m),
    "ranknet_sigma2_none": lambda s, y, m: ranknet_loss(s, y, m, sigma=2.0, reduction="none").sum(),
    "lambdarank": lambda s, y, m: lambdarank_loss(s, y, m),
    "lambdarank@3_linear": lambda s, y, m: lambdarank_loss(s, y, m, k=3, gain="linear"),
    "margin": lambda s, y, m: margin_cost(s, y, m, delta=0.5),
    "listnet": lambda s, y, m: listnet_loss(s, y, m),
    "listmle": lambda s, y, m: listmle_loss(s, y, m),
    "approxndcg": lambda s, y, m: approx_ndcg_loss(s, y, m),
    "approxndcg_alpha3_linear": lambda s, y, m: approx_ndcg_loss(s, y, m, alpha=3.0, gain="linear"),
    "neuralndcg": lambda s, y, m: neural_ndcg_loss(s, y, m),
    "neuralndcg@3_rows": lambda s, y, m: neural_ndcg_loss(s, y, m, k=3, sinkhorn_iterations=0, temperature=0.5),
    "lambdaloss_2pp": lambda s, y, m: lambdaloss(s, y, m),
    "lambdaloss_2@3": lambda s, y, m: lambdaloss(s, y, m, scheme="ndcg_loss2", k=3),
    "lambdaloss_lambdarank": lambda s, y, m: lambdaloss(s, y, m, scheme="lambdarank", sigma=0.7),
}


def batch(seed: int, b: int = 4, n: int = 7, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(b, n, generator=g, dtype=dtype)
    labels = torch.randint(0, 4, (b, n), generator=g).to(dtype)
    labels[:, 0], labels[:, 1] = 3.0, 0.0  # every list has two different labels
    mask = torch.ones(b, n, dtype=torch.bool)
    mask[1, n - 2 :] = False
    return scores, labels, mask


@pytest.mark.parametrize("fill", [float("nan"), float("inf"), float("-inf"), 9.0])
@pytest.mark.parametrize("name", LOSSES)
def test_padding_never_reaches_value_or_gradient(name, fill):
    fn = LOSSES[name]
    scores, labels, _ = batch(1)
    real = scores[:, :5].clone().requires_grad_(True)
    padded = torch.cat([scores[:, :5], torch.full((4, 3), fill, dtype=scores.dtype)], 1).requires_grad_(True)
    padded_labels = torch.cat([labels[:, :5], torch.full((4, 3), fill, dtype=labels.dtype)], 1)
    mask = torch.arange(8)[None, :].expand(4, 8) < 5
    value, padded_value = fn(real, labels[:, :5], None), fn(padded, padded_labels, mask)
    torch.testing.assert_close(padded_value, value, rtol=1e-10, atol=1e-12)
    value.backward()
    padded_value.backward()
    torch.testing.assert_close(padded.grad[:, :5], real.grad, rtol=1e-10, atol=1e-12)
    assert torch.equal(padded.grad[:, 5:], torch.zeros(4, 3, dtype=scores.dtype))


@pytest.mark.parametrize("name", LOSSES)
def test_permuting_the_list_permutes_the_gradient(name):
    fn = LOSSES[name]
    scores, labels, mask = batch(2)
    perm = torch.randperm(scores.shape[1], generator=torch.Generator().manual_seed(3))
    a = scores.clone().requires_grad_(True)
    b = scores[:, perm].clone().requires_grad_(True)
    value, permuted = fn(a, labels, mask), fn(b, labels[:, perm], mask[:, perm])
    torch.testing.assert_close(permuted, value, rtol=1e-10, atol=1e-12)
    value.backward()
    permuted.backward()
    torch.testing.assert_close(b.grad, a.grad[:, perm], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", LOSSES)
def test_degenerate_lists_give_zero_and_zero_gradient(name):
    fn = LOSSES[name]
    scores = torch.randn(5, 5, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([[1.0] * 5, [0.0] * 5, [2.0, 0, 0, 0, 0], [3.0, 1, 2, 0, 1], [2.0, 2, 0, 1, 3]])
    mask = torch.tensor([[True] * 5, [True] * 5, [True] + [False] * 4, [False] * 5, [True, True, False, False, False]])
    value = fn(scores, labels.double(), mask)
    value.backward()
    assert value.item() == 0.0
    assert torch.equal(scores.grad, torch.zeros_like(scores))


@pytest.mark.parametrize("name", LOSSES)
def test_empty_batch_and_zero_length_lists(name):
    fn = LOSSES[name]
    for shape in [(0, 4), (2, 0)]:
        scores = torch.zeros(shape, requires_grad=True)
        value = fn(scores, torch.zeros(shape), None)
        value.backward()
        assert value.item() == 0.0


@pytest.mark.parametrize("name", LOSSES)
def test_gradcheck_float64(name):
    fn = LOSSES[name]
    scores, labels, mask = batch(4, b=3, n=6)
    scores.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda s: fn(s, labels, mask), (scores,))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", LOSSES)
def test_float32_math_under_autocast(name, dtype):
    fn = LOSSES[name]
    scores, labels, mask = batch(5, dtype=torch.float32)
    reference = fn(scores.to(dtype).float(), labels, mask)
    low = scores.to(dtype).requires_grad_(True)
    with torch.autocast("cpu", dtype=dtype):  # the parametrized low precision
        value = fn(low, labels, mask)
    assert value.dtype == torch.float32
    torch.testing.assert_close(value, reference, rtol=1e-5, atol=1e-5)
    value.backward()
    assert low.grad.dtype == dtype and torch.isfinite(low.grad).all()


@pytest.mark.parametrize("name", LOSSES)
def test_no_mask_is_all_real(name):
    fn = LOSSES[name]
    scores, labels, _ = batch(6)
    torch.testing.assert_close(fn(scores, labels, None), fn(scores, labels, torch.ones_like(labels, dtype=torch.bool)))


@pytest.mark.parametrize("name", ["lambdarank", "approxndcg", "neuralndcg", "lambdaloss_2pp"])
def test_exp2_labels_that_overflow_are_refused(name):
    scores = torch.randn(1, 3)
    with pytest.raises(ValueError, match="128"):
        LOSSES[name](scores, torch.tensor([[128.0, 0.0, 1.0]]), None)
    # the same label in padding is ignored
    mask = torch.tensor([[False, True, True]])
    assert torch.isfinite(LOSSES[name](scores, torch.tensor([[128.0, 0.0, 1.0]]), mask))
