"""A plain MLP's training forward and backward on CPU through oneDNN, one matmul call per product.

Why it exists: on CPU, ``nn.Linear``'s float32 matmuls go to MKL, which on some x86 CPUs (AMD Zen
measured: the 2-core VM of docs/benchmarks.md) runs an AVX2 code path at under half of what
oneDNN's AVX-512 kernels reach on the same core (``bench/train_throughput.py`` prints both peaks).
Training an MLP scorer is mostly these matmuls, so ``RankerModule`` routes a plain
``Linear -> ReLU -> ... -> Linear`` network through ``MLPFunction`` when it trains on CPU in
float32: the forward fuses bias and ReLU into each matmul (oneDNN post-ops), the backward computes
each weight gradient, bias gradient and input gradient with one call each, and never the input
gradient of the first layer unless the input needs it. The module itself is unchanged (evaluation,
TorchScript and ONNX export run ``nn.Sequential`` as before); parity with autograd through the same
``nn.Sequential`` (values and gradients): ``tests/rankers/neural/test_cpu_mlp.py``.

``LTR_CPU_KERNELS=0`` turns it off (as the C++ kernels), as does a torch build without oneDNN's
``mkldnn::_linear_pointwise`` op, and so does ``kernels.mkl_vendor`` when active: MKL then runs its
AVX-512 kernels too, and reads the transposed operands of the weight gradients in place where
oneDNN's linear copies them first (``bench/train_throughput.py``'s two MLP rows).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch import Tensor, nn

from kernels import mkl_vendor


def _linear_op():
    ops = getattr(torch.ops, "mkldnn", None)
    try:
        return ops._linear_pointwise.default if ops is not None and torch.backends.mkldnn.is_available() else None
    except (AttributeError, RuntimeError):
        return None


_LINEAR = _linear_op()


def available() -> bool:
    """Whether this torch build has oneDNN's linear op."""
    return _LINEAR is not None


def enabled() -> bool:
    """Whether the oneDNN path runs: the op exists, ``LTR_CPU_KERNELS`` is not 0, and MKL is not
    running its AVX-512 kernels through ``kernels.mkl_vendor``."""
    return available() and os.environ.get("LTR_CPU_KERNELS", "1") != "0" and not mkl_vendor.active()


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, relu: bool = False) -> Tensor:
    """``x [N, i] @ weight [o, i]^T (+ bias [o])``, then ReLU if ``relu``: ``[N, o]``, one oneDNN call."""
    return _LINEAR(x, weight, bias, "relu" if relu else "none", [], "")


def plain_layers(scorer: nn.Module) -> list[nn.Linear] | None:
    """The Linear layers of a scorer that is exactly ``Linear -> ReLU -> ... -> Linear`` (an
    ``MLPScorer`` with one member, no norm, no dropout, ReLU), else None (the generic path runs)."""
    layers = getattr(scorer, "layers", None)
    if not isinstance(layers, nn.Sequential) or getattr(scorer, "members", 1) != 1:
        return None
    if getattr(scorer, "standardize_members", False):
        return None
    modules = list(layers)
    linears = modules[0::2]
    if not linears or len(modules) != 2 * len(linears) - 1:
        return None
    if not all(type(m) is nn.Linear for m in linears) or not all(type(m) is nn.ReLU for m in modules[1::2]):
        return None
    return linears


def applies(scorer: nn.Module, features: Tensor) -> list[nn.Linear] | None:
    """The layers to run through ``MLPFunction`` for ``features``, or None where another path runs:
    off, not a plain MLP, not float32 on CPU, autocast on, or inside ``torch.compile``."""
    return plain_mlp_on_cpu(scorer, features) if enabled() else None


def plain_mlp_on_cpu(scorer: nn.Module, features: Tensor) -> list[nn.Linear] | None:
    """The Linear layers of a plain MLP scorer (``plain_layers``) training in float32 on CPU on
    ``features``, without autocast or ``torch.compile``, else None: what a CPU MLP path may run."""
    if features.device.type != "cpu" or features.dtype != torch.float32:
        return None
    if torch.is_autocast_enabled("cpu") or torch.compiler.is_compiling():
        return None
    layers = plain_layers(scorer)
    if layers is None:
        return None
    parameters = [p for m in layers for p in m.parameters()]
    return layers if all(p.dtype == torch.float32 and p.device.type == "cpu" for p in parameters) else None


def mlp_scores(layers: list[nn.Linear], features: Tensor) -> Tensor:
    """``features [..., F]`` -> scores ``[...]`` through ``MLPFunction`` (differentiable)."""
    return apply_mlp(MLPFunction, layers, features)


def apply_mlp(function: type[torch.autograd.Function], layers: list[nn.Linear], features: Tensor, *leading) -> Tensor:
    """``features [..., F]`` -> scores ``[...]`` through ``function.apply(*leading, x, W_0 .. W_{n-1}, b_0 ..
    b_{n-1})`` on the flat ``x [N, F]`` (a layer without bias gets zeros): the CPU MLP paths' entry."""
    flat = features.reshape(-1, features.shape[-1]).contiguous()
    return function.apply(*leading, flat, *layer_parameters(layers)).reshape(features.shape[:-1])


def layer_parameters(layers: list[nn.Linear]) -> list[Tensor]:
    """``W_0 .. W_{n-1}, b_0 .. b_{n-1}`` of ``layers``, zeros for a layer without bias: what the CPU MLP
    functions take after their input."""
    weights = [m.weight for m in layers]
    return weights + [m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in layers]


Layer = Callable[[int, Tensor, Tensor, Tensor, bool], Tensor]
Product = Callable[[Tensor, Tensor], Tensor]


def mlp_forward(ctx, x: Tensor, parameters: tuple[Tensor, ...], layer: Layer) -> Tensor:
    """``x [N, F]`` through ``Linear_0 -> ReLU -> ... -> Linear_{n-1}`` (``parameters``: ``W_0 ..
    W_{n-1}, b_0 .. b_{n-1}``), each layer ``layer(j, input, W_j, b_j, relu) -> output``; saves each
    layer's input (the ReLU outputs) and the weights for ``mlp_backward``. ``[N, 1]``."""
    n = len(parameters) // 2
    weights, biases = parameters[:n], parameters[n:]
    inputs, hidden = [x], x
    for j in range(n):
        hidden = layer(j, hidden, weights[j], biases[j], j < n - 1)
        if j < n - 1:
            inputs.append(hidden)
    ctx.save_for_backward(*inputs, *weights)
    ctx.layers = n
    return hidden


def mlp_backward(
    ctx, grad: Tensor, wants_input: bool, weight_grad: Product, input_grad: Callable[[int, Tensor, Tensor], Tensor]
) -> tuple[Tensor | None, list[Tensor | None], list[Tensor | None]]:
    """The gradients of ``mlp_forward``'s inputs from its output's ``grad [N, 1]``: ``(input [N, F] or None
    unless ``wants_input``, weights, biases)``. ``weight_grad(g, h_j)`` is ``g^T h_j``; ``input_grad(j, g,
    W_j)`` is ``g W_j`` (layer 0's only when ``wants_input``), whose ReLU backward runs here in place."""
    n = ctx.layers
    saved = ctx.saved_tensors
    inputs, weights = saved[:n], saved[n:]
    grad = grad.contiguous()
    grad_weights: list[Tensor | None] = [None] * n
    grad_biases: list[Tensor | None] = [None] * n
    grad_x = None
    for j in reversed(range(n)):
        grad_weights[j] = weight_grad(grad, inputs[j])
        grad_biases[j] = grad.sum(0)
        if j > 0:
            grad = input_grad(j, grad, weights[j])  # [N, i]
            # ReLU's backward from its output (as autograd's ReLU does), in place: 0 where h_j <= 0
            torch.ops.aten.threshold_backward.grad_input(grad, inputs[j], 0, grad_input=grad)
        elif wants_input:
            grad_x = input_grad(0, grad, weights[0])
    return grad_x, grad_weights, grad_biases


class MLPFunction(torch.autograd.Function):
    """``x [N, F]`` through ``Linear_0 -> ReLU -> ... -> Linear_{n-1}`` -> ``[N, 1]``; arguments
    ``x, W_0 .. W_{n-1}, b_0 .. b_{n-1}``: each layer one oneDNN call, bias and ReLU fused."""

    @staticmethod
    def forward(ctx, x: Tensor, *parameters: Tensor) -> Tensor:
        return mlp_forward(ctx, x, parameters, lambda j, h, weight, bias, relu: linear(h, weight, bias, relu=relu))

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:
        grad_x, grad_weights, grad_biases = mlp_backward(
            ctx,
            grad,
            ctx.needs_input_grad[0],
            # dW_j = g^T [o, N] @ h_j [N, i]: oneDNN reads the transposed views without copies
            lambda g, h: linear(g.t(), h.t(), None),
            lambda j, g, weight: linear(g, weight.t(), None),
        )
        return (grad_x, *grad_weights, *grad_biases)
