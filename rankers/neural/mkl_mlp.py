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
``tests/rankers/neural/test_mkl_mlp.py``).

A buffer is reused only after the step that wrote it has run its backward: a second forward before
that overwrites activations the first one saved, and autograd's version check refuses the first
backward (an error, never a wrong gradient). ``LTR_CPU_KERNELS=0`` turns the path off, as it does the
other CPU kernels; where oneDNN's MLP runs (``rankers.neural.onednn_mlp``) this path does not.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor, nn

from rankers.neural import onednn_mlp

GROWTH = 1.25  # a buffer that must grow takes a quarter more rows, so a slowly growing batch does not re-allocate


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


def mlp_scores(layers: list[nn.Linear], features: Tensor, workspace: Workspace) -> Tensor:
    """``features [..., F]`` -> scores ``[...]`` through ``MLPFunction`` (differentiable)."""
    flat = features.reshape(-1, features.shape[-1]).contiguous()
    weights = [m.weight for m in layers]
    biases = [m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in layers]
    out = MLPFunction.apply(workspace, flat, *weights, *biases)
    return out.reshape(features.shape[:-1])


class MLPFunction(torch.autograd.Function):
    """``x [N, F]`` through ``Linear_0 -> ReLU -> ... -> Linear_{n-1}`` -> ``[N, 1]``; arguments
    ``workspace, x, W_0 .. W_{n-1}, b_0 .. b_{n-1}``. The hidden layers' outputs (each the next
    layer's input, saved for backward) and the backward's ``[N, width]`` gradients are workspace buffers."""

    @staticmethod
    def forward(ctx, workspace: Workspace, x: Tensor, *parameters: Tensor) -> Tensor:
        n = len(parameters) // 2
        weights, biases = parameters[:n], parameters[n:]
        inputs, hidden = [x], x
        for j in range(n):
            width = weights[j].shape[0]
            last = j == n - 1
            out = x.new_empty(len(x), width) if last else workspace.rows(f"hidden{j}", len(x), width)
            torch.addmm(biases[j], hidden, weights[j].t(), out=out)
            if not last:
                out.clamp_min_(0)  # ReLU in place: the buffer holds the layer's output, as nn.ReLU's would
                inputs.append(out)
            hidden = out
        ctx.save_for_backward(*inputs, *weights)
        ctx.workspace, ctx.layers = workspace, n
        return hidden

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:
        n = ctx.layers
        saved = ctx.saved_tensors
        inputs, weights = saved[:n], saved[n:]
        grad = grad.contiguous()
        grad_weights: list[Tensor | None] = [None] * n
        grad_biases: list[Tensor | None] = [None] * n
        grad_x = None
        for j in reversed(range(n)):
            grad_weights[j] = torch.mm(grad.t(), inputs[j])  # MKL reads the transposed view in place
            grad_biases[j] = grad.sum(0)
            if j > 0:
                below = ctx.workspace.rows(f"grad{j}", len(grad), weights[j].shape[1])
                torch.mm(grad, weights[j], out=below)
                # ReLU's backward from its output (as autograd's ReLU does), in place: 0 where h_j <= 0
                torch.ops.aten.threshold_backward.grad_input(below, inputs[j], 0, grad_input=below)
                grad = below
            elif ctx.needs_input_grad[1]:
                grad_x = torch.mm(grad, weights[0])
        return (None, grad_x, *grad_weights, *grad_biases)
