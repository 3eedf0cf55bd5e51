"""Active learning (rankers.gp.active): eq. (10) against the exact ADF update by numerical
integration, the all-items alternative against a dense loop, and the batched loop against one
trial at a time."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate
from scipy.stats import norm

from experiments.chu2005 import sample_pairs
from rankers.gp import active, fit, rbf
from rankers.gp.preference import scatter_pairs

F64 = torch.float64


def _tilted_variance(mu: float, s: float, sigma: float, sign: int) -> float:
    """Var of t ~ N(mu, s^2) Phi(sign t / (sqrt2 sigma)) / Z, by quadrature."""
    like = lambda t: norm.cdf(sign * t / (math.sqrt(2) * sigma)) * norm.pdf(t, mu, s)  # noqa: E731
    lo, hi = mu - 12 * s, mu + 12 * s
    z = integrate.quad(like, lo, hi, epsabs=1e-13)[0]
    m1 = integrate.quad(lambda t: t * like(t), lo, hi, epsabs=1e-13)[0] / z
    m2 = integrate.quad(lambda t: t * t * like(t), lo, hi, epsabs=1e-13)[0] / z
    return m2 - m1 * m1


@pytest.mark.parametrize(("mu", "s2", "sigma"), [(0.0, 1.0, 0.1), (0.7, 0.3, 0.2), (-2.0, 2.0, 0.05), (3.0, 0.5, 1.0)])
def test_eq10_is_the_expected_moment_matched_entropy_drop(mu, s2, sigma):
    """The ADF update is rank one along (1, -1), so det(lambda_new lambda^-1) = Var_new(f_v - f_u) / s^2."""
    gain = active.expected_entropy_gain(torch.tensor([mu], dtype=F64), torch.tensor([s2], dtype=F64), sigma)
    s = math.sqrt(s2)
    p = norm.cdf(mu / math.sqrt(2 * sigma**2 + s2))
    expected = sum(
        weight * -0.5 * math.log(_tilted_variance(mu, s, sigma, sign) / s2) for weight, sign in ((p, 1), (1 - p, -1))
    )
    assert float(gain[0]) == pytest.approx(expected, rel=1e-6)


def test_entropy_all_is_the_dense_loop():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(9, 2, generator=g, dtype=F64)
    prior = rbf(x, x, 1.0, 0.5)
    v, u = torch.tensor([[0, 2, 4]]), torch.tensor([[1, 3, 5]])
    sigma = 0.2
    state = fit(prior, v, u, sigma)
    cand_v, cand_u = torch.tensor([[6, 0, 7]]), torch.tensor([[8, 6, 2]])
    gains = active.expected_entropy_gain_all(state, prior, v, u, cand_v, cand_u, sigma)[0]
    # dense: A = (K^-1 + W_f)^-1, then each outcome's ADF rank-one update and every item's variance
    f = prior @ scatter_pairs(state.alpha, v, u, 9)[0]
    d = torch.zeros(3, 9, dtype=F64)
    d[torch.arange(3), v[0]], d[torch.arange(3), u[0]] = 1.0, -1.0
    a = torch.linalg.inv(torch.linalg.inv(prior) + d.T @ torch.diag(state.tau[0]) @ d).numpy()
    f = f.numpy()
    for k, (i, j) in enumerate(zip(cand_v[0].tolist(), cand_u[0].tolist())):
        e = np.zeros(9)
        e[i], e[j] = 1, -1
        mu, s2 = e @ f, e @ a @ e
        star2 = 2 * sigma**2 + s2
        total = 0.0
        for sign in (1, -1):
            z = sign * mu / math.sqrt(star2)
            r = math.exp(norm.logpdf(z) - norm.logcdf(z))
            c = r * (r + z) / star2
            a_new = a - c * np.outer(a @ e, a @ e)
            total += norm.cdf(z) * (-0.5 * np.log(np.diag(a_new) / np.diag(a))).sum()
        assert float(gains[k]) == pytest.approx(total, rel=1e-8)


def test_the_batched_loop_is_each_trial_alone():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(30, 3, generator=g, dtype=F64)
    target = x @ torch.tensor([1.0, -0.5, 0.25], dtype=F64) + 0.1 * torch.randn(30, generator=g, dtype=F64)
    prior = rbf(x, x, 1.0, 0.3)
    pairs = sample_pairs(target, 41, 3, g)
    init, pool = pairs[:, :1], pairs[:, 1:]
    options = {"queries": 4, "strategy": "entropy", "sigma": 0.1}
    batch = active.run(prior, target, pool[..., 0], pool[..., 1], init[..., 0], init[..., 1], **options)
    for t in range(3):
        alone = active.run(
            prior,
            target,
            pool[t : t + 1, :, 0],
            pool[t : t + 1, :, 1],
            init[t : t + 1, :, 0],
            init[t : t + 1, :, 1],
            **options,
        )
        torch.testing.assert_close(batch.v[t], alone.v[0])
        torch.testing.assert_close(batch.errors[t], alone.errors[0], atol=1e-12, rtol=0)
    assert batch.errors.shape == (3, 5)
    # the oracle orients every asked pair by the target
    assert (target[batch.v] > target[batch.u]).all()


def test_pair_error_is_a_loop_over_pairs():
    g = torch.Generator().manual_seed(5)
    target = torch.randint(0, 4, (12,), generator=g).double()
    latent = torch.randint(0, 3, (2, 12), generator=g).double()
    for t in range(2):
        wrong = total = 0.0
        for i in range(12):
            for j in range(12):
                if target[i] > target[j]:
                    total += 1
                    wrong += 1.0 if latent[t, i] < latent[t, j] else 0.5 if latent[t, i] == latent[t, j] else 0.0
        assert float(active.pair_error(latent, target)[t]) == pytest.approx(wrong / total)


def test_an_unknown_strategy_is_refused():
    prior = torch.eye(3, dtype=F64)
    pairs = torch.tensor([[[0, 1]]])
    with pytest.raises(ValueError, match="strategy"):
        active.run(
            prior,
            torch.arange(3.0),
            pairs[..., 0],
            pairs[..., 1],
            pairs[..., 0],
            pairs[..., 1],
            queries=1,
            strategy="uncertainty",
            sigma=0.1,
        )
