"""PRank / OAP stream on CPU as one C++ loop (``prank_cpu.cpp``), built once and cached; beside it
the voted perceptron's history (PRank-VP) recorded in the stream, its evaluation (``voted``),
Widrow-Hoff's stream (``widrow_hoff``) and Algorithm 2's counter-based draws (``bernoulli``).

Why it exists: on CPU the tensor path pays a dozen op dispatches per example whatever the
arithmetic; this loop keeps up to 64 perceptrons of one run side by side in SIMD lanes, in cache
for the whole stream, and spreads the (run, block) items over the cores. Reference: the tensor
paths of ``rankers.perceptron.PRankEnsemble(fused=False)``, ``WidrowHoff(fused=False)`` and
``rankers.perceptron.ensemble.counter_draws``; parity tests in ``tests/kernels/``.

Build: ``pip install -e .`` compiles it (``setup.py``); a checkout used without installing compiles
it once on first use (a second, announced on stderr). Where it comes from, the source-hash check and
the fallback without a compiler: ``kernels._native``.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from kernels._native import KERNELS, NativeKernel, pointer

KERNEL = NativeKernel(KERNELS["prank_cpu"])
_I64, _PTR = ctypes.c_int64, ctypes.c_void_p
SIGNATURE = [_I64] * 5 + [_PTR] * 6 + [_I64] * 3 + [_PTR] * 7 + [_I64, ctypes.c_int]
VOTED_SIGNATURE = [_I64] * 4 + [_PTR] * 7 + [ctypes.c_int]
WIDROW_HOFF_SIGNATURE = [_I64] * 5 + [_PTR] * 5 + [ctypes.c_int]
BERNOULLI_SIGNATURE = [_I64] * 3 + [ctypes.c_uint64, _I64] + [_PTR] * 2 + [ctypes.c_int]
# a call parallelizes from this many (perceptron, example) steps (about a millisecond of work)
PARALLEL_STEPS = 1 << 20


def kernel() -> ctypes.CDLL | None:
    """The loaded library (``ltr_prank_stream``, ``ltr_prank_voted``, ``ltr_widrow_hoff_stream``,
    ``ltr_bernoulli``), or None (with one warning) where it cannot be built."""
    library = KERNEL.kernel()
    if library is not None and library.ltr_prank_stream.argtypes is None:
        for function, signature in (
            (library.ltr_prank_stream, SIGNATURE),
            (library.ltr_prank_voted, VOTED_SIGNATURE),
            (library.ltr_widrow_hoff_stream, WIDROW_HOFF_SIGNATURE),
            (library.ltr_bernoulli, BERNOULLI_SIGNATURE),
        ):
            function.argtypes, function.restype = signature, None
    return library


def _library() -> ctypes.CDLL:
    """``kernel()`` for the entry points, which callers reach only after checking it: an error if not."""
    library = kernel()
    if library is None:
        raise RuntimeError("the PRank CPU kernel is not available (see the warning above)")
    return library


@dataclass
class History:
    """Buffers the stream fills with the voted perceptron's closed hypotheses, ``cap`` per perceptron.

    ``open_survival [R, N]`` float32 (the correct rounds survived by each current hypothesis, updated in
    place); ``weights [R*N, cap, d]``, ``thresholds [R*N, cap, k-1]``, ``survival [R*N, cap]``
    float32 and ``count [R*N]`` long are written: perceptron ``p``'s first ``count[p]`` records.
    A stream of T examples closes at most ``(T + 1) // 2`` hypotheses with a vote per perceptron
    (each after a correct round and a mistake, the first possibly after rounds of an earlier
    chunk), so ``cap`` must be at least that.
    """

    open_survival: torch.Tensor
    weights: torch.Tensor
    thresholds: torch.Tensor
    survival: torch.Tensor
    count: torch.Tensor

    @classmethod
    def empty(cls, open_survival: torch.Tensor, d: int, k: int, cap: int) -> History:
        rows = open_survival.numel()
        return cls(
            open_survival,
            torch.empty(rows, cap, d),
            torch.empty(rows, cap, k),
            torch.empty(rows, cap),
            torch.zeros(rows, dtype=torch.int64),
        )

    def records(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The written records, perceptron by perceptron: ``weights [M, d]``, ``thresholds [M, k-1]``,
        ``survival [M]`` and ``row [M]`` (the perceptron, ``run * N + n``)."""
        cap = self.survival.shape[1]
        if self.count.numel() and int(self.count.max()) > cap:
            raise RuntimeError(f"the history overflowed its {cap} records per perceptron")
        written = torch.arange(cap) < self.count.unsqueeze(1)  # [R*N, cap]
        row = torch.repeat_interleave(torch.arange(self.count.numel()), self.count)
        return self.weights[written], self.thresholds[written], self.survival[written], row


def stream(
    x: torch.Tensor,
    y: torch.Tensor,
    presented: torch.Tensor,
    weights: torch.Tensor,
    thresholds: torch.Tensor,
    predictions: torch.Tensor | None,
    mistakes: torch.Tensor,
    correct: torch.Tensor,
    history: History | None = None,
) -> None:
    """Stream one chunk in place (the contract shared with ``kernels.prank_triton.stream``).

    Args:
        x: ``[R, T, d]`` float32; y: ``[R, T]`` long, 0-based ranks.
        presented: ``[T, R, N]`` bool, Algorithm 2's Bernoulli draws (True = the perceptron sees it).
        weights: ``[R, N, d]`` float32 and thresholds ``[R, N, k-1]`` float32, updated in place;
            fastest stored perceptron-minor (``transpose(1, 2)`` contiguous), as the ensemble holds them.
        predictions: ``[R, N, T]`` long (any strides), written with the rank each perceptron
            predicted before its update; None: not written.
        mistakes, correct: ``[R, N]`` float32, incremented by the presented examples it
            mispredicted / predicted right.
        history: the voted perceptron's record (PRank-VP): each hypothesis closed by a mistake
            with a vote (survived correct rounds) is written, pre-update, with its survival.
    """
    library = _library()
    # the loop's layout is perceptron-minor, [R, d, N] in memory: the ensemble's own, so no copies
    w, c = weights.transpose(1, 2).contiguous(), thresholds.transpose(1, 2).contiguous()
    x, y, presented = x.contiguous(), y.contiguous(), presented.contiguous()
    r, d, n = w.shape
    k, t = c.shape[1], x.shape[1]
    _check(x, (r, t, d), torch.float32, "x")
    _check(y, (r, t), torch.int64, "y")
    _check(presented, (t, r, n), torch.bool, "presented")
    _check(c, (r, k, n), torch.float32, "thresholds (transposed)")
    _check(w, (r, d, n), torch.float32, "weights (transposed)")
    if predictions is not None:
        _check(predictions, (r, n, t), torch.int64, "predictions", contiguous=False)
    for name, counter in (("mistakes", mistakes), ("correct", correct)):
        _check(counter, (r, n), torch.float32, name)
    recorded = [None] * 5 + [0]
    if history is not None:
        cap = history.survival.shape[1]
        _check(history.open_survival, (r, n), torch.float32, "history.open")
        _check(history.weights, (r * n, cap, d), torch.float32, "history.weights")
        _check(history.thresholds, (r * n, cap, k), torch.float32, "history.thresholds")
        _check(history.survival, (r * n, cap), torch.float32, "history.survival")
        _check(history.count, (r * n,), torch.int64, "history.count")
        if cap < (t + 1) // 2:
            raise ValueError(f"history: {cap} records per perceptron cannot hold a chunk of {t} examples")
        buffers = (history.open_survival, history.weights, history.thresholds, history.survival, history.count)
        recorded = [pointer(tensor) for tensor in buffers] + [cap]
    arrays = [pointer(tensor) for tensor in (x, y, presented, w, c)]
    out = (pointer(predictions), *predictions.stride()) if predictions is not None else (None, 0, 0, 0)
    counters = (pointer(mistakes), pointer(correct))
    library.ltr_prank_stream(r, n, d, k, t, *arrays, *out, *counters, *recorded, threads(r * n * t))
    if w.data_ptr() != weights.data_ptr():
        weights.copy_(w.transpose(1, 2))
    if c.data_ptr() != thresholds.data_ptr():
        thresholds.copy_(c.transpose(1, 2))


def widrow_hoff(
    x: torch.Tensor, targets: torch.Tensor, eta: torch.Tensor, weights: torch.Tensor, k: int,
    predictions: torch.Tensor | None = None,
) -> None:  # fmt: skip
    """Widrow-Hoff's stream in place: ``x [R, T, d]`` float32, ``targets [R, T]`` float32 (the rank),
    ``eta [E]`` float32, ``weights [R, E, d]`` float32 (contiguous, updated), ``predictions
    [R, E, T]`` long (contiguous; written with the estimate rounded to ``0..k-1`` before each update)
    or None. The reference is ``rankers.perceptron.WidrowHoff``'s tensor path (``fused=False``)."""
    library = _library()
    x, targets, eta = x.contiguous(), targets.contiguous(), eta.reshape(-1).contiguous()
    r, e, d = weights.shape
    t = x.shape[1]
    _check(x, (r, t, d), torch.float32, "x")
    _check(targets, (r, t), torch.float32, "targets")
    _check(eta, (e,), torch.float32, "eta")
    _check(weights, (r, e, d), torch.float32, "weights")
    if predictions is not None:
        _check(predictions, (r, e, t), torch.int64, "predictions")
    out = pointer(predictions) if predictions is not None else None
    arrays = (pointer(tensor) for tensor in (x, targets, eta, weights))
    library.ltr_widrow_hoff_stream(r, e, d, t, k, *arrays, out, threads(r * e * t))


def bernoulli(key: int, first_step: int, tau: torch.Tensor, out: torch.Tensor) -> None:
    """Algorithm 2's draws of steps ``first_step ..`` into ``out [T, R, N]`` bool (contiguous), ``tau [R]``
    float32: the counter-based SplitMix64 draws of ``rankers.perceptron.ensemble.counter_draws``
    (``key``: its ``draw_key(seed)``), bit for bit."""
    library = _library()
    t, r, n = out.shape
    tau = tau.reshape(-1).contiguous()
    _check(tau, (r,), torch.float32, "tau")
    _check(out, (t, r, n), torch.bool, "out")
    library.ltr_bernoulli(t, r, n, key, first_step, pointer(tau), pointer(out), threads(t * r * n))


def threads(steps: int) -> int:
    """torch's thread count for a call of at least ``PARALLEL_STEPS`` perceptron-steps, else one: a
    small call (PRank's 20 runs of one perceptron) would spend more in the OpenMP barrier than it
    saves, and far more on a loaded machine, where the barrier waits for a descheduled thread."""
    return torch.get_num_threads() if steps >= PARALLEL_STEPS else 1


def _check(tensor: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype, name: str, *, contiguous: bool = True):
    """The C loop trusts its pointers: refuse what would make it read or write out of bounds."""
    if tuple(tensor.shape) != shape or tensor.dtype != dtype or tensor.device.type != "cpu":
        raise ValueError(f"{name}: expected {dtype} {list(shape)} on the CPU, got {tensor.dtype} {list(tensor.shape)}")
    if contiguous and not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous")


def voted(
    weights: torch.Tensor,
    thresholds: torch.Tensor,
    survival: torch.Tensor,
    run: torch.Tensor,
    row: torch.Tensor,
    xt: torch.Tensor,
    total: torch.Tensor,
) -> None:
    """Add the voted perceptron's votes of M stored hypotheses to ``total`` in place.

    ``weights [M, d]``, ``thresholds [M, k-1]``, ``survival [M]`` (the votes), ``run [M]`` (whose
    test points each hypothesis ranks, given feature-major: ``xt [R, d, T]`` float32 contiguous,
    i.e. ``x.transpose(1, 2).contiguous()`` once for all calls) and ``row [M]`` (the row of
    ``total [rows, T]`` float64 it votes in): ``total[row[m], t] += survival[m] * rank_m(x[run[m],
    t])``, ranks counted as ``rank_of`` does. The reference is the tensor path of
    ``PRankEnsemble.mean_rank(..., "voted")`` with ``fused=False``.
    """
    library = _library()
    weights, thresholds = weights.to(torch.float32).contiguous(), thresholds.to(torch.float32).contiguous()
    survival, run, row = (t.contiguous() for t in (survival.double(), run.long(), row.long()))
    m, d = weights.shape
    runs, t = xt.shape[0], xt.shape[2]
    _check(thresholds, (m, thresholds.shape[1]), torch.float32, "thresholds")
    _check(xt, (runs, d, t), torch.float32, "xt")
    _check(total, (total.shape[0], t), torch.float64, "total")
    for name, index, size in (("survival", survival, None), ("run", run, runs), ("row", row, total.shape[0])):
        if index.shape != (m,):
            raise ValueError(f"{name} must be [M={m}], got {list(index.shape)}")
        if size is not None and m and not 0 <= int(index.min()) <= int(index.max()) < size:
            raise ValueError(f"{name} must index 0..{size - 1}")
    arrays = (pointer(tensor) for tensor in (weights, thresholds, survival, run, row, xt, total))
    library.ltr_prank_voted(m, t, d, thresholds.shape[1], *arrays, threads(m * t))
