"""Inverse-propensity-weighted click losses (Joachims, Swaminathan & Schnabel, "Unbiased
Learning-to-Rank with Biased Feedback", WSDM 2017; the listwise softmax form of Ai et al., SIGIR 2018).

A click on a document examined with probability ``theta`` counts ``1 / max(theta, clip)``: in
expectation over examination the weighted clicks are the relevance a full-information user would
have clicked, so a loss linear in them is unbiased (clipping trades a little bias for variance).
``clicks`` may be counts or already weighted click mass (``propensities=None``), which is how the
unbiased ranker feeds aggregated logs.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from losses._common import Reduction, as_float32, no_autocast, reduce


def ips_weights(clicks: Tensor, propensities: Tensor | None = None, *, clip: float | None = None) -> Tensor:
    """``clicks / max(propensities, clip)``, ``[B, L]`` (propensities None: the clicks themselves)."""
    if propensities is None:
        return clicks
    floor = clip if clip is not None else torch.finfo(clicks.dtype).tiny
    return clicks / propensities.to(clicks.dtype).clamp_min(floor)


ESTIMATORS = ("per_click", "per_document")


def ips_click_mass(
    clicks: Tensor,
    impressions: Tensor,
    propensities: Tensor,
    *,
    clip: float = 0.0,
    estimator: str = "per_click",
) -> Tensor:
    """Each document's inverse-propensity-weighted click mass from counts per position, ``[B, L]``.

    Both estimate ``gamma_d * N_d`` (the document's relevance times the ``N_d = sum_k n_dk`` times it
    was shown), with ``theta_k`` floored at ``clip``:

    * ``per_click`` (Joachims et al. 2017): ``sum_k c_dk / theta_k``, unbiased; a single click where
      examination is rare counts ``1 / theta_k`` on its own;
    * ``per_document``: ``N_d * min(1, sum_k c_dk / sum_k n_dk theta_k)``, the ratio of the document's
      clicks to its expected examinations (consistent, the relevance capped at 1): a document's
      clicks are pooled over all its positions, so a stray click at a deep position moves the mass
      of a document also shown near the top by about 1, not ``1 / theta_k``.

    Args:
        clicks, impressions: ``[B, L, K]`` counts per position; propensities: ``[K]`` (position 1 = 1);
        clip: floor on the propensities; estimator: ``per_click`` or ``per_document``.

    Example:
        >>> import torch
        >>> clicks, shown = torch.tensor([[[3.0, 1.0]]]), torch.tensor([[[10.0, 10.0]]])
        >>> theta = torch.tensor([1.0, 0.1])
        >>> ips_click_mass(clicks, shown, theta), ips_click_mass(clicks, shown, theta, estimator="per_document")
        (tensor([[13.]]), tensor([[7.2727]]))
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    floor = max(clip, torch.finfo(clicks.dtype).tiny)
    if estimator == "per_click":
        return ips_weights(clicks, propensities, clip=floor).sum(-1)
    examined = (impressions * propensities.to(clicks.dtype).clamp_min(floor)).sum(-1)
    rate = (clicks.sum(-1) / examined.clamp_min(torch.finfo(clicks.dtype).tiny)).clamp_max(1.0)
    return rate * impressions.sum(-1)


def _weights(scores: Tensor, clicks: Tensor, mask: Tensor | None, propensities: Tensor | None, clip: float | None):
    scores, clicks, mask = as_float32(scores, clicks, mask)
    if propensities is not None:
        propensities = propensities.to(scores.dtype).masked_fill(~mask, 1.0)
    return scores, ips_weights(clicks, propensities, clip=clip).masked_fill(~mask, 0.0), mask


def ips_listwise_loss(
    scores: Tensor,
    clicks: Tensor,
    mask: Tensor | None = None,
    *,
    propensities: Tensor | None = None,
    clip: float | None = None,
    reduction: Reduction = "mean",
) -> Tensor:
    """IPS-weighted softmax cross-entropy: ``-sum_d w_d log softmax(s)_d / sum_d w_d`` per list.

    Args:
        scores: ``[B, L]``; clicks: ``[B, L]`` click counts (or weighted click mass), >= 0;
        mask: ``[B, L]`` bool, True for real documents;
        propensities: ``[B, L]`` examination probability of each click's position (None: 1);
        clip: floor on the propensities (bounds the weights at ``1 / clip``);
        reduction: ``"mean"`` over lists with a click and two documents, ``"sum"``, ``"none"`` (``[B]``).

    Lists without a click or with fewer than two documents give 0 with zero gradient.

    Example:
        >>> import torch
        >>> ips_listwise_loss(torch.zeros(1, 2), torch.tensor([[1.0, 0.0]]), propensities=torch.tensor([[0.5, 1.0]]))
        tensor(0.6931)
    """
    scores, w, mask = _weights(scores, clicks, mask, propensities, clip)
    with no_autocast(scores.device):
        total = w.sum(-1)
        keep = (total > 0) & (mask.sum(-1) > 1)
        logits = scores.masked_fill(~mask, float("-inf")).masked_fill(~keep[:, None], 0.0)
        log_p = torch.log_softmax(logits, -1).masked_fill(~mask | ~keep[:, None], 0.0)
        per_query = -(w * log_p).sum(-1) / total.clamp_min(torch.finfo(total.dtype).tiny)
        per_query = per_query.masked_fill(~keep, 0.0)
    return reduce(per_query, reduction, keep.sum())


def ips_pairwise_loss(
    scores: Tensor,
    clicks: Tensor,
    mask: Tensor | None = None,
    *,
    propensities: Tensor | None = None,
    clip: float | None = None,
    sigma: float = 1.0,
    reduction: Reduction = "mean",
) -> Tensor:
    """Propensity-weighted pairwise logistic loss (Joachims et al. 2017's propensity SVM-rank with
    RankNet's logistic): each clicked document ``i`` against every other document ``j`` of its list,
    ``w_i * log(1 + exp(-sigma (s_i - s_j)))``, normalized per list by ``sum_i w_i (n - 1)``.

    Args and the empty-list rule as ``ips_listwise_loss``; ``sigma``: slope of the logistic.
    Memory ``O(B L^2)``.

    Example:
        >>> import torch
        >>> ips_pairwise_loss(torch.zeros(1, 2), torch.tensor([[1.0, 0.0]]))  # log 2
        tensor(0.6931)
    """
    scores, w, mask = _weights(scores, clicks, mask, propensities, clip)
    with no_autocast(scores.device):
        pairs = mask[:, :, None] & mask[:, None, :] & ~torch.eye(mask.shape[-1], dtype=torch.bool, device=mask.device)
        gap = (scores[:, :, None] - scores[:, None, :]).masked_fill(~pairs, 0.0)
        cost = F.softplus(-sigma * gap).masked_fill(~pairs, 0.0)
        per_query = (w[:, :, None] * cost).sum((-1, -2))
        norm = (w * (mask.sum(-1, keepdim=True) - 1).to(w.dtype)).sum(-1)
        keep = norm > 0
        per_query = (per_query / norm.clamp_min(torch.finfo(norm.dtype).tiny)).masked_fill(~keep, 0.0)
    return reduce(per_query, reduction, keep.sum())
