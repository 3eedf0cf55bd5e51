"""IPS click losses against slow loops, their unbiasedness, and padding that never leaks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from losses import ips_click_mass, ips_listwise_loss, ips_pairwise_loss


def _slow_listwise(scores, clicks, propensities, clip):
    total, count = 0.0, 0
    for s, c, p in zip(scores.tolist(), clicks.tolist(), propensities.tolist(), strict=True):
        w = [ci / max(pi, clip) for ci, pi in zip(c, p, strict=True)]
        if sum(w) == 0:
            continue
        norm = math.log(sum(math.exp(x) for x in s))
        total += -sum(wi * (si - norm) for wi, si in zip(w, s, strict=True)) / sum(w)
        count += 1
    return total / count


def _slow_pairwise(scores, clicks, propensities, clip):
    total, count = 0.0, 0
    for s, c, p in zip(scores.tolist(), clicks.tolist(), propensities.tolist(), strict=True):
        w = [ci / max(pi, clip) for ci, pi in zip(c, p, strict=True)]
        norm = sum(w) * (len(s) - 1)
        if norm == 0:
            continue
        cost = sum(w[i] * math.log1p(math.exp(-(s[i] - s[j]))) for i in range(len(s)) for j in range(len(s)) if i != j)
        total += cost / norm
        count += 1
    return total / count


def test_losses_match_slow_loops() -> None:
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(4, 6, generator=g, dtype=torch.float64)
    clicks = (torch.rand(4, 6, generator=g) < 0.3).double()
    clicks[2] = 0  # a list without clicks: left out of the mean
    clicks[0, 0] = 1
    prop = torch.rand(4, 6, generator=g, dtype=torch.float64)
    got = ips_listwise_loss(scores, clicks, propensities=prop, clip=0.05)
    assert math.isclose(got.item(), _slow_listwise(scores, clicks, prop, 0.05), rel_tol=1e-10)
    got = ips_pairwise_loss(scores, clicks, propensities=prop, clip=0.05)
    assert math.isclose(got.item(), _slow_pairwise(scores, clicks, prop, 0.05), rel_tol=1e-10)


def test_gradients_match_finite_differences() -> None:
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    clicks = torch.rand(3, 5, generator=g, dtype=torch.float64)
    prop = torch.rand(3, 5, generator=g, dtype=torch.float64) + 0.1
    for loss in (ips_listwise_loss, ips_pairwise_loss):
        assert torch.autograd.gradcheck(lambda s, fn=loss: fn(s, clicks, propensities=prop), (scores,))


def test_padding_never_reaches_value_or_gradient() -> None:
    scores = torch.tensor([[1.0, float("nan"), float("inf")], [0.5, -0.5, float("nan")]], requires_grad=True)
    clicks = torch.tensor([[1.0, float("nan"), 1.0], [0.0, 1.0, 5.0]])
    mask = torch.tensor([[True, False, False], [True, True, False]])
    prop = torch.tensor([[0.5, 0.0, float("nan")], [1.0, 0.5, 0.0]])
    for loss in (ips_listwise_loss, ips_pairwise_loss):
        scores.grad = None
        value = loss(scores, clicks, mask, propensities=prop, clip=0.01)
        value.backward()
        assert torch.isfinite(value) and torch.isfinite(scores.grad).all()
        assert scores.grad[:, 1:][~mask[:, 1:]].abs().sum() == 0
        empty = loss(scores, clicks, torch.zeros_like(mask), propensities=prop)
        assert empty.item() == 0.0


def test_ips_weighted_clicks_are_unbiased_for_relevance() -> None:
    """Over random examination, the expected IPS weighted click equals the relevance probability."""
    rng = np.random.default_rng(0)
    theta = np.array([1.0, 0.5, 0.2])
    relevance = np.array([0.3, 0.6, 0.9])
    n = 400_000
    clicks = (rng.random((n, 3)) < theta) & (rng.random((n, 3)) < relevance)
    weighted = torch.tensor(clicks, dtype=torch.float64) / torch.tensor(theta)
    mean = weighted.mean(0).numpy()
    stderr = weighted.std(0).numpy() / np.sqrt(n)
    assert np.all(np.abs(mean - relevance) < 4 * stderr)
    naive = clicks.mean(0)
    assert abs(naive[2] - relevance[2]) > 0.5  # what the correction fixes


def _slow_click_mass(clicks, impressions, theta, clip, estimator):
    out = []
    for c_list, n_list in zip(clicks.tolist(), impressions.tolist(), strict=True):
        row = []
        for c, n in zip(c_list, n_list, strict=True):
            t = [max(v, clip) for v in theta.tolist()]
            if estimator == "per_click":
                row.append(sum(ci / ti for ci, ti in zip(c, t, strict=True)))
            else:
                examined = sum(ni * ti for ni, ti in zip(n, t, strict=True))
                row.append(min(1.0, sum(c) / examined) * sum(n) if examined else 0.0)
        out.append(row)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("estimator", ["per_click", "per_document"])
def test_click_mass_matches_a_slow_loop(estimator) -> None:
    g = torch.Generator().manual_seed(4)
    impressions = torch.randint(0, 6, (2, 5, 4), generator=g).double()
    impressions[1, 4] = 0  # a padded / never shown document: mass 0
    clicks = torch.minimum(torch.randint(0, 3, (2, 5, 4), generator=g).double(), impressions)
    theta = torch.tensor([1.0, 0.3, 0.04, 0.01], dtype=torch.float64)
    got = ips_click_mass(clicks, impressions, theta, clip=0.02, estimator=estimator)
    assert torch.allclose(got, _slow_click_mass(clicks, impressions, theta, 0.02, estimator), atol=1e-12)
    assert got[1, 4] == 0


def test_per_document_mass_estimates_the_same_target_with_less_variance() -> None:
    """A document shown 150 times at position 1 and 20 times at position 10 (theta 0.01): both
    estimators centre on relevance x impressions, the pooled one with a fraction of the spread."""
    rng = np.random.default_rng(0)
    theta = torch.tensor([1.0, 0.01], dtype=torch.float64)
    relevance, shown = 0.3, torch.tensor([150.0, 20.0], dtype=torch.float64)
    logs = 4000
    clicks = torch.from_numpy(rng.binomial(shown.long().numpy(), (theta * relevance).numpy(), size=(logs, 2))).double()
    masses = {
        estimator: ips_click_mass(clicks[:, None], shown.expand(logs, 1, 2), theta, estimator=estimator)[:, 0]
        for estimator in ("per_click", "per_document")
    }
    target = relevance * float(shown.sum())
    for mass in masses.values():
        assert abs(float(mass.mean()) - target) < 4 * float(mass.std()) / np.sqrt(logs) + 0.05
    assert float(masses["per_document"].std()) < 0.5 * float(masses["per_click"].std())


def test_unknown_estimator_is_refused() -> None:
    with pytest.raises(ValueError, match="per_document"):
        ips_click_mass(torch.zeros(1, 1, 1), torch.ones(1, 1, 1), torch.ones(1), estimator="pooled")
