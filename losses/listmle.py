"""ListMLE (Xia, Liu, Wang, Zhang & Li, "Listwise Approach to Learning to Rank: Theory and Algorithm", ICML 2008)."""

from __future__ import annotations

import torch
from torch import Tensor

from losses._common import Reduction, as_float32, informative, no_autocast, reduce


def label_order(scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
    """Permutation ``[B, L]``: labels descending, equal labels by descending score, then position; padding last.

    Equal labels ordered by the current scores give the most likely permutation consistent with the
    labels (deterministic, and the loss does not depend on the order of the input list).
    """
    order = torch.sort(scores.detach(), dim=-1, descending=True, stable=True).indices
    by_label = torch.sort(labels.gather(-1, order), dim=-1, descending=True, stable=True).indices
    order = order.gather(-1, by_label)
    real_first = torch.sort(mask.gather(-1, order).to(torch.int8), dim=-1, descending=True, stable=True).indices
    return order.gather(-1, real_first)


def listmle_loss(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor | None = None,
    *,
    reduction: Reduction = "mean",
) -> Tensor:
    """Negative log Plackett-Luce likelihood of the permutation given by the labels.

    Xia et al., the likelihood loss of ListMLE: for the permutation ``y`` that sorts the labels, with ``phi = exp``,

        ``L(s, y) = -log P(y | s) = sum_{i=1}^{n} ( log sum_{k=i}^{n} exp(s_{y(k)}) - s_{y(i)} )``.

    Equal labels are ordered by descending current score (``label_order``; allRank shuffles them at
    random instead). A list whose real labels are all equal carries no ranking information and gives
    0 with zero gradient. The suffix log-sum-exp is one ``logcumsumexp``: memory ``O(B * L)``.

    Args:
        scores, labels: ``[B, L]``; mask: ``[B, L]`` bool, True for real documents.
        reduction: ``"mean"`` over the B queries, ``"sum"``, or ``"none"`` (``[B]``).

    Returns:
        A scalar, or ``[B]``.

    Example:
        >>> import torch
        >>> listmle_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([[1.0, 0.0]]))  # log 2 + 0
        tensor(0.6931)
    """
    scores, labels, mask = as_float32(scores, labels, mask)
    with no_autocast(scores.device):
        keep = informative(labels, mask)
        order = label_order(scores, labels, mask)
        s, m = scores.gather(-1, order), mask.gather(-1, order) & keep[:, None]
        # Padding (last in the order) gets a score far below every real one: exp of the gap is 0 in
        # float64, so it adds nothing to the suffix sums, and unlike -inf it keeps gradients finite.
        floor = s.detach().masked_fill(~m, float("inf")).amin(-1, keepdim=True) if s.shape[-1] else s[:, :1]
        floor = torch.where(torch.isfinite(floor), floor, torch.zeros_like(floor)) - 1000.0
        s = torch.where(m, s, floor)
        suffix = torch.logcumsumexp(s.flip(-1), -1).flip(-1)
        per_query = (suffix - s).masked_fill(~m, 0.0).sum(-1)
    return reduce(per_query, reduction, scores.shape[0])
