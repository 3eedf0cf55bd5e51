"""Shared plumbing of the losses: float32 inputs, padding, reductions, row chunking."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import torch
from torch import Tensor

from metrics.ranking import prepare

Reduction = Literal["mean", "sum", "none"]

# Elements of one [B, rows, L] pairwise block; bounds the memory of every pairwise loss.
PAIR_BLOCK_ELEMENTS = 1 << 18


def as_float32(scores: Tensor, labels: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Validate shapes, fill a missing mask, and zero padded scores and labels; ``[B, L]`` in and out.

    Scores stay attached to the graph (``.to`` and ``masked_fill`` are differentiable, and the
    gradient at padding is exactly 0), so gradients reach bf16 or fp16 scores of an autocast region
    while the loss math runs in float32; NaN or inf in padding never reaches a value or a gradient.
    """
    if scores.dim() != 2:
        raise ValueError(f"scores {tuple(scores.shape)} and labels {tuple(labels.shape)} must both be [B, L]")
    return prepare(scores, labels, mask, dtype=compute_dtype(scores))


def informative(labels: Tensor, mask: Tensor) -> Tensor:
    """``[B]`` bool: the list has two real documents with different labels (else it gives 0 loss).

    Args: labels, mask ``[B, L]`` (labels of padding already zeroed or anything: they are masked).
    """
    if labels.shape[-1] == 0:
        return mask.any(-1)
    high = labels.masked_fill(~mask, float("-inf")).amax(-1)
    low = labels.masked_fill(~mask, float("inf")).amin(-1)
    return high > low


def compute_dtype(scores: Tensor) -> torch.dtype:
    """float32 for half and bfloat16 (and integer) inputs, float64 kept for gradcheck."""
    return torch.float64 if scores.dtype == torch.float64 else torch.float32


def row_chunks(batch: int, rows: int, cols: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` row ranges such that each ``[batch, stop-start, cols]`` block stays small."""
    step = max(1, PAIR_BLOCK_ELEMENTS // max(1, batch * cols))
    for start in range(0, rows, step):
        yield start, min(rows, start + step)


def reduce(per_query: Tensor, reduction: Reduction, denominator: Tensor | int) -> Tensor:
    """Reduce per-query sums ``[B]``: ``"sum"``, ``"none"`` or ``"mean"`` (sum / denominator)."""
    if reduction == "none":
        return per_query
    total = per_query.sum()
    if reduction == "sum":
        return total
    if reduction == "mean":
        if isinstance(denominator, Tensor):
            return total / denominator.clamp_min(1).to(total.dtype)
        return total / max(1, denominator)
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def no_autocast(device: torch.device) -> torch.autocast:
    """Context that turns autocast off, so pairwise math stays float32 under bf16/fp16 runs."""
    return torch.autocast(device_type=device.type, enabled=False)
