"""Online ordinal rankers as one batched tensor: PRank, OAP-BPM, OAP-Bagg, OAP-VP, PRank-VP, Widrow-Hoff.

Crammer & Singer (NIPS 2001) "Pranking with Ranking" and Harrington (ICML 2003) "Online
Ranking/Collaborative Filtering using the Perceptron Algorithm". R independent runs of N
perceptrons are held as ``weights [R, N, d]`` and ``thresholds [R, N, k-1]``; one example of each
run's stream is processed per step by a handful of tensor ops over all R*N perceptrons.

Ranks are 0-based here: ``y in {0..k-1}`` is the paper's rank ``y + 1``. Threshold ``r`` (0-based)
is the paper's ``c(r + 1)``; ``c(k) = +inf`` is implicit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn

from kernels import prank_cpu

Combine = Literal["bpm", "bagg", "vp", "voted", "each"]
Fused = bool | Literal["cpu", "triton"]

# Bernoulli draws and labels prepared per chunk of the stream, so a step does no allocation.
CHUNK = 2048
# The C++ loop needs no per-step tensors, so it takes longer chunks: fewer per-chunk tensor ops (each a
# round trip through torch's thread pool, milliseconds on a loaded machine), within DRAW_BYTES of draws.
CPU_CHUNK = 16384
DRAW_BYTES = 64 << 20
# stored hypotheses scored together by the voted perceptron's tensor path
VOTED_CHUNK = 1 << 14
# the C++ stream's history buffers per call: the chunk is shortened where R * N perceptrons would need more
HISTORY_BYTES = 64 << 20


# R x N perceptrons from which the Triton stream beats the C++ one (one H200 against its 16 cores,
# docs/benchmarks.md, 2026-11-28): R = 20 x N = 100 ran 5.9x (d = 6) and 4.5x (d = 300) faster, R = 60 x
# N = 100 10x; fewer were not measured, so they stay on the CPU
TRITON_MIN_PERCEPTRONS = 2000


def stream_device(available: torch.device, *, n_runs: int, n_perceptrons: int, keep_history: bool) -> torch.device:
    """Where a PRank / OAP stream runs best when ``available`` is the trainer's device (measured).

    On a GPU machine only a stream of many perceptrons (``n_runs * n_perceptrons >=
    TRITON_MIN_PERCEPTRONS``) that keeps no voted history goes to CUDA, through the Triton kernel.
    Single-perceptron streams and ones that keep the history would take CUDA's tensor path, one
    launch per example: Table 1's PRank / PRank-VP stream (20 runs) took 18.5 s that way on the H200,
    against about 1 s for the whole table on a 2-core CPU's C++ kernel
    (``python train.py experiment=harrington2003 harrington.device=cuda``).

    Example:
        >>> stream_device(torch.device("cuda"), n_runs=60, n_perceptrons=100, keep_history=False).type
        'cuda'
        >>> stream_device(torch.device("cuda"), n_runs=20, n_perceptrons=1, keep_history=True).type
        'cpu'
    """
    many = n_runs * n_perceptrons >= TRITON_MIN_PERCEPTRONS
    return available if available.type == "cuda" and many and not keep_history else torch.device("cpu")


def rank_of(scores: Tensor, thresholds: Tensor) -> Tensor:
    """``min {r : score - c(r) < 0}`` (0-based), i.e. the number of leading thresholds <= score.

    ``scores [...]``, ``thresholds [..., k-1]`` -> ``[...]`` long. Counting leading entries (rather
    than all entries) keeps the paper's ``min`` exact even if thresholds were out of order.
    """
    # threshold by threshold, no [..., k-1] intermediate (5x faster than a cumulative product of it)
    count = torch.uint8 if thresholds.shape[-1] < 256 else torch.int32
    rank = alive = None
    for q in range(thresholds.shape[-1]):
        at_or_above = scores - thresholds[..., q] >= 0
        alive = at_or_above if alive is None else alive & at_or_above
        rank = alive.to(count) if rank is None else rank.add_(alive)
    if rank is None:  # no thresholds: one rank
        shape = torch.broadcast_shapes(scores.shape, thresholds.shape[:-1])
        return torch.zeros(shape, dtype=torch.long, device=scores.device)
    return rank.long()


_MASK64 = (1 << 64) - 1
DRAW_BLOCK = 1 << 24  # counter_draws' torch ops take this many draws at a time (int64 temporaries ~128 MB)
_GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment (2^64 / golden ratio)
_MIX = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


def _mix64(z: int) -> int:
    """SplitMix64's output function on a Python int (mod 2^64)."""
    z = ((z ^ (z >> 30)) * _MIX[0]) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX[1]) & _MASK64
    return z ^ (z >> 31)


def draw_key(seed: int) -> int:
    """The 64-bit key of a seed's draws (mixed, so nearby seeds give unrelated streams)."""
    return _mix64((seed * _GAMMA) & _MASK64)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(z: Tensor, bits: int) -> Tensor:
    """Logical right shift of int64 holding unsigned 64-bit values (torch's ``>>`` is arithmetic)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def counter_draws(key: int, first_step: int, steps: int, tau: Tensor, n: int) -> Tensor:
    """Algorithm 2's Bernoulli draws of ``steps`` examples from ``first_step`` on: ``[steps, R, N]`` bool.

    Draw ``i = (step * R + r) * N + n`` is SplitMix64 (Steele, Lea & Flood 2014) at state
    ``key + (i + 1) * GAMMA`` (mod 2^64); its top 24 bits make a float32 uniform in [0, 1), as
    ``torch.rand`` gives them, and the perceptron is presented the example iff it is below
    ``tau [R]``: independent Bernoulli(tau) draws that depend on their position only, so every path,
    chunking and device draws the same ones (the C++ ``kernels.prank_cpu.bernoulli`` bit for bit,
    tested). Here in int64 torch ops, whose products wrap mod 2^64.

    Example:
        >>> draws = counter_draws(draw_key(0), 0, 1000, torch.tensor([0.3, 1.0]), 50)
        >>> draws.shape, bool(draws[:, 1].all()), 0.27 < draws[:, 0].float().mean().item() < 0.33
        (torch.Size([1000, 2, 50]), True, True)
    """
    runs = tau.numel()
    tau = tau.to(torch.float32).view(1, runs, 1)
    out = torch.empty(steps, runs, n, dtype=torch.bool, device=tau.device)
    block = max(1, DRAW_BLOCK // max(1, runs * n))  # examples at a time: bounded int64 temporaries
    for start in range(0, steps, block):
        stop = min(steps, start + block)
        first = (first_step + start) * runs * n
        index = torch.arange(first, first + (stop - start) * runs * n, dtype=torch.int64, device=tau.device)
        z = (index + 1) * _signed(_GAMMA) + _signed(key)
        for bits, multiplier in zip((30, 27), _MIX, strict=True):
            z = (z ^ _shift_right(z, bits)) * _signed(multiplier)
        z = z ^ _shift_right(z, 31)
        uniform = _shift_right(z, 40).float() * 2.0**-24
        out[start:stop] = uniform.view(stop - start, runs, n) < tau
    return out


class PRankEnsemble(nn.Module):
    """R runs x N PRank perceptrons updated online (Algorithm 1 under Algorithm 2's sampling).

    Args:
        n_features: ``d``.
        n_ranks: ``k``; labels are ``0..k-1``.
        n_perceptrons: ``N``; PRank is ``n_perceptrons=1, tau=1.0``.
        tau: Bernoulli probability of presenting an example to a perceptron (one value, or one per run).
        n_runs: ``R`` independent runs (each with its own stream in ``partial_fit``).
        seed: seeds the Bernoulli draws (``counter_draws``: the same on every path and device).
        device: where the state lives.
        keep_history: store every hypothesis with its survival count, for the voted perceptron
            (``combine="voted"``, PRank-VP): in ``history``, one ``(weights [M, d], thresholds
            [M, k-1], survival [M], row [M])`` per chunk of the stream, the M hypotheses closed by a
            mistake after surviving at least one correct round, ``row = run * N + perceptron``;
            memory ``(mistakes with a vote) * (d + k + 1)``.
        fused: stream plain ``partial_fit`` calls through a fused kernel with the same arithmetic:
            the C++ loop of ``kernels.prank_cpu`` on CPU, the Triton kernel of
            ``kernels.prank_triton`` on CUDA. False forces the tensor path (the reference, which
            every device runs); ``"cpu"`` or ``"triton"`` forces that kernel (``"triton"`` on CPU
            runs Triton's interpreter: tests only).

    State: ``weights [R, N, d]``, ``thresholds [R, N, k-1]`` (float32, start at 0), ``correct [R, N]``
    (correct predictions on presented examples, OAP-VP's votes), ``presented [R, N]``, ``mistakes [R, N]``:
    buffers, so ``.to()``, ``state_dict`` and ``load_state_dict`` are ``nn.Module``'s; the draw counter
    and the voted history travel as the module's extra state.
    """

    def __init__(
        self,
        n_features: int,
        n_ranks: int,
        *,
        n_perceptrons: int = 1,
        tau: float | Sequence[float] = 1.0,
        n_runs: int = 1,
        seed: int = 0,
        device: str | torch.device | None = None,
        keep_history: bool = False,
        fused: Fused = True,
    ) -> None:
        if n_ranks < 2:
            raise ValueError(f"n_ranks must be >= 2, got {n_ranks}")
        super().__init__()
        self.d, self.k, self.n, self.r = n_features, n_ranks, n_perceptrons, n_runs
        device = torch.device(device) if device is not None else torch.device("cpu")
        tau_values = torch.as_tensor(tau, dtype=torch.float32, device=device).reshape(-1)
        if tau_values.numel() not in (1, n_runs) or not ((tau_values > 0) & (tau_values <= 1)).all():
            raise ValueError(f"tau must be in (0, 1], one value or one per run; got {tau}")
        self.register_buffer("tau", tau_values.expand(n_runs).reshape(n_runs, 1).clone())
        self.every_example_presented = bool((tau_values >= 1).all())  # once: a check per chunk syncs a GPU
        # Algorithm 2's draws come from a counter (counter_draws): the key and the examples drawn so far
        self.key, self.drawn = draw_key(seed), 0
        zeros = dict(device=device, dtype=torch.float32)
        # stored perceptron-minor (memory [R, d, N] and [R, k-1, N], seen as [R, N, d] and
        # [R, N, k-1]): each step's score is then a row vector times a matrix, which CPU BLAS runs
        # much faster than the matrix-vector product, and in the Triton kernel each GPU thread
        # owns one perceptron's weights and thresholds with coalesced loads
        self.register_buffer("weights", torch.zeros(n_runs, n_features, n_perceptrons, **zeros).transpose(1, 2))
        self.register_buffer("thresholds", torch.zeros(n_runs, n_ranks - 1, n_perceptrons, **zeros).transpose(1, 2))
        self.register_buffer("correct", torch.zeros(n_runs, n_perceptrons, **zeros))
        self.register_buffer("presented", torch.zeros(n_runs, n_perceptrons, **zeros))
        self.register_buffer("mistakes", torch.zeros(n_runs, n_perceptrons, **zeros))
        # voted perceptron: correct rounds survived by each perceptron's current hypothesis
        self.register_buffer("_open", torch.zeros(n_runs, n_perceptrons, **zeros))
        self.register_buffer("rank_index", torch.arange(n_ranks - 1, device=device), persistent=False)
        if fused not in (True, False, "cpu", "triton"):
            raise ValueError(f"fused must be True, False, 'cpu' or 'triton'; got {fused!r}")
        self.keep_history, self.fused = keep_history, fused
        self.history: list[tuple[Tensor, ...]] = []  # (weights, thresholds, survival, row) per chunk
        self._slots: list[tuple[Tensor, Tensor, Tensor]] = []  # the tensor path's dense slots of one chunk

    @property
    def device(self) -> torch.device:
        return self.weights.device

    def _apply(self, fn, recurse: bool = True):
        """``.to()`` and friends move the voted history too (the draws go on where they were: they
        depend on the count, not on the device)."""
        super()._apply(fn, recurse)
        self.history = [tuple(fn(t) for t in entry) for entry in self.history]
        return self

    def get_extra_state(self) -> dict:
        return {"drawn": self.drawn, "history": self.history}

    def set_extra_state(self, state: dict) -> None:
        self.drawn = int(state["drawn"])
        self.history = [tuple(t.to(self.device) for t in entry) for entry in state["history"]]

    def _draw(self, steps: int) -> Tensor:
        """The next ``steps`` examples' draws ``[steps, R, N]`` bool: the C++ loop on CPU, torch ops
        otherwise (the same bits); all True without drawing where every tau is 1."""
        first, self.drawn = self.drawn, self.drawn + steps
        if self.every_example_presented:
            return torch.ones(steps, self.r, self.n, dtype=torch.bool, device=self.device)
        if self.fused and self.device.type == "cpu" and prank_cpu.kernel() is not None:
            out = torch.empty(steps, self.r, self.n, dtype=torch.bool)
            prank_cpu.bernoulli(self.key, first, self.tau, out)
            return out
        return counter_draws(self.key, first, steps, self.tau, self.n)

    # -- training -------------------------------------------------------------------------------
    def partial_fit(
        self,
        features: Tensor,
        labels: Tensor,
        *,
        combine: Combine | None = None,
        presented: Tensor | None = None,
        return_predictions: bool = True,
    ) -> Tensor | None:
        """Stream ``features [R, T, d]``, ``labels [R, T]`` (0-based ranks) in order, one example a step.

        ``presented [T, R, N]`` bool, if given, replaces Algorithm 2's Bernoulli(tau) draws (which
        perceptron sees which example), so that different paths or devices can be compared on
        the same presentation; by default they are drawn from the ensemble's counter (``counter_draws``).

        Returns the predictions made *before* each update: ``[R, N, T]`` long for every perceptron,
        or with ``combine`` (``bpm``, ``bagg``, ``vp``) ``[R, T]``, the combined rule's prediction at
        that round. Their rank loss is the paper's online average rank loss (Figure 2).
        ``return_predictions=False`` (without ``combine``) returns None and spares their memory
        (``R * N * T`` longs); the C++ stream then writes no predictions.
        """
        features = features.to(self.device, torch.float32)
        labels = labels.to(self.device, torch.long)
        if features.shape[:2] != labels.shape or features.shape[0] != self.r or features.shape[2] != self.d:
            raise ValueError(
                f"expected features [R={self.r}, T, d={self.d}] and labels [R, T], "
                f"got {tuple(features.shape)} and {tuple(labels.shape)}"
            )
        if labels.numel() and (labels.min() < 0 or labels.max() >= self.k):
            raise ValueError(f"labels must be in 0..{self.k - 1}")
        steps = features.shape[1]
        if presented is not None:
            presented = presented.to(self.device, torch.bool)
            if presented.shape != (steps, self.r, self.n):
                raise ValueError(f"presented must be [T={steps}, R={self.r}, N={self.n}], got {tuple(presented.shape)}")
        kernel = self._kernel(combine)
        keep = return_predictions or combine is not None
        predictions = self._empty_predictions(steps, kernel) if keep else None
        combined = torch.empty(self.r, steps, dtype=torch.long, device=self.device) if combine else None
        chunk, history = CHUNK, None
        if kernel is prank_cpu.stream:
            chunk = max(1, min(CPU_CHUNK, DRAW_BYTES // (self.r * self.n)))
        if kernel is prank_cpu.stream and self.keep_history:
            per_step = self.r * self.n * (self.d + self.k) * 4  # one record per perceptron
            chunk = max(2, min(chunk, 2 * HISTORY_BYTES // per_step))
            history = prank_cpu.History.empty(self._open, self.d, self.k - 1, (min(chunk, steps) + 1) // 2)
        for start in range(0, steps, chunk):
            stop = min(steps, start + chunk)
            shown = self._draw(stop - start) if presented is None else presented[start:stop]
            if kernel is not None:
                correct_before = self.correct.clone() if combine == "vp" else None
                if predictions is not None:
                    out = predictions[:, :, start:stop]
                else:  # the Triton kernel always writes them
                    out = None if kernel is prank_cpu.stream else self._empty_predictions(stop - start, kernel)
                arguments = (features[:, start:stop], labels[:, start:stop], shown, self.weights, self.thresholds)
                # every presented example is a mistake or a correct prediction, so the kernels'
                # counters give `presented` without a pass over the [t, R, N] draws
                counted = self.mistakes + self.correct
                if history is None:
                    kernel(*arguments, out, self.mistakes, self.correct)
                else:
                    kernel(*arguments, out, self.mistakes, self.correct, history)
                    self._keep(history.records())
                self.presented.add_(self.mistakes + self.correct - counted)
                if combined is not None:
                    combined[:, start:stop] = self._combined_from_predictions(
                        predictions[:, :, start:stop], labels[:, start:stop], shown, correct_before, combine
                    )
                continue
            self._tensor_chunk(
                features[:, start:stop],
                labels[:, start:stop],
                shown,
                predictions[:, :, start:stop] if predictions is not None else None,
                combined[:, start:stop] if combined is not None else None,
                combine,
            )
        if predictions is None:
            return None
        return predictions if combined is None else combined

    def _tensor_chunk(
        self,
        features: Tensor,
        labels: Tensor,
        presented: Tensor,
        predictions: Tensor | None,
        combined: Tensor | None,
        combine: Combine | None,
    ) -> None:
        """The reference path: one chunk ``[R, t, d]``, a handful of ``[R, N, ...]`` ops per example."""
        # l(r) = -1 where y <= r, else +1 (Algorithm 1, line 4), for every step of the chunk
        signs = torch.where(labels[..., None] <= self.rank_index, -1.0, 1.0)
        # per-step views shaped once per chunk, so a step runs no reshaping ops:
        # x [R, 1, d], y [R, 1], signs [R, 1, k-1], presented [R, N]
        rounds = zip(
            features[:, :, None].unbind(1),
            labels[:, :, None].unbind(1),
            signs[:, :, None].unbind(1),
            presented.unbind(0),
            strict=True,
        )
        step_predictions, step_mistakes = [], []
        for t, (x, y, sign, shown) in enumerate(rounds):
            if combined is not None:
                combined[:, t] = self._combined_now(x, combine)
            predicted, mistake = self._step(x, y, sign, shown)
            step_predictions.append(predicted)
            step_mistakes.append(mistake)
            if combine == "vp":  # the online vote needs the counts as of this round
                self.correct.add_(shown & ~mistake)
        if predictions is not None:
            predictions.copy_(torch.stack(step_predictions, -1))
        if self.keep_history:
            self._keep_slots()
        # the counters are summed once per chunk rather than with three more ops per step
        self._count(presented, torch.stack(step_mistakes), correct=combine != "vp")

    def stream_path(self) -> str:
        """The loop ``partial_fit`` takes here (no online read-out): ``"prank_cpu kernel"``,
        ``"prank_triton kernel"`` or ``"tensor path"``, for a timing to say what it measured."""
        kernel = self._kernel(None)
        return "tensor path" if kernel is None else f"{kernel.__module__.replace('kernels.', '')} kernel"

    def _kernel(self, combine: Combine | None):
        """The fused kernel for this call (``stream`` of ``kernels.prank_cpu`` or ``prank_triton``), or
        None for the tensor path. Online Bagg and VP predictions follow from every perceptron's own
        predictions (and VP's running counts), which the kernels return; online BPM needs the
        averaged state after every round, so it takes the tensor path. The C++ stream also records
        the voted history (``keep_history``); with it, CUDA runs take the tensor path."""
        if not self.fused or combine not in (None, "bagg", "vp"):
            return None
        wanted = self.fused if isinstance(self.fused, str) else ("triton" if self.device.type == "cuda" else "cpu")
        if self.keep_history and wanted == "triton":
            if self.fused == "triton":
                raise RuntimeError("fused='triton' does not record the voted history (keep_history=True)")
            return None
        if wanted == "triton":
            from kernels import prank_triton  # imports Triton (0.1 s): only where it may run

            if prank_triton.available(self.device):
                return prank_triton.stream
        if wanted == "cpu" and self.device.type == "cpu" and prank_cpu.kernel() is not None:
            return prank_cpu.stream
        if isinstance(self.fused, str):
            raise RuntimeError(f"fused={self.fused!r} is not available on {self.device} (see kernels.build)")
        return None

    def _empty_predictions(self, steps: int, kernel) -> Tensor:
        """``[R, N, T]`` long; perceptron-minor in memory for the Triton kernel (coalesced stores)."""
        options = dict(dtype=torch.long, device=self.device)
        if kernel is not None and kernel is not prank_cpu.stream:  # the Triton kernel's
            return torch.empty(self.r, steps, self.n, **options).transpose(1, 2)
        return torch.empty(self.r, self.n, steps, **options)

    def _count(self, presented: Tensor, mistakes: Tensor, *, correct: bool) -> None:
        """Add a chunk's ``presented`` and ``mistakes`` ``[t, R, N]`` to the per-perceptron counters."""
        self.mistakes.add_(mistakes.sum(0))
        self.presented.add_(presented.sum(0))
        if correct:
            self.correct.add_((presented & ~mistakes).sum(0))

    def _combined_from_predictions(
        self, each: Tensor, labels: Tensor, presented: Tensor, correct_before: Tensor | None, combine: Combine
    ) -> Tensor:
        """Online Bagg / VP predictions ``[R, t]`` of a chunk from the perceptrons' own predictions
        ``each [R, N, t]`` made before each update: the same rule as ``predict`` at every round, with
        VP's votes counted up to (not including) that round."""
        if combine == "bagg":
            return round_rank(_mean_vote(each, None), self.k)
        right = (presented.permute(1, 2, 0) & (each == labels[:, None, :])).long()  # [R, N, t]
        votes = correct_before.unsqueeze(-1) + (right.cumsum(-1) - right).to(correct_before.dtype)
        return round_rank(_mean_vote(each, votes), self.k)

    def _combined_now(self, x: Tensor, combine: Combine) -> Tensor:
        """The combined rule's rank of ``x [R, 1, d]`` under the current state, ``[R]``."""
        return self.predict(x, combine).squeeze(1)

    def _step(self, x: Tensor, y: Tensor, signs: Tensor, presented: Tensor) -> tuple[Tensor, Tensor]:
        """One round for all R*N perceptrons: ``x [R, 1, d]``, ``y [R, 1]``, ``signs [R, 1, k-1]``,
        ``presented [R, N]``. Returns the ranks predicted before the update ``[R, N]`` and the
        mistakes ``[R, N]`` bool."""
        score = torch.bmm(x, self.weights.transpose(1, 2)).squeeze(1)  # [R, N]
        margins = score.unsqueeze(-1) - self.thresholds  # [R, N, k-1]
        # PRank keeps c(1) <= ... <= c(k-1) (Crammer & Singer, Lemma 1; tested after every update),
        # so counting the thresholds <= score is the paper's min{r : score - c(r) < 0}
        predicted = (margins >= 0).sum(-1)
        mistake = (predicted != y) & presented  # update only presented, mispredicted perceptrons
        # a(r) = l(r) where (w.x - c(r)) l(r) <= 0 (lines 6-8), for mistaken perceptrons only
        step = signs * ((margins * signs <= 0) & mistake.unsqueeze(-1))  # cheaper than torch.where here
        if self.keep_history:
            self._record(mistake, presented & ~mistake)
        self.weights.addcmul_(step.sum(-1, keepdim=True), x)  # w += sum_r a(r) x
        self.thresholds.sub_(step)  # c -= a
        return predicted, mistake

    def _record(self, mistake: Tensor, correct: Tensor) -> None:
        """Voted perceptron bookkeeping: the current hypothesis survives one more correct round;
        on a mistake its (weights, thresholds, survival) is closed and a new one starts."""
        self._open.add_(correct)
        if mistake.any():
            self._slots.append((self.weights.clone(), self.thresholds.clone(), torch.where(mistake, self._open, 0.0)))
            self._open = torch.where(mistake, torch.zeros_like(self._open), self._open)

    def _keep_slots(self) -> None:
        """A chunk's dense slots (every perceptron's state whenever any of them erred) -> the records
        that vote (closed with a survival > 0), the form the C++ stream writes."""
        if not self._slots:
            return
        weights, thresholds, survival = (torch.stack(part) for part in zip(*self._slots))
        self._slots = []
        h, r, n = survival.nonzero(as_tuple=True)
        self._keep((weights[h, r, n], thresholds[h, r, n], survival[h, r, n], r * self.n + n))

    def _keep(self, records: tuple[Tensor, ...]) -> None:
        if records[2].numel():
            self.history.append(records)

    # -- prediction -----------------------------------------------------------------------------
    def scores(self, features: Tensor, combine: Combine = "bpm") -> Tensor:
        """Real-valued ranking scores ``w . x`` ``[R, n]`` (averaged weights for ``bpm``)."""
        features = features.to(self.device, torch.float32)
        if combine == "bpm":
            return torch.bmm(features, self.weights.mean(1).unsqueeze(-1)).squeeze(-1)
        return torch.bmm(features, self.weights.transpose(1, 2)).mean(-1)

    def predict(self, features: Tensor, combine: Combine = "bpm") -> Tensor:
        """Ranks ``[R, n]`` long (0-based) of ``features [R, n, d]``.

        * ``bpm``: OAP-BPM, the rank under the averaged weights and thresholds (Algorithm 2).
        * ``bagg``: OAP-Bagg, the mean of the N predicted ranks, rounded to the nearest rank.
        * ``vp``: OAP-VP, the mean of the N ranks weighted by each perceptron's count of correct
          predictions, ``sum v_i h_i / sum v_i``, rounded (equal weights if no votes yet).
        * ``voted``: the voted perceptron over the stored hypotheses of each perceptron (PRank-VP
          for N = 1), needs ``keep_history=True``; averaged over the N perceptrons, rounded.
        * ``each``: ``[R, N, n]``, every perceptron's own rank.
        """
        features = features.to(self.device, torch.float32)
        if combine == "bpm":
            score = torch.bmm(features, self.weights.mean(1).unsqueeze(-1)).squeeze(-1)
            return rank_of(score, self.thresholds.mean(1).unsqueeze(1))
        if combine == "each":
            return self._each(features, self.weights, self.thresholds)  # [R, N, n]
        if combine in ("bagg", "vp", "voted"):
            return round_rank(self.mean_rank(features, combine), self.k)
        raise ValueError(f"combine must be bpm, bagg, vp, voted or each; got {combine!r}")

    def mean_rank(self, features: Tensor, combine: Combine = "bagg", *, each: Tensor | None = None) -> Tensor:
        """The voting ensembles' averaged rank before rounding, ``[R, n]`` float, for ``features [R, n, d]``.

        Harrington's final hypotheses as written: OAP-Bagg ``H(x) = sum_i h_i(x) / N``, OAP-VP
        ``sum_i v_i h_i(x) / sum_i v_i``, and for ``voted`` the voted perceptron's survival-weighted
        mean over stored hypotheses (averaged over the N perceptrons). ``h_i`` are 1-based in the
        paper; this is 0-based like every rank here. ``predict`` rounds it to the nearest rank.
        ``each`` may pass ``predict(features, "each")`` when it is already computed.
        """
        features = features.to(self.device, torch.float32)
        if combine == "voted":
            return self._voted(features)
        if each is None:
            each = self._each(features, self.weights, self.thresholds)
        if combine == "bagg":
            return _mean_vote(each, None).float()
        if combine == "vp":
            return _mean_vote(each, self.correct.unsqueeze(-1).expand(each.shape)).float()
        raise ValueError(f"mean_rank combines bagg, vp or voted; got {combine!r}")

    @staticmethod
    def _each(features: Tensor, weights: Tensor, thresholds: Tensor) -> Tensor:
        score = torch.bmm(weights, features.transpose(1, 2))  # [R, N, n]
        return rank_of(score, thresholds.unsqueeze(2))

    def _voted(self, features: Tensor) -> Tensor:
        """Survival-weighted mean rank over every stored hypothesis ``[R, n]`` (averaged over N).

        The records (``history`` and the current hypotheses) are scored together, only those with a
        vote. On CPU (``fused`` True or ``"cpu"``) the C++ loop ``kernels.prank_cpu.voted`` scores
        them; the tensor path, run by run in blocks of ``VOTED_CHUNK``, is the reference. Integer
        ranks times integer survivals summed in float64 are exact in any order, so both are the sum
        a loop over hypotheses would take."""
        if not self.keep_history:
            raise ValueError("combine='voted' needs keep_history=True")
        weights, thresholds, survival, rows = self._voting_records()
        total = torch.zeros(self.r * self.n, features.shape[1], device=self.device, dtype=torch.float64)
        votes = torch.zeros(self.r * self.n, 1, device=self.device, dtype=torch.float64)
        votes.view(-1).index_add_(0, rows, survival.double())
        runs = torch.div(rows, self.n, rounding_mode="floor")
        fused = self.fused in (True, "cpu") and self.device.type == "cpu" and prank_cpu.kernel() is not None
        if fused:  # one C++ pass: each score in registers, no [M, n_test] intermediates
            feature_major = features.transpose(1, 2).contiguous()  # the kernel's layout
            prank_cpu.voted(weights, thresholds, survival, runs, rows, feature_major, total)
        else:
            for run in range(self.r):  # the tensor path, run by run
                mine = (runs == run).nonzero().squeeze(1)
                for block in mine.split(VOTED_CHUNK):
                    score = weights[block] @ features[run].T  # [M, n_test]
                    ranks = _voted_ranks(score, thresholds[block]).double()
                    total.index_add_(0, rows[block], survival[block].double().unsqueeze(1) * ranks)
        total, votes = total.view(self.r, self.n, -1), votes.view(self.r, self.n, 1)
        current = self._each(features, self.weights, self.thresholds).double()
        return torch.where(votes > 0, total / votes.clamp_min(1e-12), current).mean(1)

    def _voting_records(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Every hypothesis with a vote, concatenated: ``weights [M, d]``, ``thresholds [M, k-1]``,
        ``survival [M]``, ``row [M]`` (``run * N + perceptron``). Dense slots from before the
        records (a checkpoint's ``(weights [R, N, d], thresholds, survival [R, N])``) are read too."""
        rows = self.r * self.n
        current = (
            self.weights.reshape(rows, self.d),
            self.thresholds.reshape(rows, self.k - 1),
            self._open.reshape(rows),
            torch.arange(rows, device=self.device),
        )
        records = []
        for entry in [*self.history, current]:
            if len(entry) == 3:  # a dense slot
                weights, thresholds, survival = entry
                r, n = survival.nonzero(as_tuple=True)
                entry = (weights[r, n], thresholds[r, n], survival[r, n], r * self.n + n)
            voting = entry[2] > 0
            records.append(tuple(part[voting] for part in entry))
        return tuple(torch.cat(part) for part in zip(*records))


def _voted_ranks(score: Tensor, thresholds: Tensor) -> Tensor:
    """``rank_of(score [M, n], thresholds [M, k-1])`` for the voted history: a binary search per
    score where every row's thresholds are ordered (PRank keeps them so, Lemma 1), which is the
    same count (``s - c >= 0`` iff ``c <= s`` for floats) without the ``[M, n, k-1]`` intermediate;
    ``rank_of`` itself otherwise, or where a score may be NaN (which ranks 0 there; a NaN or
    overflowing sum says "may")."""
    ordered = bool((thresholds[:, 1:] >= thresholds[:, :-1]).all())
    if not ordered or not bool(score.sum().isfinite()):
        return rank_of(score, thresholds.unsqueeze(1))
    return torch.searchsorted(thresholds.contiguous(), score.contiguous(), right=True)


def _mean_vote(each: Tensor, votes: Tensor | None) -> Tensor:
    """Bagg (``votes=None``: the mean rank) or VP (the ``votes``-weighted mean, equal weights while a
    run has no votes) of ranks ``each [R, N, n]``, unrounded ``[R, n]`` float64. In float64, where
    these integer sums are exact whatever their order, so every path that calls it agrees bit for bit."""
    if votes is None:
        return each.double().mean(1)
    votes = votes.double()
    votes = torch.where(votes.sum(1, keepdim=True) > 0, votes, torch.ones_like(votes))
    return (each.double() * votes).sum(1) / votes.sum(1)


def round_rank(value: Tensor, k: int) -> Tensor:
    """Nearest rank in ``0..k-1`` (halves round up)."""
    return torch.floor(value + 0.5).clamp(0, k - 1).long()


class WidrowHoff(nn.Module):
    """Online least-squares regression (Widrow & Hoff 1960) on the rank, rounded: the paper's baseline.

    ``w += eta (y - w.x) x`` per example, for R runs x E learning rates at once
    (``weights [R, E, d]``). ``predict`` rounds ``w . x`` to the nearest rank in ``0..k-1``.
    Include a constant feature for a bias (the degree-2 kernel map does).

    ``fused``: on CPU, stream through the C++ loop ``kernels.prank_cpu.widrow_hoff`` (the same float32
    arithmetic, one (run, rate) per thread item); False forces the tensor path (the reference, and
    what CUDA runs); ``"cpu"`` requires the loop.
    """

    @staticmethod
    def stream_device(available: torch.device) -> torch.device:
        """The CPU, whatever is ``available``: CUDA has only the tensor path, one launch per example
        (Table 1's Widrow-Hoff streams took 2.7 s that way on an H200, docs/benchmarks.md)."""
        return torch.device("cpu")

    def __init__(
        self,
        n_features: int,
        n_ranks: int,
        *,
        eta: float | Sequence[float] = 0.1,
        n_runs: int = 1,
        device: str | torch.device | None = None,
        fused: bool | Literal["cpu"] = True,
    ) -> None:
        if fused not in (True, False, "cpu"):
            raise ValueError(f"fused must be True, False or 'cpu'; got {fused!r}")
        super().__init__()
        self.k, self.fused = n_ranks, fused
        device = torch.device(device) if device is not None else torch.device("cpu")
        self.register_buffer("eta", torch.as_tensor(eta, dtype=torch.float32, device=device).reshape(1, -1))
        self.register_buffer("weights", torch.zeros(n_runs, self.eta.shape[1], n_features, device=device))

    @property
    def device(self) -> torch.device:
        return self.weights.device

    def partial_fit(self, features: Tensor, labels: Tensor, *, return_predictions: bool = True) -> Tensor | None:
        """Stream ``features [R, T, d]``, ``labels [R, T]``; returns predictions before each update
        ``[R, E, T]`` (None with ``return_predictions=False``)."""
        features = features.to(self.device, torch.float32)
        targets = labels.to(self.device, torch.float32)
        shape = (*self.weights.shape[:2], features.shape[1])
        predictions = torch.empty(shape, dtype=torch.long, device=self.device) if return_predictions else None
        if self._fused():
            self.weights = self.weights.contiguous()
            prank_cpu.widrow_hoff(features, targets, self.eta, self.weights, self.k, predictions)
            return predictions
        for t in range(features.shape[1]):
            x = features[:, t].unsqueeze(1)  # [R, 1, d]
            estimate = (self.weights * x).sum(-1)  # [R, E]
            if predictions is not None:
                predictions[:, :, t] = round_rank(estimate, self.k)
            self.weights.addcmul_((self.eta * (targets[:, t, None] - estimate)).unsqueeze(-1), x)
        return predictions

    def stream_path(self) -> str:
        """The loop ``partial_fit`` takes here: ``"prank_cpu kernel"`` or ``"tensor path"``."""
        return "prank_cpu kernel" if self._fused() else "tensor path"

    def _fused(self) -> bool:
        if not self.fused or self.device.type != "cpu":
            if self.fused == "cpu":
                raise RuntimeError(f"fused='cpu' runs on the CPU, not {self.device}")
            return False
        if prank_cpu.kernel() is None:
            if self.fused == "cpu":
                raise RuntimeError("fused='cpu' is not available (see kernels.build)")
            return False
        return True

    def scores(self, features: Tensor) -> Tensor:
        return torch.bmm(self.weights, features.to(self.device, torch.float32).transpose(1, 2))  # [R, E, n]

    def predict(self, features: Tensor) -> Tensor:
        """Ranks ``[R, E, n]`` for ``features [R, n, d]``."""
        return round_rank(self.scores(features), self.k)
