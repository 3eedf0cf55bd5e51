"""The family's one Laplace and one EP (rankers.gp.inference) over both likelihood objects, each against
an independent reference: the likelihoods' derivatives against finite differences and their tilted
moments against quadrature; the Laplace mode against scipy's optimizer on the log posterior and its
evidence against the dense formula; EP's fixed point against brute-force integration of every site's
tilted distribution (EP's defining property: each marginal equals its tilted moments)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import integrate, optimize
from scipy.stats import norm

from rankers.gp.inference import ep, laplace, laplace_log_evidence
from rankers.gp.likelihoods import OrdinalLikelihood, ProbitPreference

D = torch.float64
SIGMA = torch.tensor([0.4, 0.9], dtype=D)


def _ordinal(n: int = 4) -> OrdinalLikelihood:
    labels = torch.tensor([[0, 2, 1, 3], [3, 1, 1, 0]])[:, :n]
    pins = torch.tensor([[-1.0, 0.0, 0.8], [-0.5, 0.1, 1.2]], dtype=D)
    return OrdinalLikelihood(labels, pins, SIGMA)


LIKELIHOODS = {"probit": lambda n=4: ProbitPreference(SIGMA), "ordinal": _ordinal}


def _numpy_likelihood(name: str, t: int, i: int):
    """``p(y_i | f)`` of task ``t``, site ``i`` as a numpy function: the papers' formulas with scipy."""
    s = SIGMA[t].item()
    if name == "probit":
        return lambda f: norm.cdf(f / (np.sqrt(2) * s))
    lik = _ordinal()
    edges = np.concatenate([[-np.inf], lik.thresholds[t].numpy(), [np.inf]])
    y = int(lik.labels[t, i])
    return lambda f: norm.cdf((edges[y + 1] - f) / s) - norm.cdf((edges[y] - f) / s)


def _problem(seed: int = 0, n: int = 4):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, n, 2, generator=g, dtype=D)
    kernel = 1.3 * torch.exp(-0.5 * torch.cdist(x, x) ** 2) + 1e-2 * torch.eye(n, dtype=D)
    prior_mean = 0.4 * torch.randn(2, n, generator=g, dtype=D)
    mask = torch.ones(2, n, dtype=torch.bool)
    return kernel, prior_mean, mask


@pytest.mark.parametrize("name", LIKELIHOODS)
def test_derivatives_match_finite_differences(name):
    likelihood = LIKELIHOODS[name]()
    f = torch.tensor([[-2.0, -0.3, 0.4, 3.0], [1.0, 0.0, -1.5, 0.7]], dtype=D)
    log_p, d1, d2 = likelihood.derivatives(f)
    step = 1e-4
    up, down = likelihood.log_prob(f + step), likelihood.log_prob(f - step)
    torch.testing.assert_close(d1, (up - down) / (2 * step), rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(d2, (up - 2 * log_p + down) / step**2, rtol=1e-4, atol=1e-5)
    assert (d2 < 0).all()  # log-concave: what makes Newton and EP's site precisions safe
    reference = np.array([[np.log(_numpy_likelihood(name, t, i)(f[t, i].item())) for i in range(4)] for t in range(2)])
    np.testing.assert_allclose(log_p.numpy(), reference, rtol=1e-8)  # log of scipy's cdf: ~1e-9 near 0


@pytest.mark.parametrize("name", LIKELIHOODS)
@pytest.mark.parametrize("mean,var", [(0.3, 0.5), (-2.0, 2.0), (2.5, 0.1)])
def test_tilted_moments_match_quadrature(name, mean, var):
    likelihood = LIKELIHOODS[name]()
    m, v = torch.full((2, 4), mean, dtype=D), torch.full((2, 4), var, dtype=D)
    log_z, d1, d2 = likelihood.tilted_moments(m, v)
    for t in range(2):
        for i in range(4):
            p = _numpy_likelihood(name, t, i)
            weight = lambda f, p=p: p(f) * norm.pdf(f, mean, np.sqrt(var))  # noqa: E731
            z = integrate.quad(weight, -25, 25, points=[mean], limit=200, epsabs=0, epsrel=1e-11)[0]
            quad = {"points": [mean], "limit": 200, "epsabs": 0, "epsrel": 1e-11}  # Z can be tiny: relative only
            first = integrate.quad(lambda f, w=weight: f * w(f), -25, 25, **quad)[0] / z
            second = integrate.quad(lambda f, w=weight: f * f * w(f), -25, 25, **quad)[0] / z
            assert log_z[t, i].item() == pytest.approx(np.log(z), rel=1e-8, abs=1e-10)
            # the tilted mean is mean + var d1, its variance var + var^2 d2
            assert mean + var * d1[t, i].item() == pytest.approx(first, rel=1e-6, abs=1e-8)
            assert var + var**2 * d2[t, i].item() == pytest.approx(second - first**2, rel=1e-6, abs=1e-8)


def _log_posterior(name: str, kernel, prior_mean, t: int):
    k_inv = np.linalg.inv(kernel[t].numpy())
    h = prior_mean[t].numpy()
    sites = [_numpy_likelihood(name, t, i) for i in range(len(h))]
    return lambda f: sum(np.log(p(f[i])) for i, p in enumerate(sites)) - 0.5 * (f - h) @ k_inv @ (f - h)


@pytest.mark.parametrize("name", LIKELIHOODS)
def test_laplace_mode_and_evidence_match_scipy_and_the_dense_formula(name):
    kernel, prior_mean, mask = _problem()
    post = laplace(kernel, LIKELIHOODS[name](), mask, prior_mean)
    assert post.converged
    for t in range(2):
        psi = _log_posterior(name, kernel, prior_mean, t)
        mode = optimize.minimize(lambda f, psi=psi: -psi(f), prior_mean[t].numpy(), method="BFGS",
                                 options={"gtol": 1e-11}).x  # fmt: skip
        np.testing.assert_allclose(post.mean[t].numpy(), mode, atol=1e-6)
        # log Z ~ Psi(f_hat) - 1/2 log |I + W^1/2 K W^1/2|, W the negative Hessian of log p at the mode
        w = -LIKELIHOODS[name]().derivatives(post.mean)[2][t].numpy()
        b = np.eye(4) + np.sqrt(w)[:, None] * kernel[t].numpy() * np.sqrt(w)[None, :]
        expected = psi(mode) - 0.5 * np.linalg.slogdet(b)[1]
        assert post.log_evidence[t].item() == pytest.approx(expected, rel=1e-8)
        covariance = np.linalg.inv(np.linalg.inv(kernel[t].numpy()) + np.diag(w))
        np.testing.assert_allclose(post.var[t].numpy(), np.diag(covariance), rtol=1e-7)


@pytest.mark.parametrize("name", LIKELIHOODS)
def test_laplace_evidence_gradient_matches_finite_differences(name):
    kernel, prior_mean, mask = _problem(seed=2)
    scale = torch.tensor(1.0, dtype=D, requires_grad=True)
    sigma = SIGMA.clone().requires_grad_(True)

    def evidence(scale, sigma):
        likelihood = LIKELIHOODS[name]()
        likelihood.sigma = sigma
        return laplace_log_evidence(scale * kernel, likelihood, mask, prior_mean, tol=1e-14).sum()

    value = evidence(scale, sigma)
    grad_scale, grad_sigma = torch.autograd.grad(value, (scale, sigma))
    step = 1e-5
    with torch.no_grad():
        fd_scale = (evidence(scale + step, sigma) - evidence(scale - step, sigma)) / (2 * step)
        e = torch.eye(2, dtype=D) * step
        fd_sigma = torch.stack([(evidence(scale, sigma + e[i]) - evidence(scale, sigma - e[i])) / (2 * step)
                                for i in range(2)])  # fmt: skip
    assert grad_scale.item() == pytest.approx(fd_scale.item(), rel=1e-5, abs=1e-7)
    torch.testing.assert_close(grad_sigma, fd_sigma, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", LIKELIHOODS)
@pytest.mark.parametrize("schedule,damping", [("sequential", 1.0), ("parallel", 0.7), ("sequential", 0.5)])
def test_ep_fixed_point_matches_the_tilted_moments_by_integration(name, schedule, damping):
    """At EP's fixed point every posterior marginal N(mu_i, s_i^2) equals the moments of its tilted
    distribution cavity_i(f) p(y_i | f), here integrated numerically (scipy), site by site."""
    kernel, prior_mean, mask = _problem(seed=1)
    post = ep(kernel, LIKELIHOODS[name](), mask, prior_mean, schedule=schedule, damping=damping, tol=1e-12,
              max_sweeps=500)  # fmt: skip
    assert post.converged
    for t in range(2):
        for i in range(4):
            cav_tau = 1 / post.var[t, i].item() - post.tau[t, i].item()
            cav_mean = (post.mean[t, i].item() / post.var[t, i].item() - post.nu[t, i].item()) / cav_tau
            cav_sd = np.sqrt(1 / cav_tau)
            p = _numpy_likelihood(name, t, i)
            weight = lambda f, p=p, m=cav_mean, s=cav_sd: p(f) * norm.pdf(f, m, s)  # noqa: E731
            z = integrate.quad(weight, -25, 25, points=[cav_mean], limit=200)[0]
            first = integrate.quad(lambda f, w=weight: f * w(f), -25, 25, points=[cav_mean], limit=200)[0] / z
            second = integrate.quad(lambda f, w=weight: f * f * w(f), -25, 25, points=[cav_mean], limit=200)[0] / z
            assert post.mean[t, i].item() == pytest.approx(first, rel=1e-6, abs=1e-8)
            assert post.var[t, i].item() == pytest.approx(second - first**2, rel=1e-6, abs=1e-8)


def test_ep_schedules_reach_the_same_fixed_point_and_warm_starts_keep_it():
    kernel, prior_mean, mask = _problem(seed=3)
    likelihood = _ordinal()
    sequential = ep(kernel, likelihood, mask, prior_mean, tol=1e-12, max_sweeps=500)
    parallel = ep(kernel, likelihood, mask, prior_mean, schedule="parallel", damping=0.7, tol=1e-12, max_sweeps=500)
    torch.testing.assert_close(sequential.mean, parallel.mean, rtol=1e-8, atol=1e-9)
    torch.testing.assert_close(sequential.var, parallel.var, rtol=1e-8, atol=1e-9)
    again = ep(kernel, likelihood, mask, prior_mean, sites=sequential.sites, tol=1e-10)
    assert again.iterations == 1
    torch.testing.assert_close(again.mean, sequential.mean)


def test_padded_sites_carry_nothing():
    """A masked site has tau = nu = 0 whatever its label or latent: both approximations equal the
    fit without it (the padded slot an independent block of the prior)."""
    kernel, prior_mean, mask = _problem(seed=4)
    kernel[:, -1, :-1] = kernel[:, :-1, -1] = 0.0
    mask[:, -1] = False
    likelihood, small = _ordinal(), _ordinal(3)
    for run in (laplace, ep):
        full = run(kernel, likelihood, mask, prior_mean)
        alone = run(kernel[:, :3, :3], small, mask[:, :3], prior_mean[:, :3])
        torch.testing.assert_close(full.mean[:, :3], alone.mean)
        assert (full.tau[:, -1] == 0).all() and (full.nu[:, -1] == 0).all()
        torch.testing.assert_close(full.mean[:, -1], prior_mean[:, -1])


def test_bad_ep_options_are_refused():
    kernel, _, mask = _problem()
    with pytest.raises(ValueError, match="schedule"):
        ep(kernel, _ordinal(), mask, schedule="random")
    with pytest.raises(ValueError, match="damping"):
        ep(kernel, _ordinal(), mask, damping=0.0)
