"""Algorithm 1 (online calibrated constraint classification) against its pseudo-code written as a loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datamodules.multilabel import planted_label_ranking
from metrics.label_ranking import footrule_distance, hamming_loss, kendall_tau_distance
from rankers.label_ranking.online import MANY_LABELS, CalibratedPerceptron


def constraints(y: np.ndarray, pairs: str) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """R(y) U (P x N), P and N of a graded example, as the paper's embedding functions give them."""
    relevant = [i for i in range(len(y)) if y[i] > 0]
    ranking = sorted(relevant, key=lambda i: -y[i])
    negative = [i for i in range(len(y)) if y[i] == 0]
    if pairs == "all":
        prefs = [(r, s) for r in range(len(y)) for s in range(len(y)) if y[r] > y[s]]
        return prefs, relevant, negative
    # adjacent: consecutive relevant labels, and P x N / P reduced to the lowest relevant grade
    lowest = [i for i in relevant if y[i] == min(y[relevant])] if relevant else []
    grades = sorted(set(y[relevant]), reverse=True)
    prefs = [(r, s) for r in ranking for s in ranking if grades.index(y[s]) == grades.index(y[r]) + 1]
    prefs += [(r, s) for r in lowest for s in negative]
    return prefs, lowest, negative


def slow_algorithm_1(x: np.ndarray, y: np.ndarray, loss: str, pairs: str) -> np.ndarray:
    """Algorithm 1 line by line for one run: weights [d, F] after streaming x [T, F], y [T, d]."""
    d = y.shape[1]
    w = np.zeros((d, x.shape[1]))
    loss_fn = {"hamming": hamming_loss, "kendall": kendall_tau_distance, "footrule": footrule_distance}[loss]
    for xt, yt in zip(x, y, strict=True):
        s = w @ xt
        value = float(loss_fn(torch.tensor(s[None]), torch.tensor(yt[None]))[0])
        if value > 0:
            beta, c = np.zeros(d), 0
            prefs, positive, negative = constraints(yt, pairs)
            for r, t in prefs:
                if s[r] <= s[t]:
                    beta[r] += 1
                    beta[t] -= 1
                    c += 1
            for r in positive:
                if s[r] <= 0:
                    beta[r] += 1
                    c += 1
            for r in negative:
                if s[r] >= 0:
                    beta[r] -= 1
                    c += 1
            if c:
                w += value * beta[:, None] / c * xt[None, :]
    return w


@pytest.mark.parametrize(("loss", "pairs"), [("hamming", "all"), ("kendall", "all"), ("footrule", "adjacent"),
                                             ("kendall", "adjacent")])  # fmt: skip
def test_equal_to_the_pseudo_code(loss, pairs):
    x, y, _ = planted_label_ranking(120, 5, 6, generator=torch.Generator().manual_seed(0), noise=0.5)
    if loss == "hamming":
        y = (y > 0).float()
    learner = CalibratedPerceptron(5, 6, loss=loss, pairs=pairs, average=False)
    learner.partial_fit(x[None].double().float(), y[None])
    expected = slow_algorithm_1(x.double().numpy(), y.double().numpy(), loss, pairs)
    np.testing.assert_allclose(learner.weights[0].numpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("loss", ["hamming", "constraints"])
def test_the_torchscript_loop_equals_the_python_loop(loss):
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(3, 200, 7, generator=generator), (torch.rand(3, 200, 5, generator=generator) < 0.4).float()
    fast, reference = (CalibratedPerceptron(7, 5, n_runs=3, loss=loss, scripted=s) for s in (True, False))
    torch.testing.assert_close(fast.partial_fit(x, y), reference.partial_fit(x, y))
    torch.testing.assert_close(fast.weights, reference.weights)
    torch.testing.assert_close(fast.hypothesis(), reference.hypothesis())


def test_runs_are_independent_learners_in_one_tensor():
    generator = torch.Generator().manual_seed(2)
    x, y = torch.randn(3, 100, 4, generator=generator), (torch.rand(3, 100, 6, generator=generator) < 0.3).float()
    together = CalibratedPerceptron(4, 6, n_runs=3)
    together.partial_fit(x, y)
    for run in range(3):
        alone = CalibratedPerceptron(4, 6)
        alone.partial_fit(x[run : run + 1], y[run : run + 1])
        torch.testing.assert_close(together.run_weights()[run], alone.run_weights()[0])


def test_a_separable_planted_model_is_learned():
    generator = torch.Generator().manual_seed(3)
    x, y, w = planted_label_ranking(1000, 6, 5, generator=generator)
    x = torch.cat([x, torch.ones(len(x), 1)], 1)  # the planted model has a bias
    learner = CalibratedPerceptron(7, 5, loss="kendall", average=False)
    passes = [learner.partial_fit(x[None], y[None]).mean() for _ in range(4)]
    test_x, test_y, _ = planted_label_ranking(500, 6, 5, generator=generator, weights=w)
    test_x = torch.cat([test_x, torch.ones(len(test_x), 1)], 1)
    scores = learner.scores(test_x)
    # mistakes become rarer pass by pass, and the test loss is a small fraction of chance's
    chance = kendall_tau_distance(torch.randn(len(test_y), 5, generator=generator), test_y).mean()
    assert passes[-1] < 0.6 * passes[0] and kendall_tau_distance(scores, test_y).mean() < min(0.04, chance / 5)


@pytest.mark.parametrize("loss", ["hamming", "constraints"])
def test_the_many_label_stream_equals_the_python_loop(loss):
    """0/1 labels on MANY_LABELS or more labels take the per-row stream: after the first pass most
    steps change few weight vectors, so both of its update branches run; two calls carry the state."""
    generator = torch.Generator().manual_seed(4)
    d = MANY_LABELS + 8
    x = torch.randn(2, 300, 12, generator=generator)
    y = (x @ torch.randn(12, d, generator=generator) > 2.0).float()  # a linear truth, 2-3 relevant of 40
    x, y = x.repeat(1, 3, 1), y.repeat(1, 3, 1)  # three passes over each run's stream
    fast, reference = (CalibratedPerceptron(12, d, n_runs=2, loss=loss, scripted=s) for s in (True, False))
    for part in (slice(0, 350), slice(350, None)):
        online = fast.partial_fit(x[:, part], y[:, part])
        torch.testing.assert_close(online, reference.partial_fit(x[:, part], y[:, part]))
    torch.testing.assert_close(fast.weights, reference.weights)
    torch.testing.assert_close(fast.hypothesis(), reference.hypothesis(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast.updates, reference.updates)


def test_the_per_row_stream_is_taken_only_where_it_pays():
    y = (torch.rand(5, MANY_LABELS, generator=torch.Generator().manual_seed(5)) < 0.3).float()
    assert CalibratedPerceptron(3, MANY_LABELS)._per_row(y)
    assert not CalibratedPerceptron(3, MANY_LABELS - 1)._per_row(y[:, 1:])  # few labels: the dense loop
    assert not CalibratedPerceptron(3, MANY_LABELS)._per_row(y * 2)  # graded labels: R(y) is not P x N
    assert not CalibratedPerceptron(3, MANY_LABELS, loss="kendall")._per_row(y)
    assert not CalibratedPerceptron(3, MANY_LABELS, scripted=False)._per_row(y)
    # off the CPU (here the meta device stands for a GPU): no per-step host branches
    assert not CalibratedPerceptron(3, MANY_LABELS, device="meta")._per_row(y)
