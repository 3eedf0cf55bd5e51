"""The ordinal likelihood, the family's EP and Laplace on it and the Gaussian posterior, each
against an independent reference: quadrature, finite differences, scipy's optimizer, scikit-learn
and GPyTorch's exact GP regression."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import integrate, optimize
from scipy.stats import norm

from datamodules.errors import DataError
from rankers.gp.inference import ep, laplace, site_posterior
from rankers.gp.likelihoods import OrdinalLikelihood, gaussian_sites
from rankers.gp.ordinal import (
    IndefiniteKernelError,
    check_kernel,
    expected_log_likelihood,
    fit_thresholds,
    predict_ordinal,
)

D = torch.float64


def ordinal_moments(mean, var, labels, pins, sigma):
    return OrdinalLikelihood(labels, pins, sigma).tilted_moments(mean, var)


def ordinal_log_likelihood(f, labels, pins, sigma):
    return OrdinalLikelihood(labels, pins, sigma).log_prob(f)


def ep_ordinal(kernel, prior_mean, labels, valid, pins, sigma, *, schedule="parallel", **options):
    """The yu2005 models' E-step: parallel, damped EP."""
    damping = 0.7 if schedule == "parallel" else 1.0
    likelihood = OrdinalLikelihood(labels, pins, sigma)
    return ep(kernel, likelihood, valid, prior_mean, schedule=schedule, damping=damping, **options)


def laplace_ordinal(kernel, prior_mean, labels, valid, pins, sigma, **options):
    return laplace(kernel, OrdinalLikelihood(labels, pins, sigma), valid, prior_mean, **options)


def _pins(*values):
    return torch.tensor([values], dtype=D)


def _likelihood(f, y, pins, sigma):
    """P(y | f) with scipy, the paper's formula."""
    edges = np.concatenate([[-np.inf], pins, [np.inf]])
    upper, lower = (edges[y + 1] - f) / sigma, (edges[y] - f) / sigma
    # both in the right tail: the survival functions, so that the difference does not cancel to 0
    return np.where(lower > 0, norm.sf(lower) - norm.sf(upper), norm.cdf(upper) - norm.cdf(lower))


@pytest.mark.parametrize("label", [0, 1, 2, 3])
@pytest.mark.parametrize("mean,var", [(0.3, 0.5), (-2.0, 2.0), (4.0, 0.1)])
def test_moments_match_quadrature_and_finite_differences(label, mean, var):
    pins, sigma = np.array([-1.0, 0.2, 1.5]), 0.7
    integrand = lambda f: _likelihood(f, label, pins, sigma) * norm.pdf(f, mean, np.sqrt(var))  # noqa: E731
    z = integrate.quad(integrand, -30, 30, points=[mean], limit=200, epsabs=0, epsrel=1e-10)[0]
    args = (torch.tensor([[label]]), _pins(*pins), torch.tensor([sigma], dtype=D))
    log_z, g1, g2 = ordinal_moments(torch.tensor([[mean]], dtype=D), torch.tensor([[var]], dtype=D), *args)
    assert log_z.item() == pytest.approx(np.log(z), rel=1e-7, abs=1e-9)
    step = 1e-4
    at = lambda x: ordinal_moments(torch.tensor([[x]], dtype=D), torch.tensor([[var]], dtype=D), *args)[0].item()  # noqa: E731
    assert g1.item() == pytest.approx((at(mean + step) - at(mean - step)) / (2 * step), rel=1e-5, abs=1e-7)
    second = (at(mean + step) - 2 * at(mean) + at(mean - step)) / step**2
    assert g2.item() == pytest.approx(second, rel=1e-3, abs=1e-5)
    assert g2.item() < 0  # log-concave


def test_far_tails_are_finite():
    f = torch.tensor([[60.0, -60.0, 60.0, -60.0]], dtype=D)
    labels = torch.tensor([[0, 2, 1, 1]])
    pins, sigma = _pins(-0.5, 0.5), torch.tensor([0.3], dtype=D)
    values = ordinal_moments(f, torch.zeros_like(f), labels, pins, sigma)
    for value in values:
        assert torch.isfinite(value).all()
    assert (values[0] < -1000).all()  # the likelihood is tiny, its log is still exact enough to be finite


def test_likelihood_gradients_match_finite_differences():
    torch.manual_seed(0)
    f = torch.randn(2, 5, dtype=D, requires_grad=True)
    labels = torch.tensor([[0, 1, 2, 3, 1], [3, 3, 0, 2, 1]])
    pins = torch.tensor([[-1.0, 0.0, 0.8], [-0.5, 0.1, 1.2]], dtype=D, requires_grad=True)
    sigma = torch.tensor([0.8, 1.3], dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: ordinal_log_likelihood(*a[:1], labels, *a[1:]), (f, pins, sigma))
    mean, var = f.detach(), torch.rand(2, 5, dtype=D) + 0.1
    valid = torch.ones(2, 5, dtype=torch.bool)
    assert torch.autograd.gradcheck(lambda p, s: expected_log_likelihood(mean, var, labels, valid, p, s), (pins, sigma))


def test_expected_log_likelihood_matches_quadrature():
    mean, var, label, pins, sigma = 0.4, 0.9, 2, np.array([-1.0, 0.2, 1.5]), 0.7
    reference = integrate.quad(
        lambda f: np.log(_likelihood(f, label, pins, sigma)) * norm.pdf(f, mean, np.sqrt(var)), -7, 8, limit=200
    )[0]
    got = expected_log_likelihood(
        torch.tensor([[mean]], dtype=D), torch.tensor([[var]], dtype=D), torch.tensor([[label]]),
        torch.ones(1, 1, dtype=torch.bool), _pins(*pins), torch.tensor([sigma], dtype=D),
    )  # fmt: skip
    assert got.item() == pytest.approx(reference, rel=1e-6)


def _problem(seed=0, T=2, p=4):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, p, 2, generator=g, dtype=D)
    kernel = torch.exp(-0.5 * torch.cdist(x, x) ** 2) + 1e-3 * torch.eye(p, dtype=D)
    prior_mean = 0.3 * torch.randn(T, p, generator=g, dtype=D)
    labels = torch.randint(0, 4, (T, p), generator=g)
    valid = torch.ones(T, p, dtype=torch.bool)
    valid[1, -1] = False  # a padded slot
    kernel[1, -1, :-1] = kernel[1, :-1, -1] = 0.0
    kernel[1, -1, -1] = 1.0
    pins = torch.tensor([[-1.0, 0.0, 1.0], [-0.6, 0.3, 0.9]], dtype=D)
    sigma = torch.tensor([0.5, 0.8], dtype=D)
    return kernel, prior_mean, labels, valid, pins, sigma


def test_laplace_mode_matches_scipy():
    kernel, prior_mean, labels, valid, pins, sigma = _problem()
    fit = laplace_ordinal(kernel, prior_mean, labels, valid, pins, sigma)
    assert fit.converged
    for t in range(2):
        p = int(valid[t].sum())
        k_inv = np.linalg.inv(kernel[t, :p, :p].numpy())
        h = prior_mean[t, :p].numpy()
        edges = [np.concatenate([[-np.inf], pins[t].numpy(), [np.inf]])]

        def negative(f, t=t, p=p, k_inv=k_inv, h=h):
            y = labels[t, :p].numpy()
            s = sigma[t].item()
            lik = norm.cdf((edges[0][y + 1] - f) / s) - norm.cdf((edges[0][y] - f) / s)
            return -(np.log(lik).sum() - 0.5 * (f - h) @ k_inv @ (f - h))

        mode = optimize.minimize(negative, h, method="BFGS", options={"gtol": 1e-10}).x
        np.testing.assert_allclose(fit.mean[t, :p].numpy(), mode, atol=1e-5)
        # the Laplace covariance is (K^-1 + W)^-1 with W the negative Hessian of the log-likelihood
        _, _, g2 = ordinal_moments(torch.tensor(mode)[None], torch.zeros(1, p, dtype=D), labels[t : t + 1, :p],
                                   pins[t : t + 1], sigma[t : t + 1])  # fmt: skip
        covariance = np.linalg.inv(k_inv + np.diag(-g2[0].numpy()))
        np.testing.assert_allclose(fit.var[t, :p].numpy(), np.diag(covariance), rtol=1e-6)


@pytest.mark.parametrize("schedule", ["parallel", "sequential"])
def test_ep_matches_numerical_integration_on_two_items(schedule):
    """EP's posterior mean and variance against the exact posterior on a 2-D grid (EP is not exact
    for two coupled sites, but close: within a few hundredths), under either schedule."""
    kernel = torch.tensor([[[1.0, 0.6], [0.6, 1.0]]], dtype=D)
    labels, pins, sigma = torch.tensor([[0, 2]]), _pins(-0.3, 0.4), torch.tensor([0.5], dtype=D)
    valid = torch.ones(1, 2, dtype=torch.bool)
    fit = ep_ordinal(kernel, torch.zeros(1, 2, dtype=D), labels, valid, pins, sigma, schedule=schedule, tol=1e-9,
                     max_sweeps=200)  # fmt: skip
    assert fit.converged
    grid = np.linspace(-6, 6, 801)
    f1, f2 = np.meshgrid(grid, grid, indexing="ij")
    points = np.stack([f1, f2], -1)
    prior = np.exp(-0.5 * np.einsum("...i,ij,...j", points, np.linalg.inv(kernel[0].numpy()), points))
    density = prior * _likelihood(f1, 0, pins[0].numpy(), 0.5) * _likelihood(f2, 2, pins[0].numpy(), 0.5)
    density /= density.sum()
    exact_mean = np.array([(density * f1).sum(), (density * f2).sum()])
    exact_var = np.array([(density * f1**2).sum(), (density * f2**2).sum()]) - exact_mean**2
    np.testing.assert_allclose(fit.mean[0].numpy(), exact_mean, atol=0.02)
    np.testing.assert_allclose(fit.var[0].numpy(), exact_var, atol=0.02)


@pytest.mark.parametrize("schedule", ["parallel", "sequential"])
def test_ep_one_site_is_exact(schedule):
    kernel = torch.ones(1, 1, 1, dtype=D) * 1.7
    labels, pins, sigma = torch.tensor([[1]]), _pins(0.5, 1.5), torch.tensor([0.4], dtype=D)
    fit = ep_ordinal(kernel, torch.zeros(1, 1, dtype=D), labels, torch.ones(1, 1, dtype=torch.bool), pins, sigma,
                     schedule=schedule, tol=1e-10, max_sweeps=200)  # fmt: skip
    weight = lambda f: _likelihood(f, 1, pins[0].numpy(), 0.4) * norm.pdf(f, 0, np.sqrt(1.7))  # noqa: E731
    z = integrate.quad(weight, -10, 10)[0]
    mean = integrate.quad(lambda f: f * weight(f), -10, 10)[0] / z
    var = integrate.quad(lambda f: f * f * weight(f), -10, 10)[0] / z - mean**2
    assert fit.mean.item() == pytest.approx(mean, rel=1e-6)
    assert fit.var.item() == pytest.approx(var, rel=1e-6)


def _rbf_problem():
    g = torch.Generator().manual_seed(3)
    x = torch.rand(12, 1, generator=g, dtype=D) * 4
    y = torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(12, generator=g, dtype=D)
    test_x = torch.linspace(0, 4, 7, dtype=D)[:, None]
    return x, y, test_x, 0.2


def _gpr_posterior(kernel_train, cross, y, noise_var):
    valid = torch.ones(1, len(y), dtype=torch.bool)
    posterior = site_posterior(kernel_train[None], torch.zeros(1, len(y), dtype=D),
                               *gaussian_sites(y[None], valid, torch.tensor([noise_var], dtype=D)))  # fmt: skip
    q = cross.shape[0]
    return posterior.predict(cross[None], torch.zeros(1, q, dtype=D), torch.ones(1, q, dtype=D))


def test_gpr_matches_sklearn():
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF

    x, y, test_x, noise = _rbf_problem()
    reference = GaussianProcessRegressor(RBF(0.7), alpha=noise**2, optimizer=None).fit(x.numpy(), y.numpy())
    mean_ref, std_ref = reference.predict(test_x.numpy(), return_std=True)
    rbf = lambda a, b: torch.exp(-0.5 * torch.cdist(a, b) ** 2 / 0.7**2)  # noqa: E731
    mean, var = _gpr_posterior(rbf(x, x), rbf(test_x, x), y, noise**2)
    np.testing.assert_allclose(mean[0].numpy(), mean_ref, atol=1e-8)
    np.testing.assert_allclose(var[0].sqrt().numpy(), std_ref, atol=1e-7)


def test_gpr_matches_gpytorch_exact_gp():
    gpytorch = pytest.importorskip("gpytorch")
    x, y, test_x, noise = _rbf_problem()

    class Exact(gpytorch.models.ExactGP):
        def __init__(self, likelihood):
            super().__init__(x, y, likelihood)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.RBFKernel()

        def forward(self, inputs):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(inputs), self.covar_module(inputs))

    likelihood = gpytorch.likelihoods.GaussianLikelihood().double()
    likelihood.noise = noise**2
    model = Exact(likelihood).double()
    model.covar_module.lengthscale = 0.7
    model.eval()
    with torch.no_grad(), gpytorch.settings.fast_computations(False, False, False):
        latent = model(test_x)
        kernel = model.covar_module(x, x).to_dense()
        cross = model.covar_module(test_x, x).to_dense()
    mean, var = _gpr_posterior(kernel, cross, y, noise**2)
    np.testing.assert_allclose(mean[0].numpy(), latent.mean.numpy(), atol=1e-6)
    np.testing.assert_allclose(var[0].numpy(), latent.variance.numpy(), atol=1e-6)


def test_task_without_labels_keeps_its_prior():
    kernel, prior_mean, labels, valid, pins, sigma = _problem()
    valid[0] = False
    for fit in (ep_ordinal(kernel, prior_mean, labels, valid, pins, sigma),
                laplace_ordinal(kernel, prior_mean, labels, valid, pins, sigma)):  # fmt: skip
        torch.testing.assert_close(fit.mean[0], prior_mean[0])
        torch.testing.assert_close(fit.var[0], kernel[0].diagonal())
        assert torch.isfinite(fit.mean).all() and torch.isfinite(fit.var).all()
    new_pins, new_sigma = fit_thresholds(fit.mean, fit.var, labels, valid, pins, sigma)
    torch.testing.assert_close(new_pins[0], pins[0])  # nothing to learn from: unchanged
    assert torch.isfinite(new_pins).all() and torch.isfinite(new_sigma).all()


def test_threshold_step_raises_the_expected_log_likelihood_and_keeps_order():
    kernel, prior_mean, labels, valid, pins, sigma = _problem(seed=5)
    post = ep_ordinal(kernel, prior_mean, labels, valid, pins, sigma)
    before = expected_log_likelihood(post.mean, post.var, labels, valid, pins, sigma)
    new_pins, new_sigma = fit_thresholds(post.mean, post.var, labels, valid, pins, sigma)
    after = expected_log_likelihood(post.mean, post.var, labels, valid, new_pins, new_sigma)
    assert (after >= before - 1e-9).all() and (after > before + 1e-3).any()
    assert (torch.diff(new_pins, dim=1) > 0).all()


def test_prediction_is_the_most_probable_label():
    mean, var = torch.tensor([[-3.0, 0.1, 3.0]], dtype=D), torch.full((1, 3), 0.2, dtype=D)
    pins, sigma = _pins(-1.0, 1.0), torch.tensor([0.5], dtype=D)
    assert predict_ordinal(mean, var, pins, sigma).tolist() == [[0, 1, 2]]


def test_indefinite_kernel_is_refused():
    kernel = torch.tensor([[1.0, 2.0], [2.0, 1.0]])  # eigenvalues 3 and -1
    with pytest.raises(IndefiniteKernelError, match="not positive semi-definite") as error:
        check_kernel(kernel)
    assert isinstance(error.value, DataError)
    with pytest.raises(IndefiniteKernelError, match="NaN"):
        check_kernel(torch.tensor([[1.0, float("nan")], [float("nan"), 1.0]]))


def test_float32_low_rank_kernel_gets_jitter_and_no_nan():
    g = torch.Generator().manual_seed(0)
    features = torch.randn(30, 3, generator=g)
    kernel32 = features @ features.T  # rank 3 in float32: rounding makes it slightly indefinite
    assert torch.linalg.eigvalsh(kernel32.double()).min() < 1e-6
    kernel, jitter = check_kernel(kernel32)
    assert jitter > 0 and torch.linalg.eigvalsh(kernel).min() > 0
    labels = torch.randint(0, 3, (1, 30), generator=g)
    fit = ep_ordinal(kernel[None], torch.zeros(1, 30, dtype=D), labels, torch.ones(1, 30, dtype=torch.bool),
                     _pins(-0.5, 0.5), torch.ones(1, dtype=D))  # fmt: skip
    assert torch.isfinite(fit.mean).all() and torch.isfinite(fit.var).all()
