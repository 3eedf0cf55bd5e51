"""Ranking math shared by the metrics and the losses: gains, discounts, ideal DCG, sorting, label checks.

This is public API: ``metrics.functional`` and every loss in ``losses/`` use these functions, so that
an NDCG metric and an NDCG-derived loss agree on every convention:

* ``gain="exp2"`` is ``2**rel - 1`` (Burges et al.), ``gain="linear"`` is ``rel``.
* The discount of 0-based position ``p`` is ``1 / log2(2 + p)`` (rank ``p + 1``).
* Ranking is by descending score, **ties broken by list position** (a stable sort), padding last.

Shapes: a batch is ``[B, L]`` (B queries, L documents) with ``mask [B, L]`` bool, True = real.

    >>> import torch
    >>> gains(torch.tensor([[0.0, 1.0, 3.0]]), "exp2")
    tensor([[0., 1., 7.]])
    >>> sort_by_scores(torch.tensor([[0.5, 2.0, 0.5]]), torch.tensor([[True, True, True]]))
    tensor([[1, 0, 2]])
    >>> ideal_dcg(torch.tensor([[0.0, 1.0]]), torch.tensor([[True, True]]), gain="linear")
    tensor([1.])
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

Gain = Literal["exp2", "linear"]

# 2**128 overflows float32, so exp2 gains need labels below this (the largest float32 is ~2**128).
EXP2_LABEL_LIMIT = 128.0

__all__ = [
    "EXP2_LABEL_LIMIT",
    "Gain",
    "check_labels",
    "discounts",
    "gains",
    "ideal_dcg",
    "prepare",
    "ranks_of",
    "sort_by_scores",
]


def prepare(
    scores: Tensor, labels: Tensor, mask: Tensor | None, *, dtype: torch.dtype = torch.float32
) -> tuple[Tensor, Tensor, Tensor]:
    """Validate ``[B, L]`` shapes (any leading dims), build a missing mask, cast, and neutralize padding.

    Padded scores and labels are replaced by 0 with ``masked_fill`` (differentiable: the gradient at
    padding is exactly 0), so NaN or inf in padding never reaches a value or a gradient.

    Args:
        scores, labels: ``[B, L]``.
        mask: ``[B, L]`` bool or None (all real).
        dtype: the compute dtype.

    Returns:
        ``scores [B, L] dtype``, ``labels [B, L] dtype`` and ``mask [B, L] bool``.
    """
    if scores.dim() < 1 or scores.shape != labels.shape:
        raise ValueError(f"scores {tuple(scores.shape)} and labels {tuple(labels.shape)} must both be [B, L]")
    if mask is None:
        mask = torch.ones_like(labels, dtype=torch.bool)
    elif mask.shape != labels.shape:
        raise ValueError(f"mask {tuple(mask.shape)} and labels {tuple(labels.shape)} differ")
    mask = mask.bool()
    return scores.to(dtype).masked_fill(~mask, 0.0), labels.to(dtype).masked_fill(~mask, 0.0), mask


def check_labels(labels: Tensor, gain: Gain, mask: Tensor | None = None) -> None:
    """Refuse labels whose gain is not a finite float32: NaN/inf, or ``>= 128`` with ``gain="exp2"``.

    Only real documents are checked (``mask``); padding may hold anything. On CPU a bad label raises a
    ``ValueError`` naming it and the gain. On an accelerator the check is ``torch._assert_async`` (no
    host sync; the error surfaces at the next synchronization), and it is skipped while
    ``torch.compile`` traces.

    Args:
        labels: any shape, e.g. ``[B, L]``.
        gain: ``"exp2"`` or ``"linear"``.
        mask: same shape as ``labels``, True for the entries to check; None checks all.
    """
    if gain not in ("exp2", "linear"):
        raise ValueError(f"gain must be 'exp2' or 'linear', got {gain!r}")
    if torch.compiler.is_compiling() or labels.numel() == 0:
        return
    real = labels if mask is None else labels.masked_fill(~mask.bool(), 0.0)
    bad = ~(real < EXP2_LABEL_LIMIT) if gain == "exp2" else torch.zeros_like(real, dtype=torch.bool)
    bad = bad | ~torch.isfinite(real)
    what = (
        f"labels must be finite and < {EXP2_LABEL_LIMIT:g} with gain='exp2' (2**label overflows float32); "
        "use gain='linear' for larger grades"
        if gain == "exp2"
        else "labels must be finite with gain='linear'"
    )
    if real.device.type == "cpu":
        if bool(bad.any()):
            label = real[bad].flatten()[0].item()
            raise ValueError(f"label {label} is invalid for gain={gain!r}: {what}")
    else:
        torch._assert_async(~bad.any(), what)


def gains(labels: Tensor, gain: Gain, *, check: bool = True) -> Tensor:
    """Gain of each label: ``2**rel - 1`` (``"exp2"``) or ``rel`` (``"linear"``); same shape.

    Callers zero the labels of padding first (``prepare``), so that only real labels are checked
    (``check_labels``); ``check=False`` skips the check for labels already checked.
    """
    if check:
        check_labels(labels, gain)
    if gain == "exp2":
        return torch.exp2(labels) - 1.0
    return labels


def discounts(length: int, device: torch.device | None = None, dtype: torch.dtype = torch.float32) -> Tensor:
    """``1 / log2(2 + position)`` for 0-based positions, ``[length]``."""
    positions = torch.arange(length, device=device, dtype=dtype)
    return 1.0 / torch.log2(positions + 2.0)


def sort_by_scores(scores: Tensor, mask: Tensor) -> Tensor:
    """Ranking permutation ``[B, L]``: descending score, ties by position, padding last.

    Two stable sorts: by score, then by the mask, so that a real document scored ``-inf`` (or NaN)
    still ranks before padding, whatever the padding holds.
    """
    order = torch.sort(scores.detach(), dim=-1, descending=True, stable=True).indices
    real_first = torch.sort(mask.gather(-1, order).to(torch.int8), dim=-1, descending=True, stable=True)
    return order.gather(-1, real_first.indices)


def ranks_of(scores: Tensor, mask: Tensor) -> Tensor:
    """0-based rank ``[B, L]`` of each document under ``sort_by_scores``, in list order."""
    order = sort_by_scores(scores, mask)
    arange = torch.arange(order.shape[-1], device=order.device).expand_as(order)
    return torch.empty_like(order).scatter_(-1, order, arange)


def ideal_dcg(labels: Tensor, mask: Tensor | None = None, *, k: int | None = None, gain: Gain = "exp2") -> Tensor:
    """DCG at ``k`` of the best ordering of each list (``k=None``: the whole list).

    Args: labels ``[B, L]``; mask ``[B, L]`` bool (padding never counts, whatever it holds).
    Returns ``[B]`` in the labels' floating dtype (float32 for integer labels).
    """
    dtype = labels.dtype if labels.is_floating_point() and labels.dtype != torch.float16 else torch.float32
    if labels.dtype == torch.bfloat16:
        dtype = torch.float32
    if mask is None:
        mask = torch.ones_like(labels, dtype=torch.bool)
    mask = mask.bool()
    labels = labels.to(dtype).masked_fill(~mask, 0.0)
    ideal_order = sort_by_scores(labels, mask)
    ranked = labels.gather(-1, ideal_order)
    weights = discounts(labels.shape[-1], labels.device, dtype)
    if k is not None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        weights = weights * (torch.arange(labels.shape[-1], device=labels.device) < k)
    return (gains(ranked, gain) * weights * mask.gather(-1, ideal_order)).sum(-1)
