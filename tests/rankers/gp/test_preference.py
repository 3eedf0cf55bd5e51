"""Chu & Ghahramani's preference GP (rankers.gp.preference) against independent references: scipy's
optimizer for the Laplace mode, the dense f-space Laplace formulas, numerical integration and sampling
for the predictive probability, finite differences for the evidence's gradient."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, optimize
from scipy.stats import norm

from rankers.gp import (
    InconsistentPairsError,
    NotPositiveDefiniteError,
    check_pairs,
    fit,
    fit_hyperparameters,
    log_evidence,
    pair_probability,
    posterior_latent,
    predict_pairs,
    rbf,
)
from rankers.gp.preference import scatter_pairs

F64 = torch.float64


def _problem(seed: int = 0, n: int = 6):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g, dtype=F64)
    prior = rbf(x, x, 1.0, 0.7)
    v = torch.tensor([0, 1, 2, 3, 4, 1])
    u = torch.tensor([1, 2, 3, 4, 5, 3])
    return x, prior, v, u


def _scipy_mode(prior: torch.Tensor, v: torch.Tensor, u: torch.Tensor, sigma: float) -> tuple[np.ndarray, float]:
    """argmax_f log N(f; 0, K) + sum log Phi((f_v - f_u) / (sqrt2 sigma)), by BFGS in f-space."""
    k_inv = np.linalg.inv(prior.numpy())
    vv, uu = v.numpy(), u.numpy()

    def negative(f):
        z = (f[vv] - f[uu]) / (math.sqrt(2) * sigma)
        return 0.5 * f @ k_inv @ f - norm.logcdf(z).sum()

    result = optimize.minimize(negative, np.zeros(len(prior)), method="BFGS", options={"gtol": 1e-10})
    return result.x, -result.fun


def _dense_laplace(prior, v, u, sigma, f):
    """The f-space Laplace quantities: W_f = D^T diag(c) D, A = (K^-1 + W_f)^-1, log evidence."""
    n = len(prior)
    d = np.zeros((len(v), n))
    d[np.arange(len(v)), v.numpy()] = 1
    d[np.arange(len(v)), u.numpy()] = -1
    s = math.sqrt(2) * sigma
    z = d @ f / s
    r = np.exp(norm.logpdf(z) - norm.logcdf(z))
    c = r * (r + z) / s**2
    w_f = d.T @ np.diag(c) @ d
    k = prior.numpy()
    a = np.linalg.inv(np.linalg.inv(k) + w_f)
    psi = -0.5 * f @ np.linalg.solve(k, f) + norm.logcdf(z).sum()
    evidence = psi - 0.5 * np.linalg.slogdet(np.eye(n) + k @ w_f)[1]
    return a, evidence


def test_the_mode_is_scipys():
    _, prior, v, u = _problem()
    state = fit(prior, v, u, 0.3)
    f = (prior @ scatter_pairs(state.alpha, v[None], u[None], 6)[0]).numpy()
    f_ref, psi_ref = _scipy_mode(prior, v, u, 0.3)
    np.testing.assert_allclose(f, f_ref, atol=1e-6)
    assert float(state.psi[0]) == pytest.approx(psi_ref, abs=1e-8)


def test_tasks_in_one_batch_equal_each_alone():
    """Three tasks with different priors and pair counts (padding) as one program."""
    priors, vs, us, masks = [], [], [], []
    for seed, k in ((0, 6), (1, 4), (2, 2)):
        _, prior, v, u = _problem(seed)
        priors.append(prior)
        vs.append(torch.cat([v[:k], torch.zeros(6 - k, dtype=torch.long)]))
        us.append(torch.cat([u[:k], torch.zeros(6 - k, dtype=torch.long)]))
        masks.append(torch.arange(6) < k)
    batch = fit(
        torch.stack(priors),
        torch.stack(vs),
        torch.stack(us),
        torch.tensor([0.3, 0.5, 1.0], dtype=F64),
        torch.stack(masks),
    )
    for t, (k, sigma) in enumerate(((6, 0.3), (4, 0.5), (2, 1.0))):
        alone = fit(priors[t], vs[t][:k], us[t][:k], sigma)
        f_batch = priors[t] @ scatter_pairs(batch.alpha[t], vs[t], us[t], 6)
        f_alone = priors[t] @ scatter_pairs(alone.alpha[0], vs[t][:k], us[t][:k], 6)
        torch.testing.assert_close(f_batch, f_alone, atol=1e-8, rtol=0)
        assert float(batch.log_evidence[t]) == pytest.approx(float(alone.log_evidence[0]), abs=1e-8)
        f_ref, _ = _scipy_mode(priors[t], vs[t][:k], us[t][:k], sigma)
        np.testing.assert_allclose(f_alone.numpy(), f_ref, atol=1e-6)


def test_posterior_covariance_and_evidence_match_the_dense_formulas():
    x, prior, v, u = _problem()
    state = fit(prior, v, u, 0.3)
    f = (prior @ scatter_pairs(state.alpha, v[None], u[None], 6)[0]).numpy()
    a_dense, evidence = _dense_laplace(prior, v, u, 0.3, f)
    new = torch.randn(4, 2, generator=torch.Generator().manual_seed(5), dtype=F64)
    points = torch.cat([x, new])
    mean, var, factor = posterior_latent(state, rbf(x, points, 1.0, 0.7), torch.ones(10, dtype=F64), v[None], u[None])
    np.testing.assert_allclose(mean[0, :6].numpy(), f, atol=1e-8)
    np.testing.assert_allclose(var[0, :6].numpy(), np.diag(a_dense), atol=1e-8)
    cov = rbf(x, x, 1.0, 0.7) - factor[0, :, :6].T @ factor[0, :, :6]
    np.testing.assert_allclose(cov.numpy(), a_dense, atol=1e-8)
    # a new point: f* | f is the GP conditional, so its variance is k** - k*^T K^-1 k* + k*^T K^-1 A K^-1 k*
    k_star = rbf(x, new, 1.0, 0.7).numpy()
    proj = np.linalg.solve(prior.numpy(), k_star)
    var_ref = 1.0 - np.einsum("ij,ij->j", k_star, proj) + np.einsum("ij,ik,kj->j", proj, a_dense, proj)
    np.testing.assert_allclose(var[0, 6:].numpy(), var_ref, atol=1e-8)
    assert float(state.log_evidence[0]) == pytest.approx(evidence, abs=1e-8)


def test_the_predictive_probability_by_integration_and_sampling():
    _, prior, v, u = _problem()
    sigma = 0.3
    state = fit(prior, v, u, sigma)
    f = (prior @ scatter_pairs(state.alpha, v[None], u[None], 6)[0]).numpy()
    a_dense, _ = _dense_laplace(prior, v, u, sigma, f)
    cand_v, cand_u = torch.tensor([[0, 5, 2]]), torch.tensor([[5, 0, 4]])
    mu, s2, p = predict_pairs(state, prior, v[None], u[None], cand_v, cand_u, sigma)
    gen = np.random.default_rng(0)
    samples = gen.multivariate_normal(f, a_dense, size=200_000)
    for k, (i, j) in enumerate(zip(cand_v[0].tolist(), cand_u[0].tolist())):
        m, s = f[i] - f[j], math.sqrt(a_dense[i, i] + a_dense[j, j] - 2 * a_dense[i, j])
        assert float(mu[0, k]) == pytest.approx(m, abs=1e-8)
        assert float(s2[0, k]) == pytest.approx(s * s, abs=1e-8)
        integrand = lambda t: norm.cdf(t / (math.sqrt(2) * sigma)) * norm.pdf(t, m, s)  # noqa: E731
        exact, _ = integrate.quad(integrand, m - 12 * s, m + 12 * s)
        assert float(p[0, k]) == pytest.approx(exact, abs=1e-7)
        sampled = norm.cdf((samples[:, i] - samples[:, j]) / (math.sqrt(2) * sigma)).mean()
        assert float(p[0, k]) == pytest.approx(sampled, abs=5e-3)
    assert float(p[0, 0] + p[0, 1]) == pytest.approx(1.0, abs=1e-12)  # P(a > b) + P(b > a) = 1


def test_the_evidence_gradient_is_the_finite_difference():
    x, _, v, u = _problem()

    def evidence(log_kappa, log_sigma):
        prior = rbf(x, x, 1.0, log_kappa.exp())
        return log_evidence(prior, v, u, log_sigma.exp())[0]

    theta = [torch.tensor(math.log(value), dtype=F64, requires_grad=True) for value in (0.7, 0.3)]
    value = evidence(*theta)
    grads = torch.autograd.grad(value, theta)
    assert float(value.detach()) == pytest.approx(float(fit(rbf(x, x, 1.0, 0.7), v, u, 0.3).log_evidence[0]), abs=1e-9)
    h = 1e-5
    for k in range(2):
        up = [t.detach().clone() for t in theta]
        down = [t.detach().clone() for t in theta]
        up[k] += h
        down[k] -= h
        numeric = (evidence(*up) - evidence(*down)) / (2 * h)
        assert float(grads[k]) == pytest.approx(float(numeric), rel=1e-5, abs=1e-7)


def test_contradicting_pairs_are_counted_allowed_or_refused():
    _, prior, _, _ = _problem()
    v, u = torch.tensor([0, 1, 2]), torch.tensor([1, 0, 3])  # 0 > 1 and 1 > 0
    assert check_pairs(v, u, 6) == 1
    with pytest.raises(InconsistentPairsError, match="a > b and b > a"):
        check_pairs(v, u, 6, conflicts="error")
    state = fit(prior, v, u, 0.3)  # allowed: two noisy observations that cancel
    f = prior @ scatter_pairs(state.alpha, v[None], u[None], 6)[0]
    assert torch.isfinite(f).all() and torch.isfinite(state.log_evidence).all()
    # log Phi(z) + log Phi(-z) is maximal at z = 0: the two pull f(0) and f(1) together
    alone = fit(prior, v[2:], u[2:], 0.3)
    f_alone = prior @ scatter_pairs(alone.alpha, v[None, 2:], u[None, 2:], 6)[0]
    assert abs(float(f[0] - f[1])) < abs(float(f_alone[0] - f_alone[1]))
    only = fit(prior, v[:2], u[:2], 0.3)  # nothing but the contradiction: the prior's mode, f = 0
    assert float(scatter_pairs(only.alpha, v[None, :2], u[None, :2], 6).abs().max()) < 1e-12
    with pytest.raises(ValueError, match="itself"):
        fit(prior, torch.tensor([2]), torch.tensor([2]), 0.3)
    with pytest.raises(ValueError, match="outside"):
        fit(prior, torch.tensor([6]), torch.tensor([0]), 0.3)


def test_float32_duplicates_and_a_constant_column_give_no_nan():
    """Duplicated points in float32 make K singular (indefinite after rounding): still finite."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, 3, generator=g)
    x = torch.cat([x, x[:10], torch.zeros(5, 3)])  # duplicates
    x[:, 2] = 7.0  # a constant column: carries nothing, harms nothing
    prior = rbf(x, x, 1.0, 1e-3)  # a wide kernel: K nearly rank one in float32
    v, u = torch.arange(0, 40, 2), torch.arange(1, 41, 2)
    state = fit(prior, v, u, 0.01)
    mean, var, _ = posterior_latent(state, prior, prior.diagonal(), v[None], u[None])
    assert torch.isfinite(mean).all() and torch.isfinite(var).all() and (var >= 0).all()
    _, _, p = predict_pairs(state, prior, v[None], u[None], torch.tensor([[0, 40]]), torch.tensor([[1, 41]]), 0.01)
    assert torch.isfinite(p).all()
    assert 0 <= float(pair_probability(torch.tensor(50.0), torch.tensor(-1e-9), 1e-3)) <= 1


def test_an_indefinite_or_nan_prior_is_refused_not_nan():
    prior = torch.tensor([[1.0, 3.0], [3.0, 1.0]], dtype=F64)  # eigenvalues 4 and -2: not a covariance
    with pytest.raises(NotPositiveDefiniteError):
        fit(prior, torch.tensor([0]), torch.tensor([1]), 0.01)
    with pytest.raises(NotPositiveDefiniteError, match="NaN"):
        fit(torch.full((2, 2), float("nan")), torch.tensor([0]), torch.tensor([1]), 0.1)


def test_ep_is_exact_for_one_pair_and_batches():
    """One site: EP's moment matching is the exact posterior mean and variance of f(v) - f(u)."""
    x = torch.tensor([[0.0], [0.8], [2.0]], dtype=F64)
    prior = rbf(x, x, 1.0, 1.0)
    sigma = 0.2
    state = fit(prior, torch.tensor([0]), torch.tensor([1]), sigma, inference="ep")
    s2_prior = float(prior[0, 0] + prior[1, 1] - 2 * prior[0, 1])
    s = math.sqrt(2) * sigma

    def tilted(t):
        return norm.cdf(t / s) * norm.pdf(t, 0, math.sqrt(s2_prior))

    z = integrate.quad(tilted, -10, 10)[0]
    m1 = integrate.quad(lambda t: t * tilted(t), -10, 10)[0] / z
    m2 = integrate.quad(lambda t: t * t * tilted(t), -10, 10)[0] / z
    mu, s2, _ = predict_pairs(
        state, prior, torch.tensor([[0]]), torch.tensor([[1]]), torch.tensor([[0]]), torch.tensor([[1]]), sigma
    )
    assert float(mu[0, 0]) == pytest.approx(m1, abs=1e-9)
    assert float(s2[0, 0]) == pytest.approx(m2 - m1 * m1, abs=1e-9)
    # several pairs, tasks in one batch equal each alone (EP's sites move together)
    _, prior6, v, u = _problem()
    both = fit(prior6, torch.stack([v, v.flip(0)]), torch.stack([u, u.flip(0)]), 0.3, inference="ep")
    for t, (vv, uu) in enumerate(((v, u), (v.flip(0), u.flip(0)))):
        alone = fit(prior6, vv, uu, 0.3, inference="ep")
        torch.testing.assert_close(both.sites[0][t], alone.sites[0][0], atol=1e-7, rtol=0)
    with pytest.raises(ValueError, match="inference"):
        fit(prior6, v, u, 0.3, inference="vb")


def test_hyperparameters_maximize_the_evidence_as_scipy_does():
    """fit_hyperparameters (L-BFGS on the autograd gradient) against Nelder-Mead on the evidence alone."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(15, 2, generator=g, dtype=F64)
    y = torch.sin(2 * x[:, 0]) + 0.3 * x[:, 1]
    i, j = torch.triu_indices(15, 15, 1)
    pick = torch.randperm(len(i), generator=g)[:30]
    i, j = i[pick], j[pick]
    v, u = torch.where(y[i] > y[j], i, j), torch.where(y[i] > y[j], j, i)
    found = fit_hyperparameters(x, v, u, kappa=1.0, sigma=1.0, steps=50)

    def negative(theta):
        prior = rbf(x, x, 1.0, math.exp(theta[0]))
        return -float(fit(prior, v, u, math.exp(theta[1])).log_evidence[0])

    ref = optimize.minimize(negative, [0.0, 0.0], method="Nelder-Mead", options={"xatol": 1e-6, "fatol": 1e-9})
    assert found["log_evidence"] == pytest.approx(-ref.fun, abs=1e-4)
    assert found["log_evidence"] >= -negative([0.0, 0.0])
    assert math.log(float(found["kappa"])) == pytest.approx(ref.x[0], abs=2e-2)
    assert math.log(found["sigma"]) == pytest.approx(ref.x[1], abs=2e-2)
