"""PRank / OAP against a scalar Algorithm 1, threshold order, combiners, Widrow-Hoff."""

from __future__ import annotations

import math

import pytest
import torch

from rankers.perceptron import ensemble as ensemble_module
from rankers.perceptron.ensemble import (
    PRankEnsemble,
    WidrowHoff,
    _voted_ranks,
    counter_draws,
    draw_key,
    rank_of,
)


def scalar_prank(xs, ys, k):
    """Algorithm 1 exactly as printed, 1-based ranks, plain Python floats; yields (prediction, w, c)."""
    w = [0.0] * len(xs[0])
    c = [0.0] * (k - 1)
    for x, y in zip(xs, ys, strict=True):
        score = sum(wi * xi for wi, xi in zip(w, x, strict=True))
        thresholds = [*c, math.inf]
        y_hat = min(r for r in range(1, k + 1) if score - thresholds[r - 1] < 0)
        if y_hat != y:
            labels = [-1 if y <= r else 1 for r in range(1, k)]
            a = [lab if (score - c[r - 1]) * lab <= 0 else 0 for r, lab in zip(range(1, k), labels, strict=True)]
            w = [wi + sum(a) * xi for wi, xi in zip(w, x, strict=True)]
            c = [cr - ar for cr, ar in zip(c, a, strict=True)]
        yield y_hat, list(w), list(c)


def stream(seed, runs, steps, d, k):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, (runs, steps, d), generator=g).float() / 2  # exact in float32
    y = torch.randint(0, k, (runs, steps), generator=g)
    return x, y


# fused=True: the compiled CPU loop (kernels.prank_cpu); False: the tensor path every device runs
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("k", [2, 3, 5])
def test_single_perceptron_is_algorithm_1_example_by_example(k, fused):
    x, y = stream(k, runs=3, steps=300, d=4, k=k)
    model = PRankEnsemble(4, k, n_runs=3, fused=fused)
    for t in range(x.shape[1]):
        predicted = model.partial_fit(x[:, t : t + 1], y[:, t : t + 1])[:, 0, 0]
        for run in range(3):
            expected = list(scalar_prank(x[run, : t + 1].tolist(), (y[run, : t + 1] + 1).tolist(), k))[-1]
            assert predicted[run].item() + 1 == expected[0]
            assert model.weights[run, 0].tolist() == expected[1]
            assert model.thresholds[run, 0].tolist() == expected[2]


@pytest.mark.parametrize("fused", [True, False])
def test_whole_stream_matches_algorithm_1(fused):
    x, y = stream(9, runs=2, steps=2000, d=3, k=5)
    model = PRankEnsemble(3, 5, n_runs=2, fused=fused)
    predictions = model.partial_fit(x, y)
    for run in range(2):
        reference = list(scalar_prank(x[run].tolist(), (y[run] + 1).tolist(), 5))
        assert [p + 1 for p in predictions[run, 0].tolist()] == [r[0] for r in reference]
        assert model.weights[run, 0].tolist() == reference[-1][1]


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("tau", [0.3, 1.0])
def test_threshold_order_is_preserved_after_every_update(tau, fused):
    x, y = stream(1, runs=4, steps=500, d=5, k=6)
    x = x + torch.randn(x.shape, generator=torch.Generator().manual_seed(2))  # non-integer data too
    model = PRankEnsemble(5, 6, n_perceptrons=7, tau=tau, n_runs=4, seed=3, fused=fused)
    for t in range(x.shape[1]):
        model.partial_fit(x[:, t : t + 1], y[:, t : t + 1])
        assert (model.thresholds.diff(dim=-1) >= 0).all(), f"order broken at step {t}"
    assert model.mistakes.sum() > 0


@pytest.mark.parametrize(("d", "noisy"), [(3, False), (40, False), (3, True), (40, True)])
def test_fused_cpu_loop_and_tensor_path_agree(d, noisy):
    # N = 19 is not a multiple of the kernel's block; 2100 steps cross a chunk of Bernoulli draws,
    # each path drawing its own (the C++ draws and counter_draws' torch ops: the same bits)
    x, y = stream(5, runs=3, steps=2100, d=d, k=5)
    if noisy:
        x = x + torch.randn(x.shape, generator=torch.Generator().manual_seed(6))
    fused = PRankEnsemble(d, 5, n_perceptrons=19, tau=0.6, n_runs=3, seed=4, fused=True)
    tensor = PRankEnsemble(d, 5, n_perceptrons=19, tau=0.6, n_runs=3, seed=4, fused=False)
    online = fused.partial_fit(x, y), tensor.partial_fit(x, y)
    assert torch.equal(fused.presented, tensor.presented)
    if noisy and d > 3:
        # the only difference is the summation order of w . x (sequential in the C++ loop, BLAS's in
        # bmm, which the tensor path uses for d * N >= 400): a score within rounding of a threshold
        # can send one perceptron another way, and its trajectory diverges from there
        same = (online[0] == online[1]).all(-1)
        assert same.float().mean() > 0.95, f"{int((~same).sum())} of 57 trajectories differ"
        return
    assert torch.equal(*online)
    torch.testing.assert_close(fused.weights, tensor.weights, rtol=1e-5, atol=1e-4)
    assert torch.equal(fused.thresholds, tensor.thresholds)
    for counter in ("correct", "mistakes"):
        assert torch.equal(getattr(fused, counter), getattr(tensor, counter)), counter


def test_bernoulli_presentation_rate_and_independence():
    x, y = stream(4, runs=3, steps=4000, d=2, k=3)
    model = PRankEnsemble(2, 3, n_perceptrons=50, tau=[0.3, 0.6, 0.9], n_runs=3, seed=0)
    model.partial_fit(x, y)
    rate = model.presented.mean(1) / 4000
    torch.testing.assert_close(rate, torch.tensor([0.3, 0.6, 0.9]), atol=0.01, rtol=0)
    assert model.weights[0].std(0).sum() > 0  # perceptrons saw different sub-streams


def test_counter_draws_are_independent_bernoulli_draws():
    """The counter-based draws (SplitMix64 of the draw's position) are statistically what
    ``torch.rand(...) < tau`` gives: each tau's rate within 5 standard errors, and no correlation
    between neighbouring perceptrons, runs, examples or seeds beyond 5 standard errors."""
    steps, n = 4000, 64
    tau = torch.tensor([0.05, 0.3, 0.5, 0.6, 0.9, 0.99])
    draws = counter_draws(draw_key(0), 0, steps, tau, n).double()  # [T, R, N]
    trials = steps * n
    rate = draws.mean((0, 2))
    assert ((rate - tau.double()).abs() < 5 * (tau * (1 - tau) / trials).double().sqrt()).all(), rate

    def correlation(a: torch.Tensor, b: torch.Tensor) -> float:
        a, b = a.flatten() - a.mean(), b.flatten() - b.mean()
        return float((a * b).sum() / (a.norm() * b.norm()))

    half = draws[:, 2]  # tau = 0.5
    other_seed = counter_draws(draw_key(1), 0, steps, tau, n).double()[:, 2]
    bound = 5 / (steps * n) ** 0.5
    pairs = {
        "next perceptron": (half[:, :-1], half[:, 1:]),
        "next example": (half[:-1], half[1:]),
        "next run": (draws[:, 2], draws[:, 3] > 0.5),
        "seed 1": (half, other_seed),
        "example t + N": (half[:-n], half[n:]),
    }
    for name, (a, b) in pairs.items():
        assert abs(correlation(a, b.double())) < bound, name


def test_counter_draws_do_not_depend_on_chunks_or_paths(monkeypatch):
    """Drawn in one call or in pieces, by the C++ loop or by torch ops: the same presentations."""
    monkeypatch.setattr(ensemble_module, "CHUNK", 64)
    monkeypatch.setattr(ensemble_module, "CPU_CHUNK", 64)
    x, y = stream(8, runs=2, steps=300, d=3, k=4)
    models = [PRankEnsemble(3, 4, n_perceptrons=9, tau=[0.3, 0.8], n_runs=2, seed=5, fused=f) for f in (True, False)]
    models[0].partial_fit(x, y)
    for piece in (slice(0, 7), slice(7, 200), slice(200, 300)):
        models[1].partial_fit(x[:, piece], y[:, piece])
    assert models[0].drawn == models[1].drawn == 300
    assert torch.equal(models[0].presented, models[1].presented)
    assert torch.equal(models[0].thresholds, models[1].thresholds)
    expected = counter_draws(draw_key(5), 0, 300, torch.tensor([0.3, 0.8]), 9).sum(0).float()
    assert torch.equal(models[0].presented, expected)


def test_tau_one_perceptrons_are_identical_prank():
    x, y = stream(5, runs=2, steps=800, d=3, k=4)
    ensemble = PRankEnsemble(3, 4, n_perceptrons=5, tau=1.0, n_runs=2)
    single = PRankEnsemble(3, 4, n_runs=2)
    ensemble.partial_fit(x, y)
    single.partial_fit(x, y)
    assert torch.equal(ensemble.weights, single.weights.expand_as(ensemble.weights))
    test_x = x[:, :50]
    for combine in ("bpm", "bagg", "vp"):
        assert torch.equal(ensemble.predict(test_x, combine), single.predict(test_x, "bpm"))


def test_combiners_by_hand():
    model = PRankEnsemble(1, 3, n_perceptrons=2, n_runs=1)
    model.weights[:] = torch.tensor([[[1.0], [3.0]]])
    model.thresholds[:] = torch.tensor([[[0.5, 1.5], [1.0, 2.0]]])
    model.correct[:] = torch.tensor([[1.0, 3.0]])
    x = torch.tensor([[[1.0]]])
    # each: p1 score 1 -> rank 1 (0.5 <= 1 < 1.5); p2 score 3 -> rank 2
    assert model.predict(x, "each").tolist() == [[[1], [2]]]
    # bpm: w = 2, c = (0.75, 1.75) -> rank 2
    assert model.predict(x, "bpm").tolist() == [[2]]
    assert model.predict(x, "bagg").tolist() == [[2]]  # (1 + 2) / 2 = 1.5 rounds up
    assert model.predict(x, "vp").tolist() == [[2]]  # (1*1 + 3*2) / 4 = 1.75
    model.correct[:] = torch.tensor([[3.0, 1.0]])
    assert model.predict(x, "vp").tolist() == [[1]]  # (3*1 + 1*2) / 4 = 1.25


def test_rank_of_is_min_over_thresholds():
    thresholds = torch.tensor([[-1.0, 0.0, 2.0]])
    scores = torch.tensor([-5.0, -1.0, -0.5, 0.0, 1.9, 2.0, 9.0])
    assert rank_of(scores[:, None], thresholds).squeeze(-1).tolist() == [0, 1, 1, 2, 2, 3, 3]


def scalar_voted_prank(xs, ys, k, test_xs):
    """Freund & Schapire's voted perceptron over Algorithm 1's hypotheses, 1-based ranks."""
    w, c, survival, hypotheses = [0.0] * len(xs[0]), [0.0] * (k - 1), 0, []

    def rank(w, c, x):
        score = sum(wi * xi for wi, xi in zip(w, x, strict=True))
        return min(r for r in range(1, k + 1) if score - [*c, math.inf][r - 1] < 0)

    for x, y in zip(xs, ys, strict=True):
        if rank(w, c, x) == y:
            survival += 1
            continue
        hypotheses.append((w, c, survival))
        score = sum(wi * xi for wi, xi in zip(w, x, strict=True))
        a = [lab if (score - c[r - 1]) * lab <= 0 else 0 for r, lab in ((r, -1 if y <= r else 1) for r in range(1, k))]
        w = [wi + sum(a) * xi for wi, xi in zip(w, x, strict=True)]
        c = [cr - ar for cr, ar in zip(c, a, strict=True)]
        survival = 0
    hypotheses.append((w, c, survival))
    total = sum(v for _, _, v in hypotheses)
    return [math.floor(sum(v * rank(hw, hc, x) for hw, hc, v in hypotheses) / total + 0.5) for x in test_xs]


def test_voted_prank_weights_hypotheses_by_survival():
    x, y = stream(6, runs=2, steps=600, d=3, k=3)
    model = PRankEnsemble(3, 3, n_runs=2, keep_history=True)
    model.partial_fit(x, y)
    test_x = x[:, :40]
    voted = model.predict(test_x, "voted")
    for run in range(2):
        expected = scalar_voted_prank(x[run].tolist(), (y[run] + 1).tolist(), 3, test_x[run].tolist())
        assert [v + 1 for v in voted[run].tolist()] == expected


@pytest.mark.parametrize("fused", [True, False])  # the C++ stream's records, the tensor path's slots
def test_voted_survival_counts_every_correct_round_whatever_the_other_runs_do(fused):
    # the zero hypothesis predicts the top rank: a run whose stream starts with top ranks survives
    # those rounds, and its vote must keep them, also while no run has made a mistake yet
    x, y = stream(7, runs=3, steps=200, d=3, k=3)
    y[0, :5] = 2
    y[1, :1] = 0  # run 1 errs at once
    batched = PRankEnsemble(3, 3, n_runs=3, keep_history=True, fused=fused)
    batched.partial_fit(x, y)
    survival = batched._open.clone().view(-1)
    for _, _, votes, rows in batched.history:
        assert (votes > 0).all()  # only hypotheses with a vote are kept
        survival.index_add_(0, rows, votes)
    assert torch.equal(survival.view_as(batched.correct), batched.correct)
    test_x = x[:, :50]
    voted = batched.mean_rank(test_x, "voted")
    for run in range(3):
        alone = PRankEnsemble(3, 3, n_runs=1, keep_history=True, fused=fused)
        alone.partial_fit(x[run : run + 1], y[run : run + 1])
        torch.testing.assert_close(alone.mean_rank(test_x[run : run + 1], "voted")[0], voted[run], rtol=0, atol=1e-12)
        expected = scalar_voted_prank(x[run].tolist(), (y[run] + 1).tolist(), 3, test_x[run].tolist())
        assert [v + 1 for v in alone.predict(test_x[run : run + 1], "voted")[0].tolist()] == expected


def test_widrow_hoff_converges_on_a_linear_target():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.rand(2, 3000, 2, generator=g), torch.ones(2, 3000, 1)], -1)
    y = torch.round(x[..., 0] * 2 + x[..., 1] * 2).long().clamp(0, 4)
    model = WidrowHoff(3, 5, eta=[0.2, 0.05], n_runs=2)
    online = model.partial_fit(x, y)
    late_loss = (online[..., -1000:] - y[:, None, -1000:]).abs().float().mean()
    assert late_loss < 0.3
    assert model.predict(x[:, :10]).shape == (2, 2, 10)


def test_rejects_bad_input():
    model = PRankEnsemble(2, 3, n_runs=2)
    with pytest.raises(ValueError):
        model.partial_fit(torch.zeros(2, 5, 3), torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError):
        model.partial_fit(torch.zeros(2, 5, 2), torch.full((2, 5), 3))
    with pytest.raises(ValueError):
        PRankEnsemble(2, 3, tau=0.0)


@pytest.mark.parametrize("combine", ["bagg", "vp", "voted"])
def test_mean_rank_is_the_unrounded_vote_and_predict_rounds_it(combine):
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(2, 300, 4, generator=generator)
    y = torch.randint(0, 5, (2, 300), generator=generator)
    ensemble = PRankEnsemble(4, 5, n_perceptrons=7, tau=0.5, n_runs=2, keep_history=combine == "voted")
    ensemble.partial_fit(x, y)
    mean = ensemble.mean_rank(x[:, :50], combine)
    each = ensemble.predict(x[:, :50], "each").float()  # [R, N, n]
    if combine == "bagg":  # Harrington: H(x) = sum_i h_i(x) / N
        torch.testing.assert_close(mean, each.mean(1))
    if combine == "vp":  # sum_i v_i h_i(x) / sum_i v_i, v_i = correct predictions on presented examples
        votes = ensemble.correct.unsqueeze(-1)
        torch.testing.assert_close(mean, (each * votes).sum(1) / votes.sum(1))
    assert torch.equal(ensemble.predict(x[:, :50], combine), torch.floor(mean + 0.5).clamp(0, 4).long())
    assert (mean != mean.round()).any()  # a real-valued vote, not a rank


def test_voted_ranks_count_as_rank_of_whatever_the_order_and_nan():
    """The voted history's binary search is rank_of's count: on ordered thresholds, and through the
    fallback on unordered ones and NaN scores (rank 0), ties (score == threshold) included."""
    g = torch.Generator().manual_seed(3)
    thresholds = torch.randint(-4, 5, (50, 4), generator=g).float() / 2
    score = torch.randint(-6, 7, (50, 30), generator=g).float() / 2  # many scores equal a threshold
    ordered = thresholds.sort(-1).values
    assert torch.equal(_voted_ranks(score, ordered), rank_of(score, ordered.unsqueeze(1)))
    assert torch.equal(_voted_ranks(score, thresholds), rank_of(score, thresholds.unsqueeze(1)))
    score[3, 4] = float("nan")
    assert torch.equal(_voted_ranks(score, ordered), rank_of(score, ordered.unsqueeze(1)))
    assert _voted_ranks(score, ordered)[3, 4] == 0
