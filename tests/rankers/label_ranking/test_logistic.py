"""The batched logistic solver reaches scikit-learn's optimum for every label, constant labels included."""

import warnings

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from rankers.label_ranking.logistic import fit_logistic


def problem(seed: int, n: int = 120, f: int = 30, d: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.random((n, f)) * (rng.random(f) < 0.5)  # sparse-ish columns, some all zero
    planted = rng.normal(size=(f, d)) * 2
    y = (x @ planted + rng.normal(size=(n, d)) > np.median(x @ planted, 0)).astype(int)
    y[:, -1] = 0  # a label never relevant
    return x, y


@pytest.mark.parametrize("C", [0.1, 1.0, 30.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_each_label_equals_a_tightly_converged_sklearn_fit(C, seed):
    x, y = problem(seed)
    weight, bias = fit_logistic(x, y, C=C)
    for label in range(y.shape[1] - 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reference = LogisticRegression(C=C, tol=1e-12, max_iter=100_000).fit(x, y[:, label])
        expected = np.r_[reference.coef_[0], reference.intercept_]
        np.testing.assert_allclose(
            np.r_[weight[label], bias[label]], expected, rtol=0, atol=1e-4 * np.abs(expected).max()
        )
    assert weight[-1].tolist() == [0.0] * x.shape[1] and bias[-1] == -1.0


def test_the_solution_is_a_stationary_point_of_the_objective():
    x, y = problem(2)
    C = 3.0
    weight, bias = fit_logistic(x[:, :], y[:, :-1], C=C)
    params = torch.tensor(np.c_[weight, bias], requires_grad=True)
    sign = torch.tensor(y[:, :-1] * 2.0 - 1)
    margins = torch.tensor(x) @ params[:, :-1].T + params[:, -1]
    objective = 0.5 * (params[:, :-1] ** 2).sum() + C * torch.nn.functional.softplus(-sign * margins).sum()
    objective.backward()
    assert float(params.grad.abs().max()) < 1e-6 * (1 + C * len(x))
