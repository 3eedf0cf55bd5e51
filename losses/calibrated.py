"""The calibrated constraint loss of calibrated label ranking (Brinker & Huellermeier, NIPS'05 workshop).

Section 2 turns a calibrated ranking example ``(x, R, P, N)`` into binary constraints on the label
scores ``s_i = <w_i, x>`` of Definition 2.1, with the calibration label 0 scored ``s_0 = 0``:

* ``s_r > s_s`` for every preference ``(r, s) in R U (P x N)``;
* ``s_r > 0`` for ``r in P`` and ``s_r < 0`` for ``r in N`` (the zero point: these make the cut
  ``score > 0`` meaningful).

Here the constraints are read from graded labels (0 = not relevant, larger = preferred): ``(r, s)``
is a preference when ``label_r > label_s``. This loss replaces each constraint's 0/1 violation by a
convex surrogate of its margin so that a gradient-trained scorer (linear or an MLP with d outputs)
can minimize it; the online learner of Algorithm 1 counts the same constraints.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from losses._common import Reduction

Surrogate = Literal["logistic", "hinge", "squared_hinge"]
Pairs = Literal["all", "adjacent"]


def preference_pairs(labels: Tensor, mask: Tensor, *, pairs: Pairs = "all") -> Tensor:
    """The preference constraints ``(r, s)`` of each instance, ``[B, d, d]`` bool.

    ``"all"``: every pair with ``label_r > label_s`` (R'(y) U P x N); ``"adjacent"``: only pairs of
    adjacent grades (Har-Peled et al.'s R(y); P x N reduces to the lowest relevant grade x N, the
    paper's reduction for top-label ranking). For multilabel 0/1 labels both are P x N.

    Example:
        >>> everything = torch.ones(1, 3, dtype=torch.bool)
        >>> preference_pairs(torch.tensor([[2.0, 0.0, 1.0]]), everything, pairs="adjacent")[0].int()
        tensor([[0, 0, 1],
                [0, 0, 0],
                [0, 1, 0]], dtype=torch.int32)
    """
    pair_mask = mask[:, :, None] & mask[:, None, :]
    above = (labels[:, :, None] > labels[:, None, :]) & pair_mask
    if pairs == "all":
        return above
    if pairs != "adjacent":
        raise ValueError(f"pairs must be 'all' or 'adjacent', got {pairs!r}")
    # a grade strictly between label_s and label_r makes (r, s) non-adjacent
    between = (labels[:, None, None, :] < labels[:, :, None, None]) & (
        labels[:, None, None, :] > labels[:, None, :, None]
    )
    return above & ~(between & mask[:, None, None, :]).any(-1)


def calibration_signs(labels: Tensor, mask: Tensor, *, pairs: Pairs = "all") -> Tensor:
    """``[B, d]``: +1 where ``s_r > 0`` is required (r in P), -1 where ``s_r < 0`` is (r in N), 0 none.

    With ``pairs="adjacent"`` only the lowest-graded relevant labels keep their ``s_r > 0``
    constraint (the others are above them by the pair constraints).
    """
    relevant = (labels > 0) & mask
    signs = relevant.float() - (mask & ~relevant).float()
    if pairs == "adjacent":
        lowest = torch.where(relevant, labels, torch.full_like(labels, torch.inf)).amin(1, keepdim=True)
        signs = torch.where(relevant & (labels > lowest), torch.zeros_like(signs), signs)
    return signs


def _surrogate(margin_value: Tensor, surrogate: Surrogate, margin: float) -> Tensor:
    """Cost of a constraint ``z > 0`` given ``z``: logistic ``log(1 + e^(margin - z))`` (margin 0 by
    default is plain logistic), hinge ``max(0, margin - z)``, squared hinge."""
    if surrogate == "logistic":
        return F.softplus(margin - margin_value)
    if surrogate == "hinge":
        return (margin - margin_value).clamp_min(0)
    if surrogate == "squared_hinge":
        return (margin - margin_value).clamp_min(0).square()
    raise ValueError(f"surrogate must be logistic, hinge or squared_hinge, got {surrogate!r}")


def calibrated_ranking_loss(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor | None = None,
    *,
    surrogate: Surrogate = "logistic",
    margin: float = 0.0,
    pairs: Pairs = "all",
    calibration: float = 1.0,
    reduction: Reduction = "mean",
) -> Tensor:
    """Surrogate of the violated calibrated constraints, per instance
    ``mean_{(r,s)} phi(s_r - s_s) + calibration * mean_r phi(sign_r * s_r)``.

    The first mean runs over the instance's preference pairs (``preference_pairs``), the second over
    its calibration constraints (``calibration_signs``: every label for multilabel data); an instance
    without pairs (all labels relevant, or none) contributes only its calibration term. With
    ``calibration`` alone (pairs weighted 0) this is binary relevance's per-label loss, so the pair
    term is what the ranking adds.

    Args:
        scores: ``[B, d]`` label scores (the calibration label's score is 0, implicit).
        labels: ``[B, d]`` grades (0 = not relevant; larger = preferred).
        mask: ``[B, d]`` bool, True = a label that exists (None: all). Padded entries may hold
            anything (NaN, inf): they reach no value and no gradient.
        surrogate: ``"logistic"`` (default), ``"hinge"`` or ``"squared_hinge"``.
        margin: the margin inside the surrogate (logistic: shifts it; hinge: 1 is the usual).
        pairs: ``"all"`` or ``"adjacent"`` (see ``preference_pairs``).
        calibration: weight of the zero-point constraints.
        reduction: ``"mean"`` over instances (those with at least one label), ``"sum"`` or ``"none"`` (``[B]``).

    Returns: a scalar, or ``[B]`` with ``reduction="none"``; finite, 0 for an all-masked batch.

    Example:
        >>> scores = torch.tensor([[2.0, -1.0, 0.5]], requires_grad=True)
        >>> labels = torch.tensor([[1.0, 0.0, 0.0]])
        >>> loss = calibrated_ranking_loss(scores, labels, surrogate="hinge", margin=1.0)
        >>> round(loss.item(), 4)  # pairs hold with margin; label 2 costs 1 + 0.5, over 3 labels
        0.5
    """
    if mask is None:
        mask = torch.ones_like(labels, dtype=torch.bool)
    mask = mask.bool()
    # at least float32 (half and bfloat16 under autocast are promoted), float64 kept
    dtype = torch.promote_types(scores.dtype, torch.float32)
    scores = torch.where(mask, scores.to(dtype), torch.zeros((), dtype=dtype, device=scores.device))
    labels = torch.where(mask, labels.to(dtype), torch.zeros((), dtype=dtype, device=labels.device))
    constraint = preference_pairs(labels, mask, pairs=pairs)
    gaps = scores[:, :, None] - scores[:, None, :]
    pair_cost = torch.where(constraint, _surrogate(gaps, surrogate, margin), torch.zeros_like(gaps))
    n_pairs = constraint.sum((1, 2))
    pair_term = pair_cost.sum((1, 2)) / n_pairs.clamp_min(1)
    signs = calibration_signs(labels, mask, pairs=pairs).to(dtype)
    zero_cost = torch.where(signs != 0, _surrogate(signs * scores, surrogate, margin), torch.zeros_like(scores))
    zero_term = zero_cost.sum(1) / (signs != 0).sum(1).clamp_min(1)
    per_instance = pair_term + calibration * zero_term
    if reduction == "none":
        return per_instance
    if reduction == "sum":
        return per_instance.sum()
    if reduction != "mean":
        raise ValueError(f"reduction must be mean, sum or none, got {reduction!r}")
    present = mask.any(1)
    return per_instance.sum() / present.sum().clamp_min(1)
