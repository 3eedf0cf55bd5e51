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
