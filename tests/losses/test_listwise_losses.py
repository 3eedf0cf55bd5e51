"""The listwise losses and LambdaLoss against slow references written here, and against allRank.

allRank parity runs only where allRank's loss files are importable: install them apart
(``pip install --no-deps --target .peers/allrank allRank==1.4.3``, as README's test command and CI
do; or set ``ALLRANK_SITE``); the tests skip cleanly otherwise. Only its loss files are loaded, with the two constants
and the device helper they import stubbed, since allRank pins an old torch.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import os
import sys
import types
from pathlib import Path

import pytest
import torch

from losses import approx_ndcg_loss, lambdaloss, listmle_loss, listnet_loss, neural_ndcg_loss
from metrics import functional as MF


def batch(seed: int, b: int = 4, n: int = 6, levels: int = 4, distinct: bool = False):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(b, n, generator=g, dtype=torch.float64)
    if distinct:  # distinct labels: no ties for allRank's random tie-breaking to resolve
        labels = torch.stack([torch.randperm(n, generator=g) for _ in range(b)]).double() * 0.5
    else:
        labels = torch.randint(0, levels, (b, n), generator=g).double()
        labels[:, 0], labels[:, 1] = 3.0, 0.0
    mask = torch.ones(b, n, dtype=torch.bool)
    mask[1, n - 2 :] = False
    return scores, labels, mask


def real(scores, labels, mask, b):
    idx = [i for i in range(scores.shape[1]) if mask[b, i]]
    return [float(scores[b, i]) for i in idx], [float(labels[b, i]) for i in idx]


def gain(y, kind="exp2"):
    return 2.0**y - 1.0 if kind == "exp2" else y


def ideal(ys, k=None, kind="exp2"):
    top = sorted(ys, reverse=True)[: k or len(ys)]
    return sum(gain(y, kind) / math.log2(r + 2) for r, y in enumerate(top))


def slow_listnet(scores, labels, mask):
    out = []
    for b in range(scores.shape[0]):
        s, y = real(scores, labels, mask, b)
        if len(set(y)) < 2:
            out.append(0.0)
            continue
        zs, zy = sum(math.exp(v) for v in s), sum(math.exp(v) for v in y)
        out.append(-sum(math.exp(yi) / zy * math.log(math.exp(si) / zs) for si, yi in zip(s, y, strict=True)))
    return torch.tensor(out, dtype=torch.float64)


def plackett_luce_nll(s):
    return sum(math.log(sum(math.exp(v) for v in s[i:])) - s[i] for i in range(len(s)))


def slow_listmle(scores, labels, mask):
    """Brute force over permutations: the most likely one among those that sort the labels."""
    out = []
    for b in range(scores.shape[0]):
        s, y = real(scores, labels, mask, b)
        if len(set(y)) < 2:
            out.append(0.0)
            continue
        best = math.inf
        for perm in itertools.permutations(range(len(s))):
            if all(y[perm[i]] >= y[perm[i + 1]] for i in range(len(s) - 1)):
                best = min(best, plackett_luce_nll([s[p] for p in perm]))
        out.append(best)
    return torch.tensor(out, dtype=torch.float64)


def slow_approx_ndcg(scores, labels, mask, alpha, kind):
    out = []
    for b in range(scores.shape[0]):
        s, y = real(scores, labels, mask, b)
        if len(set(y)) < 2:
            out.append(0.0)
            continue
        total = 0.0
        for i in range(len(s)):
            rank = 1 + sum(1 / (1 + math.exp(alpha * (s[i] - s[j]))) for j in range(len(s)) if j != i)
            total += gain(y[i], kind) / math.log2(1 + rank)
        out.append(1 - total / ideal(y, kind=kind))
    return torch.tensor(out, dtype=torch.float64)


def slow_neural_ndcg(scores, labels, mask, tau, k, iterations):
    out = []
    for b in range(scores.shape[0]):
        s, y = real(scores, labels, mask, b)
        n = len(s)
        if len(set(y)) < 2:
            out.append(0.0)
            continue
        p = []
        for i in range(n):  # 1-based rank i + 1: (n + 1 - 2 (i + 1)) s_j - sum_l |s_j - s_l|
            logits = [((n - 1 - 2 * i) * s[j] - sum(abs(s[j] - v) for v in s)) / tau for j in range(n)]
            top = max(logits)
            z = sum(math.exp(v - top) for v in logits)
            p.append([math.exp(v - top) / z for v in logits])
        for _ in range(iterations):
            cols = [sum(p[i][j] for i in range(n)) for j in range(n)]
            p = [[p[i][j] / cols[j] for j in range(n)] for i in range(n)]
            p = [[v / sum(row) for v in row] for row in p]
        cut = min(k or n, n)
        dcg = sum(sum(p[i][j] * gain(y[j]) for j in range(n)) / math.log2(i + 2) for i in range(cut))
        out.append(1 - dcg / ideal(y, k=k))
    return torch.tensor(out, dtype=torch.float64)


def slow_lambdaloss(scores, labels, mask, scheme, mu, sigma, k):
    out = []
    for b in range(scores.shape[0]):
        s, y = real(scores, labels, mask, b)
        n = len(s)
        rank = {d: r + 1 for r, d in enumerate(sorted(range(n), key=lambda i: (-s[i], i)))}
        best = ideal(y, k=k)
        total = 0.0
        for i in range(n):
            for j in range(n):
                if y[i] <= y[j] or best == 0:
                    continue
                ri, rj = rank[i], rank[j]
                if k is not None and min(ri, rj) > k:
                    continue
                g = abs(gain(y[i]) - gain(y[j])) / best

                def disc(r):
                    return 1 / math.log2(1 + r) if (k is None or r <= k) else 0.0

                rho = abs(disc(ri) - disc(rj))
                d = abs(ri - rj)
                delta = abs(1 / math.log2(1 + d) - 1 / math.log2(2 + d))
                w = {"ndcg_loss2": delta, "ndcg_loss2pp": rho + mu * delta, "lambdarank": rho}[scheme] * g
                total += -w * math.log2(1 / (1 + math.exp(-sigma * (s[i] - s[j]))))
        out.append(total)
    return torch.tensor(out, dtype=torch.float64)


def test_listnet_matches_slow_reference():
    scores, labels, mask = batch(0)
    torch.testing.assert_close(listnet_loss(scores, labels, mask, reduction="none"), slow_listnet(scores, labels, mask))


@pytest.mark.parametrize("distinct", [False, True])
def test_listmle_is_the_most_likely_label_consistent_permutation(distinct):
    scores, labels, mask = batch(1, distinct=distinct)
    torch.testing.assert_close(listmle_loss(scores, labels, mask, reduction="none"), slow_listmle(scores, labels, mask))


@pytest.mark.parametrize(("alpha", "kind"), [(1.0, "exp2"), (4.0, "linear")])
def test_approx_ndcg_matches_slow_reference(alpha, kind):
    scores, labels, mask = batch(2)
    expected = slow_approx_ndcg(scores, labels, mask, alpha, kind)
    torch.testing.assert_close(
        approx_ndcg_loss(scores, labels, mask, alpha=alpha, gain=kind, reduction="none"), expected
    )


def test_approx_ndcg_tends_to_one_minus_ndcg_for_sharp_sigmoids():
    scores, labels, mask = batch(3)
    sharp = approx_ndcg_loss(scores, labels, mask, alpha=1e4, reduction="none")
    torch.testing.assert_close(sharp, 1 - MF.ndcg(scores, labels, mask).double(), atol=1e-6, rtol=0)


@pytest.mark.parametrize(("tau", "k", "iterations"), [(1.0, None, 0), (0.5, 3, 0), (1.0, None, 5), (2.0, 4, 3)])
def test_neural_ndcg_matches_slow_reference(tau, k, iterations):
    scores, labels, mask = batch(4)
    expected = slow_neural_ndcg(scores, labels, mask, tau, k, iterations)
    value = neural_ndcg_loss(
        scores, labels, mask, temperature=tau, k=k, sinkhorn_iterations=iterations, reduction="none"
    )
    torch.testing.assert_close(value, expected)


def test_neuralsort_spread_is_the_pairwise_sum_with_ties_and_padding():
    from losses.neuralndcg import absolute_spread

    scores, _, mask = batch(7)
    scores[0, 3] = scores[0, 1]  # a tie
    scores = scores.masked_fill(~mask, 1e9)  # padding holds anything
    pair = mask[:, :, None] & mask[:, None, :]
    expected = ((scores[:, :, None] - scores[:, None, :]).abs() * pair).sum(-1) * mask
    torch.testing.assert_close(absolute_spread(scores, mask), expected)


class LargestTensor(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the largest tensor any op creates (forward and backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, tuple | list) else [out]:
            if isinstance(tensor, torch.Tensor):
                self.numel = max(self.numel, tensor.numel())
        return out


def test_neural_ndcg_at_k_without_sinkhorn_never_builds_the_list_by_list_matrix():
    # the docstring's O(B * k * L): no op makes a [B, L, L] tensor, forward or backward
    b, length, k = 2, 256, 4
    scores = torch.randn(b, length, requires_grad=True)
    labels = torch.randint(0, 3, (b, length)).float()
    with LargestTensor() as largest:
        neural_ndcg_loss(scores, labels, k=k, sinkhorn_iterations=0).backward()
    assert largest.numel <= 4 * b * k * length < b * length * length


def test_neural_ndcg_tends_to_one_minus_ndcg_at_low_temperature():
    scores, labels, mask = batch(5)
    for k in (None, 3):
        cold = neural_ndcg_loss(scores, labels, mask, temperature=1e-4, k=k, reduction="none")
        torch.testing.assert_close(cold, 1 - MF.ndcg(scores, labels, mask, k=k).double(), atol=1e-6, rtol=0)


@pytest.mark.parametrize("scheme", ["ndcg_loss2", "ndcg_loss2pp", "lambdarank"])
@pytest.mark.parametrize("k", [None, 2])
def test_lambdaloss_matches_slow_reference(scheme, k):
    scores, labels, mask = batch(6, n=7)
    expected = slow_lambdaloss(scores, labels, mask, scheme, 3.0, 1.5, k)
    value = lambdaloss(scores, labels, mask, scheme=scheme, mu=3.0, sigma=1.5, k=k, reduction="none")
    torch.testing.assert_close(value, expected)


@pytest.mark.parametrize("loss", [lambdaloss, approx_ndcg_loss], ids=["lambdaloss", "approx_ndcg_loss"])
def test_chunked_equals_unchunked(monkeypatch, loss):
    scores, labels, mask = batch(7, b=3, n=40)
    scores.requires_grad_(True)
    full = loss(scores, labels, mask)
    (grad_full,) = torch.autograd.grad(full, scores)
    monkeypatch.setattr("losses._common.PAIR_BLOCK_ELEMENTS", 3 * 40 * 3)
    chunked = loss(scores, labels, mask)
    (grad_chunked,) = torch.autograd.grad(chunked, scores)
    torch.testing.assert_close(full, chunked)
    torch.testing.assert_close(grad_full, grad_chunked)


# ---------------------------------------------------------------- allRank parity (skips without it)


ALLRANK_SITES = (Path(__file__).resolve().parents[2] / ".peers" / "allrank", Path("/work/peers/allrank"))


def _allrank_site() -> Path | None:
    given = os.environ.get("ALLRANK_SITE")
    for site in [Path(given)] if given else ALLRANK_SITES:
        if (site / "allrank" / "models" / "losses" / "lambdaLoss.py").exists():
            return site
    return None


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def allrank():
    site = _allrank_site()
    if site is None:
        pytest.skip("allRank is not installed apart (pip install --no-deps --target /work/peers/allrank allRank)")
    saved = {name: module for name, module in sys.modules.items() if name.split(".")[0] == "allrank"}
    stubs = {
        "allrank": {},
        "allrank.data": {},
        "allrank.data.dataset_loading": {"PADDED_Y_VALUE": -1},
        "allrank.models": {},
        "allrank.models.losses": {"DEFAULT_EPS": 1e-10},
        "allrank.models.model_utils": {"get_torch_device": lambda: torch.device("cpu")},
    }
    for name, attrs in stubs.items():
        module = types.ModuleType(name)
        vars(module).update(attrs)
        sys.modules[name] = module
    root = site / "allrank" / "models"
    _load("allrank.models.metrics", root / "metrics.py")
    _load("allrank.models.losses.loss_utils", root / "losses" / "loss_utils.py")
    loaded = types.SimpleNamespace()
    for file in ("listNet", "listMLE", "approxNDCG", "lambdaLoss", "neuralNDCG"):
        vars(loaded).update(vars(_load(f"allrank.models.losses.{file}", root / "losses" / f"{file}.py")))
    yield loaded
    for name in [n for n in sys.modules if n.split(".")[0] == "allrank"]:
        del sys.modules[name]
    sys.modules.update(saved)


def _padded(labels, mask):
    return labels.masked_fill(~mask, -1.0)


def test_allrank_listnet(allrank):
    scores, labels, mask = batch(10)
    theirs = allrank.listNet(scores, _padded(labels, mask), eps=1e-300)
    torch.testing.assert_close(listnet_loss(scores, labels, mask), theirs)


def test_allrank_listmle(allrank):
    scores, labels, mask = batch(11, distinct=True)
    theirs = allrank.listMLE(scores, _padded(labels, mask), eps=0.0)
    torch.testing.assert_close(listmle_loss(scores, labels, mask), theirs)


def test_allrank_approx_ndcg(allrank):
    scores, labels, mask = batch(12)
    theirs = allrank.approxNDCGLoss(scores, _padded(labels, mask), eps=1e-300, alpha=2.0)
    torch.testing.assert_close(approx_ndcg_loss(scores, labels, mask, alpha=2.0) - 1.0, theirs)


@pytest.mark.parametrize(
    ("scheme", "theirs"),
    [("ndcg_loss2", "ndcgLoss2_scheme"), ("ndcg_loss2pp", "ndcgLoss2PP_scheme"), ("lambdarank", "lambdaRank_scheme")],
)
def test_allrank_lambdaloss(allrank, scheme, theirs):
    scores, labels, mask = batch(13, n=8)
    scores.requires_grad_(True)
    expected = allrank.lambdaLoss(scores, _padded(labels, mask), eps=1e-300, weighing_scheme=theirs, mu=5.0, sigma=1.3)
    value = lambdaloss(scores, labels, mask, scheme=scheme, mu=5.0, sigma=1.3, reduction="sum")
    torch.testing.assert_close(value, expected)
    torch.testing.assert_close(*(torch.autograd.grad(v, scores)[0] for v in (value, expected)))


def test_allrank_neural_ndcg(allrank):
    scores, labels, mask = batch(14)
    for k in (None, 3):
        # float32 inside allRank (its discounts); Sinkhorn stops at tolerance 1e-6 there, after 50 steps here
        theirs = allrank.neuralNDCG(scores.float(), _padded(labels, mask).float(), temperature=1.0, k=k)
        ours = neural_ndcg_loss(scores, labels, mask, temperature=1.0, k=k, sinkhorn_iterations=50) - 1.0
        torch.testing.assert_close(ours.float(), theirs, atol=1e-4, rtol=1e-4)


def test_bad_scheme_and_target_shape_are_named():
    from losses import lambdaloss as lambdaloss_fn
    from losses.pairwise import logistic_pair, pairwise_loss

    scores, labels, mask = batch(9, b=2, n=4)
    with pytest.raises(ValueError, match="scheme must be one of"):
        lambdaloss_fn(scores, labels, mask, scheme="ndcg_loss3")
    with pytest.raises(ValueError, match=r"targets must be \[B, L, L\]"):
        pairwise_loss(scores, labels, mask, pair_fn=logistic_pair, targets=torch.zeros(2, 4))
