"""Shared plumbing of the pairwise losses: float32 inputs, reductions, row chunking."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import torch
from torch import Tensor

Reduction = Literal["mean", "sum", "none"]

# Elements of one [B, rows, L] pairwise block; bounds the memory of every pairwise loss.
PAIR_BLOCK_ELEMENTS = 1 << 18


def as_float32(scores: Tensor, labels: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Validate shapes, fill a missing mask and zero padded labels; ``[B, L]`` in and out.

    Scores stay attached to the graph (``.float()`` is differentiable), so gradients reach bf16 or
    fp16 scores of an autocast region while the loss math runs in float32.
    """
    if scores.dim() != 2 or scores.shape != labels.shape:
        raise ValueError(f"scores {tuple(scores.shape)} and labels {tuple(labels.shape)} must both be [B, L]")
    if mask is None:
        mask = torch.ones_like(labels, dtype=torch.bool)
    elif mask.shape != labels.shape:
        raise ValueError(f"mask {tuple(mask.shape)} and labels {tuple(labels.shape)} differ")
    mask = mask.bool()
    dtype = compute_dtype(scores)
    return scores.to(dtype), labels.to(dtype).masked_fill(~mask, 0.0), mask


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
