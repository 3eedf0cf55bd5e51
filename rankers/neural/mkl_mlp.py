"""A plain MLP's training forward and backward on CPU through MKL, in buffers kept from step to step.

Why it exists: where MKL runs its AVX-512 kernels (``kernels.mkl_vendor`` active on AMD, or a torch
build without oneDNN's linear op), the MLP's products through ``nn.Linear`` and autograd run near
MKL's peak, yet a training step took about twice its matmuls (``bench/train_throughput.py --profile``):
every step allocated its activations, their ReLU copies and the backward's temporaries afresh. Each
``[N, 256]`` float32 tensor of a 64-query batch is megabytes, above glibc's mmap threshold, so each
step mapped, zeroed and unmapped those pages again (a third of the process's time was the kernel's).
Here the ``N x hidden`` tensors live in a ``Workspace`` that the module keeps: each product is one
``addmm`` / ``mm`` written into its buffer, ReLU and its backward run in place, the input gradient of
the first layer is never computed, and (``FeatureNormalizer.normalize_into``) the z-scored features
are written into a buffer too. The values are the same products in the same order as the generic
path's (tested against autograd through the same ``nn.Sequential``:
``tests/rankers/neural/test_cpu_mlp.py``).

Where ``kernels.mlp_cpu`` builds, ``training_scores`` runs the whole forward and the whole backward as
one kernel call each (``KernelMLPFunction``): row blocks per core, every product on a block in cache,
padding never computed; its hidden outputs are workspace buffers too. The product-at-a-time path below
stays for features that need a gradient and where the kernel cannot be built.

A buffer is reused only after the step that wrote it has run its backward: a second forward before
that overwrites activations the first one saved, and autograd's version check refuses the first
backward (an error, never a wrong gradient). ``LTR_CPU_KERNELS=0`` turns the path off, as it does the
other CPU kernels; where oneDNN's MLP runs (``rankers.neural.onednn_mlp``) this path does not.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from datamodules.normalization import FeatureNormalizer
from kernels import mlp_cpu
from rankers.neural import onednn_mlp

# a buffer that must grow doubles: a few growths in a run, not one every few batches (each growth is fresh
# pages to fault in), at the cost of up to twice the largest batch's activations held
GROWTH = 2.0


class Workspace:
    """Named ``[rows, width]`` float32 buffers on the CPU, reused from step to step; ``rows`` hands out
    the first ``n`` rows of one (grown when a batch needs more). Not part of any state: copying or
    pickling a module starts the copy with an empty workspace."""

    def __init__(self) -> None:
        self._buffers: dict[str, Tensor] = {}

    def rows(self, name: str, n: int, width: int) -> Tensor:
        """``[n, width]``: the first rows of buffer ``name`` (its content is whatever was last written)."""
        buffer = self._buffers.get(name)
        if buffer is None or buffer.shape[0] < n or buffer.shape[1] != width:
            buffer = torch.empty(max(n, int(n * GROWTH)), width)
            self._buffers[name] = buffer
        return buffer[:n]

    def __len__(self) -> int:
        return len(self._buffers)

    def __deepcopy__(self, memo: dict) -> Workspace:
        return Workspace()

    def __getstate__(self) -> dict:
        return {"_buffers": {}}


def enabled() -> bool:
    """Whether this path may run: ``LTR_CPU_KERNELS`` is not 0 and oneDNN's MLP is not the one that runs."""
    return os.environ.get("LTR_CPU_KERNELS", "1") != "0" and not onednn_mlp.enabled()


def applies(scorer: nn.Module, features: Tensor) -> list[nn.Linear] | None:
    """The layers to run through ``MLPFunction`` for ``features``, or None where another path runs:
    off, not a plain MLP, not float32 on CPU, autocast on, or inside ``torch.compile``."""
    return onednn_mlp.plain_mlp_on_cpu(scorer, features) if enabled() else None


def training_scores(
    layers: list[nn.Linear], features: Tensor, mask: Tensor | None, normalizer: nn.Module, workspace: Workspace
) -> Tensor:
    """Scores ``[...]`` of raw ``features [..., F]`` (``mask [...]``: the real rows) normalized by
    ``normalizer``, differentiable in the layers' parameters: through the one-pass kernel
    (``kernels.mlp_cpu``) where it runs and the features need no gradient, which scores only the real
    rows (padding scores 0) and z-scores inside the kernel; else each product into a workspace buffer."""
    if not mlp_cpu.available() or (features.requires_grad and torch.is_grad_enabled()):
        return mlp_scores(layers, normalized_into(normalizer, features, mask, workspace), workspace)
    flat = features.reshape(-1, features.shape[-1])
    index = None if mask is None else mask.reshape(-1).nonzero().squeeze(1)
    mean = std = None
    if type(normalizer) is FeatureNormalizer and normalizer.kind in ("none", "zscore"):
        if normalizer.kind == "zscore":
            mean, std = normalizer.mean, normalizer.std
    else:
        normalized = normalizer(features, mask)
        if normalized.requires_grad:  # a normalizer that learns: the kernel computes no input gradient
            return mlp_scores(layers, normalized, workspace)
        flat = normalized.reshape(flat.shape)
    parameters = onednn_mlp.layer_parameters(layers)
    scores = KernelMLPFunction.apply(workspace, flat.contiguous(), index, mean, std, *parameters)
    return scores.reshape(features.shape[:-1])


def normalized_into(normalizer: nn.Module, features: Tensor, mask: Tensor | None, workspace: Workspace) -> Tensor:
    """``normalizer(features, mask)``, written into a workspace buffer where the normalizer can."""
    if type(normalizer) is not FeatureNormalizer or not normalizer.writes_into(features):
        return normalizer(features, mask)
    out = workspace.rows("input", features.shape[:-1].numel(), features.shape[-1])
    return normalizer.normalize_into(features, mask, out.view(features.shape))


def mlp_scores(layers: list[nn.Linear], features: Tensor, workspace: Workspace) -> Tensor:
    """``features [..., F]`` -> scores ``[...]`` through ``MLPFunction`` (differentiable)."""
    return onednn_mlp.apply_mlp(MLPFunction, layers, features, workspace)


class MLPFunction(torch.autograd.Function):
    """``x [N, F]`` through ``Linear_0 -> ReLU -> ... -> Linear_{n-1}`` -> ``[N, 1]``; arguments
    ``workspace, x, W_0 .. W_{n-1}, b_0 .. b_{n-1}``. The hidden layers' outputs (each the next
    layer's input, saved for backward) and the backward's ``[N, width]`` gradients are workspace buffers;
    the skeleton is ``onednn_mlp``'s (``mlp_forward``, ``mlp_backward``), the products MKL's."""

    @staticmethod
    def forward(ctx, workspace: Workspace, x: Tensor, *parameters: Tensor) -> Tensor:
        def layer(j: int, hidden: Tensor, weight: Tensor, bias: Tensor, relu: bool) -> Tensor:
            shape = (len(hidden), weight.shape[0])
            out = workspace.rows(f"hidden{j}", *shape) if relu else hidden.new_empty(shape)
            torch.addmm(bias, hidden, weight.t(), out=out)
            return out.clamp_min_(0) if relu else out  # ReLU in place: the buffer holds the layer's output

        ctx.workspace = workspace
        return onednn_mlp.mlp_forward(ctx, x, parameters, layer)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:
        def input_grad(j: int, g: Tensor, weight: Tensor) -> Tensor:
            if j == 0:  # the caller's input gradient: its own tensor
                return torch.mm(g, weight)
            return torch.mm(g, weight, out=ctx.workspace.rows(f"grad{j}", len(g), weight.shape[1]))

        grad_x, grad_weights, grad_biases = onednn_mlp.mlp_backward(
            ctx,
            grad,
            ctx.needs_input_grad[1],
            lambda g, h: torch.mm(g.t(), h),  # MKL reads the transposed view in place
            input_grad,
        )
        return (None, grad_x, *grad_weights, *grad_biases)


class KernelMLPFunction(torch.autograd.Function):
    """``Linear_0 -> ReLU -> ... -> Linear_{n-1}`` on the rows of ``x [T, F]`` in ``index`` (None: all),
    z-scored by ``mean`` / ``std`` (None: as they are) -> scores ``[T, O]``, 0 on rows outside the index;
    arguments ``workspace, x, index, mean, std, W_0 .. W_{n-1}, b_0 .. b_{n-1}``. Forward and backward
    are one ``kernels.mlp_cpu`` call each. The hidden outputs live in workspace buffers, marked written
    (``increment_version``), and every input is saved for backward, so that a backward after another
    forward overwrote the buffers, or after the features were changed in place, is refused (as the
    per-product path's); the backward is not itself differentiable (``once_differentiable``)."""

    @staticmethod
    def forward(ctx, workspace: Workspace, x: Tensor, index, mean, std, *parameters: Tensor) -> Tensor:
        rows = mlp_cpu.Rows(x, index, mean, std)
        n = len(parameters) // 2
        weights = [w.contiguous() for w in parameters[:n]]
        biases = [b.contiguous() for b in parameters[n:]]
        hidden = [workspace.rows(f"hidden{j}", rows.count, w.shape[0]) for j, w in enumerate(weights[:-1])]
        scores = x.new_zeros(len(x), weights[-1].shape[0])
        mlp_cpu.forward(rows, weights, biases, hidden, scores)
        for buffer in hidden:
            torch.autograd.graph.increment_version(buffer)
        ctx.rows, ctx.layers = rows, n  # the checked rows; saved below too, for autograd's version check
        ctx.save_for_backward(x, index, rows.mean, rows.std, *hidden, *weights)
        return scores

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:
        saved = ctx.saved_tensors[4:]  # raises if any was changed since the forward
        hidden, weights = saved[: ctx.layers - 1], saved[ctx.layers - 1 :]
        weight_grads, bias_grads = mlp_cpu.backward(ctx.rows, weights, hidden, grad)
        return (None, None, None, None, None, *weight_grads, *bias_grads)
