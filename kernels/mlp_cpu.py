"""A plain MLP's training forward and backward on CPU, each one pass over row blocks (``mlp_cpu.cpp``).

Why it exists: with MKL at its AVX-512 rate and the activations in reused buffers
(``rankers.neural.mkl_mlp``), the MLP of a 256-query batch still took 1.5x its FLOPs at the peak of a
large matmul (``bench/train_throughput.py --profile``): each product ran on all the batch's rows with
both cores (a fork and join per product), and bias, ReLU, ReLU's backward, the bias sums and the
z-score were passes of their own over ``[N, 256]`` tensors that no longer fit in cache. Here each
thread takes its share of the rows and walks it in blocks of ``BLOCK_ROWS``: per block, the features
are gathered from the batch's real rows (padding is never read or computed) and z-scored, every
product is a single-threaded sgemm, and the elementwise work runs on the block while it is in cache.
The weight gradients accumulate per thread and are summed in thread order (deterministic for a thread
count). ``python -m bench.mlp_cpu`` times it against the per-product path on the same rows.

BLAS: the ``sgemm_`` that libtorch exports, MKL's, made single-threaded in the region with
``MKL_Set_Num_Threads_Local`` (both passed to the kernel as addresses; no torch headers, so a build
takes a second). Every buffer the kernel reads or writes is checked here first (shape, dtype,
contiguity). Where libtorch has no MKL (``blas()`` is None) or the library cannot be built, callers
keep their tensor path. Parity with autograd through ``nn.Sequential``:
``tests/kernels/test_mlp_cpu.py``.
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

import torch
from torch import Tensor

from kernels._native import KERNELS, NativeKernel

KERNEL = NativeKernel(KERNELS["mlp_cpu"])
_I64, _PTR, _INT = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
FORWARD_SIGNATURE = [_I64] + [_PTR] * 4 + [_INT] + [_PTR] * 6 + [_INT, _INT]
BACKWARD_SIGNATURE = [_I64] + [_PTR] * 4 + [_INT] + [_PTR] * 7 + [_INT, _INT]
# what the kernel calls, from libtorch (MKL): sgemm, and the calling thread's MKL thread count (set to 1)
BLAS = ("sgemm_", "MKL_Set_Num_Threads_Local")
# rows a thread's block holds: 128-1024 were within 5% of each other at 7k and 28k rows on the 2-core
# EPYC (python -m bench.mlp_cpu --blocks ...); 256 keeps a 136-256 block's input and output in L2
BLOCK_ROWS = 256


@functools.cache
def blas() -> ctypes.Array | None:
    """The addresses of libtorch's ``BLAS`` functions (an array the kernel reads), or None without MKL."""
    try:
        library = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        functions = [getattr(library, name) for name in BLAS]
    except (OSError, AttributeError):
        return None
    return (ctypes.c_void_p * len(BLAS))(*(ctypes.cast(f, ctypes.c_void_p).value for f in functions))


def kernel() -> ctypes.CDLL | None:
    """The loaded library (``ltr_mlp_forward``, ``ltr_mlp_backward``), or None where it cannot be built."""
    library = KERNEL.kernel()
    if library is not None and library.ltr_mlp_forward.argtypes is None:
        library.ltr_mlp_forward.argtypes, library.ltr_mlp_forward.restype = FORWARD_SIGNATURE, _INT
        library.ltr_mlp_backward.argtypes, library.ltr_mlp_backward.restype = BACKWARD_SIGNATURE, _INT
    return library


def available() -> bool:
    """Whether the kernel can run here: ``LTR_CPU_KERNELS`` is not 0, libtorch has MKL, the library builds."""
    return os.environ.get("LTR_CPU_KERNELS", "1") != "0" and blas() is not None and kernel() is not None


def _addresses(tensors: list[Tensor]) -> ctypes.Array:
    return (ctypes.c_void_p * len(tensors))(*(t.data_ptr() for t in tensors))


class Rows:
    """The rows an MLP call reads: ``x [T, F]`` float32, contiguous; ``index [n]`` int64 (None: all T
    rows); ``mean`` / ``std [F]`` (None: the rows as they are, else ``(x - mean) / std``)."""

    def __init__(self, x: Tensor, index: Tensor | None = None, mean: Tensor | None = None, std: Tensor | None = None):
        if x.dtype != torch.float32 or x.dim() != 2 or not x.is_contiguous() or x.device.type != "cpu":
            raise ValueError(f"x must be a contiguous [T, F] float32 CPU tensor, got {x.dtype} {tuple(x.shape)}")
        if index is not None and (index.dtype != torch.int64 or index.dim() != 1 or not index.is_contiguous()):
            raise ValueError(f"index must be a contiguous [n] int64 tensor, got {index.dtype} {tuple(index.shape)}")
        if index is not None and len(index) and not (int(index.min()) >= 0 and int(index.max()) < len(x)):
            raise ValueError(f"index must lie in [0, {len(x)}), got [{int(index.min())}, {int(index.max())}]")
        if (mean is None) != (std is None):
            raise ValueError("mean and std go together")
        self.x, self.index = x, index
        self.mean = None if mean is None else mean.to(torch.float32).contiguous()
        self.std = None if std is None else std.to(torch.float32).contiguous()
        if mean is not None and not (self.mean.shape == self.std.shape == (x.shape[1],)):
            raise ValueError(f"mean and std must be [{x.shape[1]}], got {tuple(mean.shape)} and {tuple(std.shape)}")
        self.count = len(x) if index is None else len(index)

    def arguments(self) -> tuple:
        pointer = lambda t: None if t is None else t.data_ptr()  # noqa: E731
        return (self.count, pointer(self.index), self.x.data_ptr(), pointer(self.mean), pointer(self.std))


def _float32_cpu(tensor: Tensor, name: str, shape: tuple[int, ...]) -> None:
    if tensor.dtype != torch.float32 or tensor.device.type != "cpu" or not tensor.is_contiguous():
        raise ValueError(f"{name} must be a contiguous float32 CPU tensor, got {tensor.dtype} on {tensor.device}")
    if tuple(tensor.shape) != shape:
        raise ValueError(f"{name} is {tuple(tensor.shape)}, expected {shape}")


def _widths(weights: list[Tensor], features: int, biases: list[Tensor] | None = None) -> Tensor:
    """``[F, o_0, .., o_{n-1}]`` after checking each ``weights[j] [o_j, i_j]`` (and ``biases[j] [o_j]``)."""
    if not weights or (biases is not None and len(biases) != len(weights)):
        raise ValueError(f"one weight and one bias a layer, at least one layer; got {len(weights)} weights")
    if BLOCK_ROWS < 1:
        raise ValueError(f"BLOCK_ROWS must be positive, got {BLOCK_ROWS}")
    widths = [features]
    for j, w in enumerate(weights):
        if w.dim() != 2 or w.shape[1] != widths[j]:
            raise ValueError(f"layer {j}'s weight is {tuple(w.shape)}, its input has {widths[j]} features")
        _float32_cpu(w, f"layer {j}'s weight", tuple(w.shape))
        if biases is not None:
            _float32_cpu(biases[j], f"layer {j}'s bias", (w.shape[0],))
        widths.append(w.shape[0])
    return torch.tensor(widths, dtype=torch.int64)


def _library() -> ctypes.CDLL:
    library = kernel()
    if library is None or blas() is None:
        raise RuntimeError("the MLP CPU kernel is not available here (kernels.mlp_cpu.available())")
    return library


def forward(rows: Rows, weights: list[Tensor], biases: list[Tensor], hidden: list[Tensor], scores: Tensor) -> None:
    """``scores [T, O]`` of ``rows`` through ``Linear_0 -> ReLU -> ... -> Linear_{n-1}`` (``weights[j]
    [o, i]``, ``biases[j] [o]``); rows not in the index keep their value. ``hidden[j] [n, o_j]`` receive
    the hidden layers' ReLU outputs (what ``backward`` reads). Parameters contiguous float32."""
    library = _library()
    widths = _widths(weights, rows.x.shape[1], biases)
    _check_outputs(rows, widths, hidden, scores)
    failed = library.ltr_mlp_forward(
        *rows.arguments(),
        len(weights),
        widths.data_ptr(),
        _addresses(weights),
        _addresses(biases),
        _addresses(hidden),
        scores.data_ptr(),
        blas(),
        torch.get_num_threads(),
        BLOCK_ROWS,
    )
    if failed:
        raise MemoryError("the MLP CPU kernel could not allocate a thread's block buffers")


def backward(
    rows: Rows, weights: list[Tensor], hidden: list[Tensor], grad_scores: Tensor
) -> tuple[list[Tensor], list[Tensor]]:
    """The weight and bias gradients of ``forward``'s loss from ``grad_scores [T, O]`` (rows not in the
    index are not read), given the ``hidden`` outputs that ``forward`` wrote for the same rows."""
    library = _library()
    widths = _widths(weights, rows.x.shape[1])
    grad_scores = grad_scores.contiguous()
    _check_outputs(rows, widths, hidden, grad_scores)
    weight_grads = [torch.empty_like(w) for w in weights]
    bias_grads = [w.new_empty(w.shape[0]) for w in weights]
    failed = library.ltr_mlp_backward(
        *rows.arguments(),
        len(weights),
        widths.data_ptr(),
        _addresses(weights),
        _addresses(hidden),
        grad_scores.data_ptr(),
        _addresses(weight_grads),
        _addresses(bias_grads),
        blas(),
        torch.get_num_threads(),
        BLOCK_ROWS,
    )
    if failed:
        raise MemoryError("the MLP CPU kernel could not allocate a thread's block buffers")
    return weight_grads, bias_grads


def _check_outputs(rows: Rows, widths: Tensor, hidden: list[Tensor], scores: Tensor) -> None:
    """Every buffer the kernel writes or reads through a raw pointer has the shape it assumes."""
    sizes = widths.tolist()
    expected = [(rows.count, o) for o in sizes[1:-1]]
    if [tuple(h.shape) for h in hidden] != expected:
        raise ValueError(f"hidden buffers must be {expected}, got {[tuple(h.shape) for h in hidden]}")
    for j, h in enumerate(hidden):
        _float32_cpu(h, f"hidden buffer {j}", expected[j])
    if tuple(scores.shape) != (len(rows.x), sizes[-1]):
        raise ValueError(f"scores must be [{len(rows.x)}, {sizes[-1]}], got {tuple(scores.shape)}")
    _float32_cpu(scores, "scores", (len(rows.x), sizes[-1]))
