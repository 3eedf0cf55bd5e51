"""The one-pass CPU MLP kernel (``kernels.mlp_cpu``) against autograd through the same ``nn.Sequential``
on the gathered, z-scored rows: values and every gradient, over depths, widths, output widths, thread
counts, row blocks, indexes with padding that holds NaN; the z-score bit for bit; the refusals."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from datamodules.normalization import FeatureNormalizer
from kernels import mlp_cpu

pytestmark = pytest.mark.skipif(not mlp_cpu.available(), reason="no MKL in this torch, or the kernel cannot be built")


def _network(features: int, hidden: tuple[int, ...], outputs: int, seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    sizes = [features, *hidden, outputs]
    modules: list[nn.Module] = []
    for i, o in itertools.pairwise(sizes):
        modules += [nn.Linear(i, o), nn.ReLU()]
    return nn.Sequential(*modules[:-1])


def _run(network: nn.Sequential, rows: mlp_cpu.Rows, grad: torch.Tensor):
    """The kernel's scores [T, O] (rows outside the index: -7, as filled) and weight / bias gradients."""
    linears = [m for m in network if isinstance(m, nn.Linear)]
    weights = [m.weight.detach() for m in linears]
    biases = [m.bias.detach() for m in linears]
    hidden = [torch.full((rows.count, w.shape[0]), float("nan")) for w in weights[:-1]]
    scores = torch.full((len(rows.x), weights[-1].shape[0]), -7.0)
    mlp_cpu.forward(rows, weights, biases, hidden, scores)
    weight_grads, bias_grads = mlp_cpu.backward(rows, weights, hidden, grad)
    return scores, weight_grads, bias_grads


def _reference(network: nn.Sequential, inputs: torch.Tensor, grad: torch.Tensor):
    network.zero_grad(set_to_none=True)
    out = network(inputs)
    out.backward(grad)
    linears = [m for m in network if isinstance(m, nn.Linear)]
    return out.detach(), [m.weight.grad for m in linears], [m.bias.grad for m in linears]


def _inputs(total: int, features: int, seed: int, *, padded: bool):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(total, features, generator=generator) * 3 + 2
    index = None
    if padded:  # real rows anywhere, the others NaN / inf: the kernel must never read them
        real = torch.rand(total, generator=generator) < 0.7
        index = real.nonzero().squeeze(1)
        x[~real] = float("nan")
        x[~real & (torch.arange(total) % 2 == 0)] = float("inf")
    return x, index


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("zscore", [False, True])
@pytest.mark.parametrize(
    ("hidden", "outputs", "total"),
    [((), 1, 40), ((7,), 1, 33), ((256, 128, 64), 1, 2 * mlp_cpu.BLOCK_ROWS + 37), ((8, 8), 3, 300)],
)
def test_values_and_gradients_equal_autograd(hidden, outputs, total, zscore, padded, threads):
    features = 13
    network = _network(features, hidden, outputs, seed=len(hidden) + outputs)
    x, index = _inputs(total, features, seed=total, padded=padded)
    mean, std = (x.nan_to_num(0, 0, 0).mean(0), torch.rand(features) + 0.5) if zscore else (None, None)
    grad = torch.randn(total, outputs)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        scores, weight_grads, bias_grads = _run(network, mlp_cpu.Rows(x, index, mean, std), grad)
    finally:
        torch.set_num_threads(previous)
    real = torch.arange(total) if index is None else index
    inputs = x[real] if mean is None else (x[real] - mean) / std
    ref_scores, ref_weights, ref_biases = _reference(network, inputs, grad[real])
    torch.testing.assert_close(scores[real], ref_scores, rtol=1e-5, atol=1e-5)
    outside = torch.ones(total, dtype=torch.bool).index_fill_(0, real, False)
    assert (scores[outside] == -7.0).all()  # rows outside the index are not written
    for mine, theirs in zip([*weight_grads, *bias_grads], [*ref_weights, *ref_biases], strict=True):
        assert torch.isfinite(mine).all()
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)


def test_the_zscore_is_feature_normalizers_bit_for_bit():
    """One identity layer with zero bias passes the normalized features through exactly."""
    features = 9
    normalizer = FeatureNormalizer("zscore", torch.randn(features) * 100, torch.rand(features) + 0.3)
    x, index = _inputs(50, features, seed=3, padded=True)
    x = x * 1000 + 5000
    identity, zero = torch.eye(features), torch.zeros(features)
    scores = torch.zeros(50, features)
    mlp_cpu.forward(mlp_cpu.Rows(x, index, normalizer.mean, normalizer.std), [identity], [zero], [], scores)
    assert torch.equal(scores[index], normalizer(x[index]))


def test_no_rows_writes_nothing_and_zero_gradients():
    network = _network(4, (5,), 1, seed=0)
    x = torch.randn(6, 4)
    scores, weight_grads, bias_grads = _run(
        network, mlp_cpu.Rows(x, torch.zeros(0, dtype=torch.int64)), torch.ones(6, 1)
    )
    assert (scores == -7.0).all()
    assert all((g == 0).all() for g in [*weight_grads, *bias_grads])


def test_gradients_are_the_same_from_run_to_run():
    """The threads' partial gradients are summed in thread order: bit for bit the same sums."""
    network = _network(20, (64, 32), 1, seed=5)
    x, index = _inputs(3 * mlp_cpu.BLOCK_ROWS, 20, seed=9, padded=True)
    grad = torch.randn(len(x), 1)
    previous = torch.get_num_threads()
    torch.set_num_threads(3)  # a partial gradient from each of three threads
    try:
        first, second = (_run(network, mlp_cpu.Rows(x, index), grad) for _ in range(2))
    finally:
        torch.set_num_threads(previous)
    for a, b in zip([*first[1], *first[2]], [*second[1], *second[2]], strict=True):
        assert torch.equal(a, b)


def test_refusals():
    weights, biases = [torch.randn(3, 4)], [torch.zeros(3)]
    with pytest.raises(ValueError, match="contiguous"):
        mlp_cpu.Rows(torch.randn(4, 6).t())
    with pytest.raises(ValueError, match="int64"):
        mlp_cpu.Rows(torch.randn(6, 4), torch.tensor([0, 1], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"index must lie in \[0, 6\)"):
        mlp_cpu.Rows(torch.randn(6, 4), torch.tensor([0, 6]))
    with pytest.raises(ValueError, match="mean and std"):
        mlp_cpu.Rows(torch.randn(6, 4), None, torch.zeros(4))
    rows = mlp_cpu.Rows(torch.randn(6, 4))
    with pytest.raises(ValueError, match="its input has 4 features"):
        mlp_cpu.forward(rows, [torch.randn(3, 5)], biases, [], torch.zeros(6, 3))
    with pytest.raises(ValueError, match="scores must be"):
        mlp_cpu.forward(rows, weights, biases, [], torch.zeros(5, 3))
    with pytest.raises(ValueError, match=r"mean and std must be \[4\]"):
        mlp_cpu.Rows(torch.randn(6, 4), None, torch.zeros(3), torch.ones(3))
    with pytest.raises(ValueError, match="layer 0's bias is"):
        mlp_cpu.forward(rows, weights, [torch.zeros(4)], [], torch.zeros(6, 3))
    with pytest.raises(ValueError, match="layer 0's weight must be a contiguous float32"):
        mlp_cpu.forward(rows, [torch.randn(3, 4, dtype=torch.float64)], biases, [], torch.zeros(6, 3))
    with pytest.raises(ValueError, match="at least one layer"):
        mlp_cpu.forward(rows, [], [], [], torch.zeros(6, 3))
    with pytest.raises(ValueError, match="hidden buffers"):
        mlp_cpu.forward(
            rows, [torch.randn(5, 4), torch.randn(1, 5)], [torch.zeros(5), torch.zeros(1)], [], torch.zeros(6, 1)
        )


def test_turned_off_by_ltr_cpu_kernels(monkeypatch):
    monkeypatch.setenv("LTR_CPU_KERNELS", "0")
    assert not mlp_cpu.available()


def test_a_non_positive_block_is_refused(monkeypatch):
    monkeypatch.setattr(mlp_cpu, "BLOCK_ROWS", 0)  # the kernel's loop would never advance
    with pytest.raises(ValueError, match="BLOCK_ROWS must be positive"):
        mlp_cpu.forward(mlp_cpu.Rows(torch.randn(6, 4)), [torch.randn(1, 4)], [torch.zeros(1)], [], torch.zeros(6, 1))


class _Failing:
    """A library whose entry points report that a thread's block buffers could not be allocated."""

    @staticmethod
    def ltr_mlp_forward(*args):
        return 1

    @staticmethod
    def ltr_mlp_backward(*args):
        return 1


def test_a_kernel_that_cannot_allocate_raises_memory_error(monkeypatch):
    monkeypatch.setattr(mlp_cpu, "kernel", lambda: _Failing())
    rows, weights = mlp_cpu.Rows(torch.randn(6, 4)), [torch.randn(1, 4)]
    with pytest.raises(MemoryError, match="could not allocate"):
        mlp_cpu.forward(rows, weights, [torch.zeros(1)], [], torch.zeros(6, 1))
    with pytest.raises(MemoryError, match="could not allocate"):
        mlp_cpu.backward(rows, weights, [], torch.zeros(6, 1))


def test_calling_it_where_it_is_not_available_is_an_error(monkeypatch):
    monkeypatch.setattr(mlp_cpu, "kernel", lambda: None)
    with pytest.raises(RuntimeError, match="not available"):
        mlp_cpu.forward(mlp_cpu.Rows(torch.randn(6, 4)), [torch.randn(1, 4)], [torch.zeros(1)], [], torch.zeros(6, 1))
