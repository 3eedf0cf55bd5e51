"""RankNet, LambdaRank and margin lambdas: finite differences, slow references, edge cases."""

from __future__ import annotations

import math

import pytest
import torch

import losses.pairwise as lambdarank_module
from losses import lambdarank_loss, lambdas, linklearn_hinge, margin_cost, margin_lambdas, ranknet_loss


def batch(seed: int, b: int = 4, n: int = 7, levels: int = 4, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(b, n, generator=g, dtype=dtype)
    labels = torch.randint(0, levels, (b, n), generator=g).to(dtype)
    mask = torch.ones(b, n, dtype=torch.bool)
    mask[1, n - 2 :] = False
    return scores, labels, mask


def slow_ndcg_at_k(order_labels: list[float], k: int | None, ideal: float) -> float:
    top = order_labels if k is None else order_labels[:k]
    return sum((2**rel - 1) / math.log2(r + 2) for r, rel in enumerate(top)) / ideal


def slow_lambdas(scores, labels, mask, *, sigma, k):
    """Loop over queries and pairs; |Delta NDCG| by really swapping two documents."""
    out = torch.zeros_like(scores)
    for b in range(scores.shape[0]):
        idx = [i for i in range(scores.shape[1]) if mask[b, i]]
        ranking = sorted(idx, key=lambda i: (-float(scores[b, i]), i))
        ideal_labels = sorted((float(labels[b, i]) for i in idx), reverse=True)
        top_labels = ideal_labels if k is None else ideal_labels[:k]
        ideal = sum((2**r - 1) / math.log2(p + 2) for p, r in enumerate(top_labels))
        if ideal == 0:
            continue
        base = slow_ndcg_at_k([float(labels[b, i]) for i in ranking], k, ideal)
        for i in idx:
            for j in idx:
                if labels[b, i] <= labels[b, j]:
                    continue
                swapped = list(ranking)
                pi, pj = swapped.index(i), swapped.index(j)
                swapped[pi], swapped[pj] = j, i
                delta = abs(slow_ndcg_at_k([float(labels[b, d]) for d in swapped], k, ideal) - base)
                w = sigma * delta / (1 + math.exp(sigma * float(scores[b, i] - scores[b, j])))
                out[b, i] += w
                out[b, j] -= w
    return out


@pytest.mark.parametrize("k", [None, 1, 3, 10])
@pytest.mark.parametrize("sigma", [1.0, 2.5])
def test_lambdas_match_slow_pairwise_reference(k, sigma):
    scores, labels, mask = batch(k or 0)
    scores[2, 3] = scores[2, 1]  # a tie in score: ranking by list position
    expected = slow_lambdas(scores, labels, mask, sigma=sigma, k=k)
    torch.testing.assert_close(lambdas(scores, labels, mask, sigma=sigma, k=k), expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("k", [None, 2, 5])
def test_lambdarank_gradient_is_minus_lambdas_exactly(k):
    scores, labels, mask = batch(1, dtype=torch.float32)
    scores.requires_grad_(True)
    lambdarank_loss(scores, labels, mask, k=k, reduction="sum").backward()
    assert torch.equal(scores.grad, -lambdas(scores, labels, mask, k=k))


def test_lambdas_long_list_topk_visits_only_k_rows(monkeypatch):
    visited = []
    real_chunks = lambdarank_module.row_chunks

    def spy(batch_size, rows, cols):
        visited.append(rows)
        yield from real_chunks(batch_size, rows, cols)

    monkeypatch.setattr(lambdarank_module, "row_chunks", spy)
    monkeypatch.setenv("LTR_CPU_KERNELS", "0")  # the tensor path's blocks (the CPU kernel holds O(L) a thread)
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 5000, generator=g)
    labels = torch.randint(0, 5, (2, 5000), generator=g).float()
    lam = lambdas(scores, labels, k=10)
    assert visited == [10]  # pair block is [B, k, L], never [B, L, L]
    assert torch.isfinite(lam).all() and lam.abs().sum() > 0
    # pairs with neither document in the top 10 have no |Delta NDCG@10|: only top-10 pairs count
    top = scores.argsort(-1, descending=True)[:, :10]
    assert (lam.gather(1, top) != 0).any()


def test_lambdarank_gradcheck():
    scores, labels, mask = batch(2)
    scores.requires_grad_(True)
    for k in (None, 3):
        assert torch.autograd.gradcheck(lambda s: lambdarank_loss(s, labels, mask, k=k, reduction="none"), (scores,))


def slow_ranknet(scores, labels, mask, sigma, targets=None):
    total, count = 0.0, 0
    for b in range(scores.shape[0]):
        for i in range(scores.shape[1]):
            for j in range(scores.shape[1]):
                if not (mask[b, i] and mask[b, j]):
                    continue
                if targets is None:
                    if labels[b, i] <= labels[b, j]:
                        continue
                    p = 1.0
                else:
                    if j <= i:
                        continue
                    p = float(targets[b, i, j])
                o = 1 / (1 + math.exp(-sigma * float(scores[b, i] - scores[b, j])))
                total += -p * math.log(o) - (1 - p) * math.log(1 - o)
                count += 1
    return total, count


@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.0])
def test_ranknet_matches_slow_reference(sigma):
    scores, labels, mask = batch(3)
    total, count = slow_ranknet(scores, labels, mask, sigma)
    assert ranknet_loss(scores, labels, mask, sigma=sigma, reduction="sum").item() == pytest.approx(total, rel=1e-10)
    assert ranknet_loss(scores, labels, mask, sigma=sigma).item() == pytest.approx(total / count, rel=1e-10)
    g = torch.Generator().manual_seed(4)
    targets = torch.rand(*scores.shape, scores.shape[1], generator=g, dtype=torch.float64)
    total, count = slow_ranknet(scores, labels, mask, sigma, targets)
    soft = ranknet_loss(scores, labels, mask, sigma=sigma, targets=targets, reduction="sum")
    assert soft.item() == pytest.approx(total, rel=1e-10)


def test_ranknet_gradcheck_hard_and_soft():
    scores, labels, mask = batch(5)
    scores.requires_grad_(True)
    targets = torch.rand(4, 7, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    assert torch.autograd.gradcheck(lambda s: ranknet_loss(s, labels, mask, sigma=1.7, reduction="none"), (scores,))
    assert torch.autograd.gradcheck(lambda s: ranknet_loss(s, labels, mask, targets=targets), (scores,))


def test_ranknet_stable_for_huge_score_gaps():
    scores = torch.tensor([[1e4, -1e4, 0.0]], requires_grad=True)
    labels = torch.tensor([[0.0, 2.0, 1.0]])
    loss = ranknet_loss(scores, labels, reduction="sum")
    loss.backward()
    assert loss.item() == pytest.approx(2e4 + 1e4 + 1e4, rel=1e-6)
    assert torch.isfinite(scores.grad).all()
    torch.testing.assert_close(scores.grad, torch.tensor([[2.0, -2.0, 0.0]]))


def test_ranknet_chunked_equals_unchunked(monkeypatch):
    scores, labels, mask = batch(6, b=3, n=40)
    scores.requires_grad_(True)
    full = ranknet_loss(scores, labels, mask)
    (grad_full,) = torch.autograd.grad(full, scores)
    monkeypatch.setattr("losses._common.PAIR_BLOCK_ELEMENTS", 3 * 40 * 3)  # 3 rows a block
    chunked = ranknet_loss(scores, labels, mask)
    (grad_chunked,) = torch.autograd.grad(chunked, scores)
    torch.testing.assert_close(full, chunked)
    torch.testing.assert_close(grad_full, grad_chunked)


LOSSES = {
    "ranknet": lambda s, y, m: ranknet_loss(s, y, m),
    "lambdarank": lambda s, y, m: lambdarank_loss(s, y, m),
    "lambdarank@3": lambda s, y, m: lambdarank_loss(s, y, m, k=3, gain="linear"),
    "margin": lambda s, y, m: margin_cost(s, y, m, delta=0.5),
}


@pytest.mark.parametrize("name", LOSSES)
def test_padding_never_changes_value_or_gets_gradient(name):
    fn = LOSSES[name]
    scores, labels, _mask = batch(7, dtype=torch.float32)
    real_scores = scores[2:3, :5].clone().requires_grad_(True)
    padded = torch.cat([real_scores, torch.tensor([[9.0, -9.0]])], 1).detach().requires_grad_(True)
    padded_labels = torch.cat([labels[2:3, :5], torch.tensor([[4.0, 4.0]])], 1)
    padded_mask = torch.tensor([[True] * 5 + [False] * 2])
    value = fn(real_scores, labels[2:3, :5], None)
    padded_value = fn(padded, padded_labels, padded_mask)
    torch.testing.assert_close(value, padded_value)
    value.backward()
    padded_value.backward()
    torch.testing.assert_close(padded.grad[:, :5], real_scores.grad)
    assert torch.equal(padded.grad[:, 5:], torch.zeros(1, 2))


@pytest.mark.parametrize("name", LOSSES)
def test_degenerate_lists_give_zero_loss_and_zero_gradient(name):
    fn = LOSSES[name]
    scores = torch.randn(4, 5, requires_grad=True)
    labels = torch.tensor([[1.0] * 5, [0.0] * 5, [2.0, 0, 0, 0, 0], [3.0, 1, 2, 0, 1]])
    mask = torch.tensor([[True] * 5, [True] * 5, [True, False, False, False, False], [False] * 5])
    value = fn(scores, labels, mask)
    value.backward()
    assert value.item() == 0.0
    assert torch.equal(scores.grad, torch.zeros_like(scores))


def test_empty_batch_and_zero_length_lists():
    for fn in LOSSES.values():
        scores = torch.zeros(0, 4, requires_grad=True)
        assert fn(scores, torch.zeros(0, 4), None).item() == 0.0
        scores = torch.zeros(2, 0, requires_grad=True)
        assert fn(scores, torch.zeros(2, 0), None).item() == 0.0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_float32_math_under_autocast(dtype):
    scores, labels, mask = batch(8, dtype=torch.float32)
    reference = {name: fn(scores, labels, mask) for name, fn in LOSSES.items()}
    low = scores.to(dtype).requires_grad_(True)
    with torch.autocast("cpu", dtype=dtype):  # the parametrized low precision
        for name, fn in LOSSES.items():
            value = fn(low, labels, mask)
            assert value.dtype == torch.float32, name
            torch.testing.assert_close(value, reference[name], atol=0.05, rtol=0.02, msg=name)
            value.backward()
    assert low.grad.dtype == dtype and torch.isfinite(low.grad).all()


@pytest.mark.parametrize("delta", [0.3, 1.0, 2.0])
def test_margin_lambdas_are_minus_gradient_of_cost(delta):
    scores, labels, mask = batch(9)
    scores.requires_grad_(True)
    (grad,) = torch.autograd.grad(margin_cost(scores, labels, mask, delta=delta), scores)
    torch.testing.assert_close(-grad, margin_lambdas(scores, labels, mask, delta=delta))


def slow_margin_cost(scores, labels, mask, *, delta, k):
    """Per-query margin cost by a loop over pairs; with k only pairs with a document ranked in the top k."""
    from losses.pairwise import margin_pair_cost

    out = []
    for b in range(scores.shape[0]):
        idx = [i for i in range(scores.shape[1]) if mask[b, i]]
        rank = {d: r for r, d in enumerate(sorted(idx, key=lambda i: (-float(scores[b, i]), i)))}
        cost = 0.0
        for i in idx:
            for j in idx:
                if labels[b, i] > labels[b, j] and (k is None or min(rank[i], rank[j]) < k):
                    cost += float(margin_pair_cost(scores[b, i] - scores[b, j], delta))
        out.append(cost)
    return torch.tensor(out, dtype=scores.dtype)


@pytest.mark.parametrize("k", [None, 1, 3, 7, 50])
def test_margin_cost_top_k_against_a_loop(k):
    scores, labels, mask = batch(10)
    expected = slow_margin_cost(scores, labels, mask, delta=0.7, k=k)
    torch.testing.assert_close(margin_cost(scores, labels, mask, delta=0.7, k=k, reduction="none"), expected)
    scores.requires_grad_(True)
    (grad,) = torch.autograd.grad(margin_cost(scores, labels, mask, delta=0.7, k=k), scores)
    torch.testing.assert_close(-grad, margin_lambdas(scores.detach(), labels, mask, delta=0.7, k=k))
    if k == 1:  # the cut has teeth: fewer pairs than the full cost
        assert not torch.allclose(expected, slow_margin_cost(scores.detach(), labels, mask, delta=0.7, k=None))


def test_margin_two_documents_follow_eqs_4_to_9():
    labels = torch.tensor([[1.0, 0.0]])
    delta = 0.8
    for x, lam1, cost in [(-0.5, 1.0, 0.5), (0.3, 0.5, 0.5 * 0.09 - 0.8 * 0.3), (2.0, 0.0, -0.32)]:
        scores = torch.tensor([[x, 0.0]])
        lam = margin_lambdas(scores, labels, delta=delta)
        torch.testing.assert_close(lam, torch.tensor([[lam1, -lam1]]))
        assert margin_cost(scores, labels, delta=delta).item() == pytest.approx(cost)


def test_margin_jacobian_is_symmetric_eq_11():
    labels = torch.tensor([[3.0, 0, 1, 2, 0, 1, 3, 2]], dtype=torch.float64)
    order = torch.randperm(8, generator=torch.Generator().manual_seed(0))
    scores = torch.linspace(-1, 1, 8, dtype=torch.float64)[order][None] * 0.6
    jac = torch.autograd.functional.jacobian(lambda s: margin_lambdas(s, labels, delta=1.0)[0], scores)[:, 0, :]
    assert jac.abs().sum() > 0  # some pairs are inside the margin, so the test has teeth
    torch.testing.assert_close(jac, jac.T)
    assert torch.linalg.eigvalsh(-jac).min() > -1e-9  # cost Hessian -J is positive semidefinite


def test_linklearn_hinge():
    pos = torch.tensor([2.0, 0.5, 0.0])
    neg = torch.tensor([0.0, 0.0, 0.7])
    torch.testing.assert_close(linklearn_hinge(pos, neg, reduction="none"), torch.tensor([0.0, 0.5, 1.7]))
    assert linklearn_hinge(pos, neg, margin=2.0).item() == pytest.approx((0 + 1.5 + 2.7) / 3)
    with pytest.raises(ValueError):
        linklearn_hinge(pos, neg[:2])
