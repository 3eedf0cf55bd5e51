"""ListNet (Cao, Qin, Liu, Tsai & Li, "Learning to Rank: From Pairwise Approach to Listwise Approach", ICML 2007)."""

from __future__ import annotations

import torch
from torch import Tensor

from losses._common import Reduction, as_float32, informative, no_autocast, reduce


def listnet_loss(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor | None = None,
    *,
    temperature: float = 1.0,
    reduction: Reduction = "mean",
) -> Tensor:
    """ListNet's top-one cross-entropy between the label and score distributions.

    With the top-one probability of Cao et al. (Definition 6 and Theorem 6, ``phi = exp``),
    ``P_s(j) = exp(s_j) / sum_k exp(s_k)``, the loss of a list is the cross entropy of section 4.2,

        ``L(y, s) = - sum_j P_y(j) log P_s(j)``,

    with ``P_y = softmax(labels / temperature)`` over the real documents of the list. This is
    allRank's ``listNet`` (without its epsilon) and PT-Ranking's ListNet.

    A list whose real labels are all equal (including empty and single-document lists) carries no
    ranking information and gives 0 with zero gradient. Memory ``O(B * L)``.

    Args:
        scores, labels: ``[B, L]``; mask: ``[B, L]`` bool, True for real documents.
        temperature: of the label softmax.
        reduction: ``"mean"`` over the B queries, ``"sum"``, or ``"none"`` (``[B]``).

    Returns:
        A scalar, or ``[B]``.

    Example:
        >>> import torch
        >>> listnet_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([[1.0, 0.0]]))  # log 2
        tensor(0.6931)
    """
    scores, labels, mask = as_float32(scores, labels, mask)
    with no_autocast(scores.device):
        keep = informative(labels, mask)
        real = mask & keep[:, None]
        # rows without a real document get finite logits, so nothing is NaN even where masked out
        logits = scores.masked_fill(~real, float("-inf")).masked_fill(~keep[:, None], 0.0)
        target = torch.softmax(
            (labels / temperature).masked_fill(~real, float("-inf")).masked_fill(~keep[:, None], 0.0), -1
        )
        log_p = torch.log_softmax(logits, -1)
        per_query = -(target * log_p).masked_fill(~real, 0.0).sum(-1)
    return reduce(per_query, reduction, scores.shape[0])
