"""Whole training steps (forward, loss, backward, optimizer update) as CUDA graphs, one per batch shape.

Why: on a GPU a LambdaRank step on a few hundred queries is a few hundred microseconds of arithmetic
but several milliseconds of host work (Lightning's loop, hundreds of kernel launches, the optimizer's
launches). ``torch.compile(mode="reduce-overhead")`` graphs the loss's forward and backward only; here
the optimizer's update is inside the graph too, and ``RankerModule(step_graphs=True)`` takes several
such steps per Lightning batch (``data.steps_per_batch``), so the host's cost per optimizer step is a
copy of the batch into the graph's inputs and one replay.

The steps are the same steps, in the same order, as Lightning's automatic optimization takes (tested
on CPU, where :class:`StepRunner` runs them eagerly): zero the gradients, the loss, backward, the
optimizer's step. On CUDA the first ``warmup`` batches of each shape run eagerly on a side stream (the
capture needs the optimizer's state, the gradients and cuBLAS' workspaces to exist), the last of them
with CUDA's sync debug mode set to raise: a step that reads from the device (which a capture cannot
hold) is found there, and that shape keeps running eagerly (a warning says so), rather than failing
inside a capture, which would leave the CUDA random generator in capture mode. The next batch is
captured and then every batch of that shape is replayed.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

LossFn = Callable[[Tensor, Tensor, Tensor], Tensor]


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    inputs: tuple[Tensor, Tensor, Tensor]
    loss: Tensor


def make_capturable(optimizer: torch.optim.Optimizer) -> None:
    """Switch ``capturable`` on where the optimizer has it (Adam, AdamW, ...: their step counter then
    lives on the device, so a replayed graph advances it), before its first step. Optimizers with a
    host-side counter and no such option cannot be replayed: refused, naming the fix."""
    if "capturable" in optimizer.defaults:
        optimizer.defaults["capturable"] = True
        for group in optimizer.param_groups:
            group["capturable"] = True
        return
    if not isinstance(optimizer, torch.optim.SGD):
        raise ValueError(
            f"model.step_graphs on CUDA captures the optimizer's step; {type(optimizer).__name__} has no "
            "'capturable' option: use Adam, AdamW or SGD, or model.step_graphs=false"
        )


@contextlib.contextmanager
def _uncached_autocast(device_type: str) -> Iterator[None]:
    """Autocast as the caller has it (Lightning's bf16-mixed), without its cache of casted weights:
    several optimizer steps run inside one Lightning step, and a cached bf16 copy of a weight would
    outlive the update (and a graph would bake in the copy taken before the capture)."""
    if not torch.is_autocast_enabled(device_type):
        yield
        return
    dtype = torch.get_autocast_dtype(device_type)
    with torch.autocast(device_type, dtype=dtype, cache_enabled=False):
        yield


class StepRunner:
    """Takes optimizer steps on batches ``(features [B, L, F], labels [B, L], mask [B, L])``.

    Args:
        loss_fn: the training loss of a batch, a scalar tensor (``RankerModule._loss_of``).
        optimizer: the plain torch optimizer over ``params``.
        params: the parameters the loss trains (their gradients are zeroed before each step).
        graphs: capture and replay CUDA graphs when the batch is on CUDA; False: always eager.
        warmup: eager steps of each shape before its capture.
        max_graphs: shapes beyond this many run eagerly (each graph holds its own memory pool).
    """

    def __init__(
        self,
        loss_fn: LossFn,
        optimizer: torch.optim.Optimizer,
        params: list[Tensor],
        *,
        graphs: bool = True,
        warmup: int = 2,
        max_graphs: int = 8,
    ) -> None:
        self.loss_fn, self.optimizer, self.params = loss_fn, optimizer, params
        self.graphs_enabled, self.warmup, self.max_graphs = graphs, warmup, max_graphs
        self.graphs: dict[tuple, _Graph] = {}
        self.seen: dict[tuple, int] = {}
        self.eager_shapes: set[tuple] = set()  # shapes whose step reads from the device: eager from then on
        self.rates: list[float] | None = None  # the learning rates the graphs were captured with
        self.captures = self.replays = 0

    def step(self, features: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        """One optimizer step on the batch; returns its loss (a fresh tensor, no host sync)."""
        if not (self.graphs_enabled and features.is_cuda):
            return self._eager(features, labels, mask).detach()
        self._forget_stale_graphs()
        key = (tuple(features.shape), tuple(labels.shape), features.dtype, labels.dtype)
        entry = self.graphs.get(key)
        if entry is None and key not in self.eager_shapes:  # warm up, probe, capture
            seen = self.seen[key] = self.seen.get(key, 0) + 1
            if seen < self.warmup or len(self.graphs) >= self.max_graphs:
                return self._on_side_stream(features, labels, mask)
            if seen == self.warmup:
                return self._probe(key, features, labels, mask)
            entry = self._capture(key, features, labels, mask)
        if entry is None:  # a shape whose step reads from the device
            return self._eager(features, labels, mask).detach()
        for static, value in zip(entry.inputs, (features, labels, mask), strict=True):
            static.copy_(value)
        entry.graph.replay()
        self.replays += 1
        return entry.loss.clone()

    def _eager(self, features: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        # the same order as Lightning's automatic optimization: zero_grad, forward, backward, step
        self.optimizer.zero_grad(set_to_none=False)
        with _uncached_autocast(features.device.type):
            loss = self.loss_fn(features, labels, mask)
        loss.backward()
        self.optimizer.step()
        return loss

    def _on_side_stream(self, features: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        """An eager step on a side stream, as CUDA's capture wants its warm-up."""
        side = torch.cuda.Stream(device=features.device)
        side.wait_stream(torch.cuda.current_stream(features.device))
        try:
            with torch.cuda.stream(side):
                return self._eager(features, labels, mask).detach()
        finally:
            torch.cuda.current_stream(features.device).wait_stream(side)

    def _probe(self, key: tuple, features: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        """The last warm-up step, with synchronizing CUDA calls raising: the step a capture would hold."""
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            return self._on_side_stream(features, labels, mask)
        except RuntimeError as error:
            # raised before any update (the optimizer's step does not read back): take the step eagerly
            message = f"step_graphs: batch shape {key[0]} runs eagerly, its step reads from the device: {error}"
            warnings.warn(message, stacklevel=3)
            self.eager_shapes.add(key)
        finally:
            torch.cuda.set_sync_debug_mode(previous)
        return self._eager(features, labels, mask).detach()

    def _capture(self, key: tuple, features: Tensor, labels: Tensor, mask: Tensor) -> _Graph:
        inputs = (features.clone(), labels.clone(), mask.clone())
        for param in self.params:  # gradients shared by every graph: allocated outside the graphs' pools
            if param.grad is None:
                param.grad = torch.zeros_like(param)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                torch._foreach_zero_([param.grad for param in self.params])
                with _uncached_autocast("cuda"):
                    loss = self.loss_fn(*inputs)
                loss.backward()
                self.optimizer.step()
        except RuntimeError as error:  # what the probe could not see; CUDA's state is not to be trusted after it
            raise RuntimeError(
                f"model.step_graphs: the training step of batch shape {key[0]} cannot be captured as a CUDA "
                f"graph ({error}); train with model.step_graphs=false"
            ) from error
        self.rates = self.rates or self._current_rates()
        self.captures += 1
        entry = self.graphs[key] = _Graph(graph, inputs, loss.detach())
        return entry

    def _current_rates(self) -> list[float]:
        return [float(group["lr"]) for group in self.optimizer.param_groups]

    def _forget_stale_graphs(self) -> None:
        """A graph holds the learning rate it was captured with: after a change, capture again."""
        if self.rates is not None and self._current_rates() != self.rates:
            self.graphs.clear()
            self.rates = None
