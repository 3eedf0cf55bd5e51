"""PRank / OAP stream kernels: C++ (CPU), Triton (interpreter on CPU, compiled on CUDA) and the tensor
path against a scalar Algorithm 1 written here, example by example, on the same Bernoulli draws."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from kernels import prank_cpu, prank_triton
from kernels._native import NativeKernel
from rankers.perceptron import ensemble as perceptron
from rankers.perceptron.ensemble import PRankEnsemble, WidrowHoff
from tests.conftest import cuda_only

PATHS = ["tensor", "cpu", "triton"]
FUSED = {"tensor": False, "cpu": "cpu", "triton": "triton"}


@pytest.fixture(autouse=True)
def triton_interpreter(monkeypatch):
    """Triton kernels run on CPU tensors through Triton's interpreter."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def needs(path: str) -> None:
    if path == "triton" and prank_triton.triton is None:
        pytest.skip("triton is not installed (pip install -e .[dev])")
    if path == "cpu":  # pip install -e . builds it (CI checks with python -m kernels.build): missing is a failure
        assert prank_cpu.kernel() is not None, "the PRank CPU kernel could not be built"


def scalar_oap(xs, ys, shown, k):
    """Algorithm 1 as printed (1-based ranks, Python floats) for one perceptron that sees example t
    only where ``shown[t]`` (Algorithm 2); yields (prediction before the update, w, c) per example."""
    w, c = [0.0] * len(xs[0]), [0.0] * (k - 1)
    for x, y, seen in zip(xs, ys, shown, strict=True):
        score = sum(wi * xi for wi, xi in zip(w, x, strict=True))
        y_hat = min(r for r in range(1, k + 1) if score - [*c, math.inf][r - 1] < 0)
        if seen and y_hat != y:
            labels = [-1 if y <= r else 1 for r in range(1, k)]
            a = [lab if (score - c[r - 1]) * lab <= 0 else 0 for r, lab in zip(range(1, k), labels, strict=True)]
            w = [wi + sum(a) * xi for wi, xi in zip(w, x, strict=True)]
            c = [cr - ar for cr, ar in zip(c, a, strict=True)]
        yield y_hat, list(w), list(c)


def exact_stream(seed: int, runs: int, steps: int, d: int, k: int, n: int, tau: float = 0.6):
    """Half-integer features (every sum exact in float32, so all paths agree bit for bit) and draws."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, (runs, steps, d), generator=g).float() / 2
    y = torch.randint(0, k, (runs, steps), generator=g)
    presented = torch.rand(steps, runs, n, generator=g) < tau
    return x, y, presented


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("k", [2, 5])
def test_every_path_is_algorithm_1_on_the_same_draws(path, k):
    needs(path)
    runs, steps, d, n = 2, 40, 3, 5
    x, y, presented = exact_stream(k, runs, steps, d, k, n)
    model = PRankEnsemble(d, k, n_perceptrons=n, n_runs=runs, fused=FUSED[path])
    predictions = model.partial_fit(x, y, presented=presented)
    for run in range(runs):
        for p in range(n):
            reference = list(scalar_oap(x[run].tolist(), (y[run] + 1).tolist(), presented[:, run, p].tolist(), k))
            assert [v + 1 for v in predictions[run, p].tolist()] == [r[0] for r in reference]
            assert model.weights[run, p].tolist() == reference[-1][1]
            assert model.thresholds[run, p].tolist() == reference[-1][2]


@pytest.mark.parametrize("path", ["cpu", "triton"])
def test_kernels_match_the_tensor_path_example_by_example(path):
    needs(path)
    runs, steps, d, n, k = 2, 12, 4, 19, 4  # N = 19: not a multiple of any block size
    x, y, presented = exact_stream(3, runs, steps, d, k, n)
    x = x + torch.randn(x.shape, generator=torch.Generator().manual_seed(4))  # inexact floats too
    fused = PRankEnsemble(d, k, n_perceptrons=n, n_runs=runs, fused=FUSED[path])
    tensor = PRankEnsemble(d, k, n_perceptrons=n, n_runs=runs, fused=False)
    for t in range(steps):
        one = slice(t, t + 1)
        assert torch.equal(
            fused.partial_fit(x[:, one], y[:, one], presented=presented[one]),
            tensor.partial_fit(x[:, one], y[:, one], presented=presented[one]),
        ), f"predictions differ at example {t}"
        assert torch.equal(fused.thresholds, tensor.thresholds), f"thresholds differ after example {t}"
        assert (fused.thresholds.diff(dim=-1) >= 0).all(), f"threshold order broken after example {t}"
        # summation order of w . x is the only difference
        torch.testing.assert_close(fused.weights, tensor.weights, rtol=1e-5, atol=1e-5)
    for counter in ("correct", "presented", "mistakes"):
        assert torch.equal(getattr(fused, counter), getattr(tensor, counter)), counter


@pytest.mark.parametrize("path", ["cpu", "triton"])
def test_chunks_runs_and_own_draws(path, monkeypatch):
    """Several chunks of one stream, R runs each with its own stream and tau, draws from the generator."""
    needs(path)
    monkeypatch.setattr(perceptron, "CHUNK", 16)
    monkeypatch.setattr(perceptron, "CPU_CHUNK", 16)
    runs, steps, d, n, k = 3, 40, 3, 6, 3
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(runs, steps, d, generator=g), torch.randint(0, k, (runs, steps), generator=g)
    options = dict(n_perceptrons=n, n_runs=runs, tau=[0.3, 0.6, 1.0], seed=11)
    fused = PRankEnsemble(d, k, **options, fused=FUSED[path])
    tensor = PRankEnsemble(d, k, **options, fused=False)
    assert torch.equal(fused.partial_fit(x, y), tensor.partial_fit(x, y))
    assert torch.equal(fused.thresholds, tensor.thresholds)
    torch.testing.assert_close(fused.weights, tensor.weights, rtol=1e-5, atol=1e-5)
    assert torch.equal(fused.presented, tensor.presented)


@pytest.mark.parametrize("path", ["cpu", "triton"])
def test_zero_padded_features_change_nothing(path):
    """Table 2's protocol pads d across trials: zero columns must leave predictions and weights alone."""
    needs(path)
    runs, steps, d, n, k = 2, 30, 3, 4, 5
    x, y, presented = exact_stream(8, runs, steps, d, k, n)
    padded = torch.cat([x, torch.zeros(runs, steps, 5)], -1)
    plain = PRankEnsemble(d, k, n_perceptrons=n, n_runs=runs, fused=FUSED[path])
    wide = PRankEnsemble(d + 5, k, n_perceptrons=n, n_runs=runs, fused=FUSED[path])
    assert torch.equal(plain.partial_fit(x, y, presented=presented), wide.partial_fit(padded, y, presented=presented))
    assert torch.equal(wide.weights[..., :d], plain.weights)
    assert not wide.weights[..., d:].any()


@pytest.mark.parametrize("path", ["cpu", "triton"])
@pytest.mark.parametrize("combine", ["bagg", "vp"])
def test_online_bagg_and_vp_from_the_kernels_equal_the_tensor_path(path, combine, monkeypatch):
    """OAP-Bagg / OAP-VP online predictions (Figure 2's curve) follow from the kernels' per-perceptron
    predictions and running vote counts: the same as the tensor path's round-by-round rule."""
    needs(path)
    monkeypatch.setattr(perceptron, "CHUNK", 8)  # votes carried across chunks
    monkeypatch.setattr(perceptron, "CPU_CHUNK", 8)
    runs, steps, d, n, k = 2, 20, 3, 7, 4
    x, y, presented = exact_stream(5, runs, steps, d, k, n, tau=0.5)
    fused = PRankEnsemble(d, k, n_perceptrons=n, n_runs=runs, fused=FUSED[path])
    tensor = PRankEnsemble(d, k, n_perceptrons=n, n_runs=runs, fused=False)
    assert fused._kernel(combine) is not None and tensor._kernel(combine) is None
    for half in (slice(0, 12), slice(12, steps)):  # two calls: counts carried across calls too
        online = fused.partial_fit(x[:, half], y[:, half], combine=combine, presented=presented[half])
        expected = tensor.partial_fit(x[:, half], y[:, half], combine=combine, presented=presented[half])
        assert torch.equal(online, expected)
    for counter in ("correct", "presented", "mistakes"):
        assert torch.equal(getattr(fused, counter), getattr(tensor, counter)), counter
    assert torch.equal(fused.predict(x[:, :5], combine), tensor.predict(x[:, :5], combine))


def test_launch_config_blocks_are_powers_of_two():
    for n, d, k in [(1, 1, 2), (100, 6, 5), (19, 300, 3), (500, 5000, 10)]:
        config = prank_triton.launch_config(n, d, k)
        for name in ("BLOCK_N", "BLOCK_D", "BLOCK_K"):
            assert config[name] & (config[name] - 1) == 0 and config[name] >= 2
        assert config["BLOCK_D"] >= d and config["BLOCK_K"] >= k - 1
        assert 1 <= config["num_warps"] <= 8


def test_forced_kernel_that_is_unavailable_is_an_error(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    model = PRankEnsemble(2, 3, fused="triton")
    with pytest.raises(RuntimeError, match="not available"):
        model.partial_fit(torch.zeros(1, 3, 2), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError):
        PRankEnsemble(2, 3, fused="gpu")


@pytest.mark.parametrize("n", [1, 3])
def test_the_voted_kernel_is_the_tensor_path(n):
    """PRank-VP's evaluation through the C++ loop and through the tensor path, on exact data (every
    score exact in float32, so ties with thresholds fall the same way): the same float64 sums."""
    needs("cpu")
    x, y, presented = exact_stream(4, 3, 400, 4, 5, n)
    test_x = torch.randint(-3, 4, (3, 50, 4), generator=torch.Generator().manual_seed(5)).float() / 2
    voted = {}
    for fused in (True, False):
        model = PRankEnsemble(4, 5, n_perceptrons=n, n_runs=3, keep_history=True, fused=fused)
        model.partial_fit(x, y, presented=presented)
        voted[fused] = model.mean_rank(test_x, "voted")
    assert torch.equal(voted[True], voted[False])


def sorted_records(model: PRankEnsemble) -> tuple[torch.Tensor, ...]:
    """The model's voted history as one table, perceptron by perceptron and, within one, in stream
    order (the C++ stream writes per perceptron per chunk, the tensor path per slot)."""
    weights, thresholds, survival, rows = model._voting_records()
    order = torch.sort(rows, stable=True).indices
    return weights[order], thresholds[order], survival[order], rows[order]


@pytest.mark.parametrize(("n", "tau"), [(1, 1.0), (5, 0.6)])
def test_the_cpp_stream_records_the_voted_history_of_the_tensor_path(n, tau, monkeypatch):
    """PRank-VP / a voted OAP through the C++ stream: the same hypotheses, survivals, counters and
    voted mean ranks as the tensor path, on exact data (every sum exact, so ties fall alike), over
    several chunks (history buffers refilled, open survivals carried across chunks and calls)."""
    needs("cpu")
    monkeypatch.setattr(perceptron, "CHUNK", 32)
    monkeypatch.setattr(perceptron, "CPU_CHUNK", 32)
    runs, steps, d, k = 3, 300, 4, 5
    x, y, presented = exact_stream(9, runs, steps, d, k, n, tau=tau)
    test_x = torch.randint(-3, 4, (runs, 60, d), generator=torch.Generator().manual_seed(10)).float() / 2
    models = {}
    for fused in (True, False):
        model = PRankEnsemble(d, k, n_perceptrons=n, n_runs=runs, keep_history=True, fused=fused)
        assert (model._kernel(None) is prank_cpu.stream) == fused
        for half in (slice(0, 150), slice(150, steps)):
            model.partial_fit(x[:, half], y[:, half], presented=presented[half], return_predictions=fused)
        models[fused] = model
    fused, tensor = models[True], models[False]
    for got, expected in zip(sorted_records(fused), sorted_records(tensor), strict=True):
        assert torch.equal(got, expected)
    assert len(sorted_records(fused)[0]) > 10 * runs * n  # a real history, not a handful
    for name in ("weights", "thresholds", "correct", "presented", "mistakes", "_open"):
        assert torch.equal(getattr(fused, name), getattr(tensor, name)), name
    assert torch.equal(fused.mean_rank(test_x, "voted"), tensor.mean_rank(test_x, "voted"))
    tensor.fused = False  # the C++ records scored by the tensor path's evaluation too
    fused.fused = False
    assert torch.equal(fused.mean_rank(test_x, "voted"), tensor.mean_rank(test_x, "voted"))


def test_history_chunks_shrink_to_the_buffer_budget(monkeypatch):
    """Many perceptrons with a history: calls of fewer examples, the same records as one long call."""
    needs("cpu")
    runs, steps, d, k, n = 2, 120, 3, 4, 6
    x, y, presented = exact_stream(12, runs, steps, d, k, n, tau=0.5)
    whole = PRankEnsemble(d, k, n_perceptrons=n, n_runs=runs, keep_history=True)
    whole.partial_fit(x, y, presented=presented)
    monkeypatch.setattr(perceptron, "HISTORY_BYTES", runs * n * (d + k) * 4 * 5)  # 10 examples a call
    chunked = PRankEnsemble(d, k, n_perceptrons=n, n_runs=runs, keep_history=True)
    chunked.partial_fit(x, y, presented=presented)
    assert len(chunked.history) > 5
    for got, expected in zip(sorted_records(chunked), sorted_records(whole), strict=True):
        assert torch.equal(got, expected)


def test_the_history_buffer_must_hold_a_chunk():
    needs("cpu")
    x, y, presented = exact_stream(0, 1, 10, 3, 4, 2)
    weights, thresholds = torch.zeros(1, 2, 3), torch.zeros(1, 2, 3)
    history = prank_cpu.History.empty(torch.zeros(1, 2), 3, 3, cap=4)  # 10 examples need 5
    with pytest.raises(ValueError, match="cannot hold"):
        prank_cpu.stream(x, y, presented, weights, thresholds, None, torch.zeros(1, 2), torch.zeros(1, 2), history)


@pytest.mark.parametrize("tau", [0.3, 1.0])
def test_without_predictions_the_state_is_the_same(tau):
    """``return_predictions=False`` writes no predictions: nothing of the state may change."""
    needs("cpu")
    runs, steps, d, n, k = 2, 200, 4, 19, 5
    x, y, presented = exact_stream(13, runs, steps, d, k, n, tau=tau)
    x = x + torch.randn(x.shape, generator=torch.Generator().manual_seed(14))
    with_predictions = PRankEnsemble(d, k, n_perceptrons=n, n_runs=runs)
    without = PRankEnsemble(d, k, n_perceptrons=n, n_runs=runs)
    assert with_predictions.partial_fit(x, y, presented=presented) is not None
    assert without.partial_fit(x, y, presented=presented, return_predictions=False) is None
    for name in ("weights", "thresholds", "correct", "presented", "mistakes"):
        assert torch.equal(getattr(with_predictions, name), getattr(without, name)), name


def test_widrow_hoff_through_the_cpp_loop_is_the_tensor_path():
    """The C++ Widrow-Hoff stream against the tensor path on random data: weights to float32
    rounding (the estimate's sum may be taken in another order), the same rounded predictions."""
    needs("cpu")
    g = torch.Generator().manual_seed(15)
    runs, steps, d = 3, 2000, 6
    x = torch.cat([torch.rand(runs, steps, d - 1, generator=g), torch.ones(runs, steps, 1)], -1)
    y = torch.randint(0, 5, (runs, steps), generator=g)
    models = {fused: WidrowHoff(d, 5, eta=[0.2, 0.05, 0.01], n_runs=runs, fused=fused) for fused in ("cpu", False)}
    online = {fused: model.partial_fit(x, y) for fused, model in models.items()}
    torch.testing.assert_close(models["cpu"].weights, models[False].weights, rtol=1e-5, atol=1e-5)
    assert torch.equal(online["cpu"], online[False])
    test_x = x[:, :500]
    assert torch.equal(models["cpu"].predict(test_x), models[False].predict(test_x))
    assert models["cpu"].partial_fit(x[:, :10], y[:, :10], return_predictions=False) is None


def splitmix64_draws(key: int, first_step: int, steps: int, tau: list[float], n: int) -> np.ndarray:
    """The counter-based draws written again in numpy's uint64 (wrapping) arithmetic."""
    runs = len(tau)
    with np.errstate(over="ignore"):
        i = np.arange(steps * runs * n, dtype=np.uint64) + np.uint64(first_step * runs * n)
        z = np.uint64(key) + (i + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    uniform = (z >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24)
    return uniform.reshape(steps, runs, n) < np.asarray(tau, np.float32)[None, :, None]


@pytest.mark.parametrize(("seed", "first", "steps", "n"), [(0, 0, 50, 1), (7, 12345, 33, 19), (2**40, 3, 5, 100)])
def test_the_cpp_draws_are_splitmix64_as_written_in_numpy_and_torch(seed, first, steps, n):
    needs("cpu")
    tau = [0.3, 0.6, 0.9, 0.5 + 2**-24]
    key = perceptron.draw_key(seed)
    out = torch.empty(steps, len(tau), n, dtype=torch.bool)
    prank_cpu.bernoulli(key, first, torch.tensor(tau), out)
    expected = splitmix64_draws(key, first, steps, tau, n)
    assert np.array_equal(out.numpy(), expected)
    assert torch.equal(perceptron.counter_draws(key, first, steps, torch.tensor(tau), n), out)


def test_counter_draws_in_blocks_are_the_same_draws(monkeypatch):
    monkeypatch.setattr(perceptron, "DRAW_BLOCK", 100)  # 2 examples of 4 runs x 13 at a time
    tau = [0.2, 0.4, 0.6, 0.8]
    got = perceptron.counter_draws(perceptron.draw_key(3), 5, 9, torch.tensor(tau), 13)
    assert np.array_equal(got.numpy(), splitmix64_draws(perceptron.draw_key(3), 5, 9, tau, 13))


# -- without the C++ kernel (how it is built and found: test_native.py) ------------------------------


def test_missing_compiler_falls_back_to_the_tensor_path(monkeypatch, tmp_path):
    """No installed library, an empty cache and no compiler: one warning, then the tensor path."""
    spec = dataclasses.replace(prank_cpu.KERNEL.spec, directory=tmp_path)
    (tmp_path / "prank_cpu.cpp").write_text(prank_cpu.KERNEL.spec.source.read_text())
    monkeypatch.setattr(prank_cpu, "KERNEL", NativeKernel(spec))
    monkeypatch.setenv("LTR_KERNELS_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    with pytest.warns(UserWarning, match="PRank CPU kernel unavailable, using the tensor path"):
        assert prank_cpu.kernel() is None
    x, y, presented = exact_stream(1, 2, 30, 3, 4, 3)
    fallback = PRankEnsemble(3, 4, n_perceptrons=3, n_runs=2, fused=True)
    tensor = PRankEnsemble(3, 4, n_perceptrons=3, n_runs=2, fused=False)
    assert torch.equal(fallback.partial_fit(x, y, presented=presented), tensor.partial_fit(x, y, presented=presented))


def test_the_kernel_refuses_a_wrong_shape_instead_of_reading_out_of_bounds():
    needs("cpu")
    x, y, presented = exact_stream(0, 2, 10, 3, 4, 5)
    weights, thresholds = torch.zeros(2, 5, 3), torch.zeros(2, 5, 3)
    predictions = torch.zeros(2, 5, 10, dtype=torch.long)
    counters = (torch.zeros(2, 5), torch.zeros(2, 5))
    with pytest.raises(ValueError, match="presented"):
        prank_cpu.stream(x, y, presented[:, :, :4], weights, thresholds, predictions, *counters)
    with pytest.raises(ValueError, match=r"x: expected torch\.float32"):
        prank_cpu.stream(x.double(), y, presented, weights, thresholds, predictions, *counters)


# -- on the GPU ---------------------------------------------------------------------------------


@cuda_only
def test_triton_on_cuda_matches_the_tensor_path_on_cuda(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    runs, steps, d, n, k = 4, 5000, 6, 100, 5  # several chunks, N not a multiple of the block
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(runs, steps, d, generator=g), torch.randint(0, k, (runs, steps), generator=g)
    presented = torch.rand(steps, runs, n, generator=g) < 0.6
    fused = PRankEnsemble(d, k, n_perceptrons=n, n_runs=runs, device="cuda")
    tensor = PRankEnsemble(d, k, n_perceptrons=n, n_runs=runs, device="cuda", fused=False)
    assert fused._kernel(None) is prank_triton.stream
    assert torch.equal(fused.partial_fit(x, y, presented=presented), tensor.partial_fit(x, y, presented=presented))
    assert torch.equal(fused.thresholds, tensor.thresholds)
    torch.testing.assert_close(fused.weights, tensor.weights, rtol=1e-5, atol=1e-4)
    for counter in ("correct", "presented", "mistakes"):
        assert torch.equal(getattr(fused, counter), getattr(tensor, counter)), counter


@cuda_only
def test_triton_on_cuda_is_algorithm_1(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    runs, steps, d, n, k = 2, 300, 3, 5, 5
    x, y, presented = exact_stream(2, runs, steps, d, k, n)
    model = PRankEnsemble(d, k, n_perceptrons=n, n_runs=runs, device="cuda")
    predictions = model.partial_fit(x, y, presented=presented).cpu()
    for run in range(runs):
        for p in range(n):
            reference = list(scalar_oap(x[run].tolist(), (y[run] + 1).tolist(), presented[:, run, p].tolist(), k))
            assert [v + 1 for v in predictions[run, p].tolist()] == [r[0] for r in reference]
            assert model.weights[run, p].tolist() == reference[-1][1]


def test_a_history_with_more_records_than_its_buffer_is_an_error_not_a_silent_cut():
    history = prank_cpu.History.empty(torch.zeros(1, 2), 3, 3, cap=4)
    history.count[:] = torch.tensor([2, 5])
    with pytest.raises(RuntimeError, match="overflowed its 4 records"):
        history.records()


def test_triton_asked_for_with_the_voted_history_is_refused():
    ensemble = PRankEnsemble(3, 3, keep_history=True, fused="triton")
    with pytest.raises(RuntimeError, match="does not record the voted history"):
        ensemble._kernel(None)


def test_each_entry_point_refuses_to_run_without_the_kernel(monkeypatch):
    monkeypatch.setattr(prank_cpu, "kernel", lambda: None)
    with pytest.raises(RuntimeError, match="PRank CPU kernel is not available"):
        prank_cpu.bernoulli(1, 0, torch.ones(1), torch.empty(2, 1, 1, dtype=torch.bool))
    with pytest.raises(RuntimeError, match="PRank CPU kernel is not available"):
        prank_cpu.widrow_hoff(torch.zeros(1, 2, 3), torch.zeros(1, 2), torch.ones(1), torch.zeros(1, 1, 3), 2)
