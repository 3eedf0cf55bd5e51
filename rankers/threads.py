"""Torch's intra-op thread count for work made of many small ops (a RankBoost round, a forest's
traversal step, a GP's small solves, a perceptron step): splitting each op over threads costs more
than it saves, and on a machine whose cores are busy the threads' waits multiply the time (10x seen
for RankBoost, 15x for the forest's scoring, 30-100x for the label-ranking stream on 2 shared cores)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run the block with ``count`` torch threads, restored after; ``None`` leaves the count alone.

    Example:
        >>> before = torch.get_num_threads()
        >>> with torch_threads(1):
        ...     torch.get_num_threads()
        1
        >>> torch.get_num_threads() == before
        True
    """
    if count is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class CpuThreads:
    """LightningModule mixin: on CPU, every stage runs with ``hparams.cpu_threads`` torch threads
    (``None``: torch's own count), set in ``setup`` and restored in ``teardown``."""

    def setup(self, stage: str) -> None:
        count = self.hparams.cpu_threads
        if count is not None and self.trainer.strategy.root_device.type == "cpu":
            self._threads_before = torch.get_num_threads()
            torch.set_num_threads(count)

    def teardown(self, stage: str) -> None:
        previous = getattr(self, "_threads_before", None)
        if previous is not None:
            torch.set_num_threads(previous)
            self._threads_before = None
