"""NeuralNDCG (Pobrotyn & Bialobrzeski, "NeuralNDCG: Direct Optimisation of a Ranking Metric via
Differentiable Relaxation of Sorting", arXiv:2102.07831, 2021), built on NeuralSort (Grover, Wang, Zweig &
Ermon, "Stochastic Optimization of Sorting Networks via Continuous Relaxations", ICLR 2019)."""

from __future__ import annotations

import torch
from torch import Tensor

from losses._common import Reduction, as_float32, informative, no_autocast, reduce
from metrics.ranking import Gain, discounts, gains, ideal_dcg


def neural_sort(scores: Tensor, mask: Tensor, *, temperature: float = 1.0, rows: int | None = None) -> Tensor:
    """NeuralSort's relaxed permutation matrix (Grover et al., eq. 5, Corollary 3), ``[B, rows, L]``.

    Row ``i`` (0-based rank) is ``softmax(((n - 1 - 2 i) s - A_s 1) / tau)`` over the ``n`` real
    documents of the list, with ``A_s 1`` the vector ``sum_j |s_k - s_j|``; padded columns get 0 and
    rows ``i >= n`` are 0. ``rows`` keeps only the first rows (the top of the ranking): memory
    ``O(B * rows * L)``.

    Args: scores, mask ``[B, L]`` (padding neutralized); temperature ``tau``; rows (default L).
    """
    length = scores.shape[1]
    rows = length if rows is None else min(rows, length)
    n = mask.sum(-1, keepdim=True).to(scores.dtype)  # [B, 1]
    spread = absolute_spread(scores, mask)  # A_s 1, [B, L]
    rank = torch.arange(rows, device=scores.device, dtype=scores.dtype)
    scale = n[:, :, None] - 1.0 - 2.0 * rank[None, :, None]  # [B, rows, 1]
    logits = (scale * scores[:, None, :] - spread[:, None, :]) / temperature
    valid = mask[:, None, :] & (rank[None, :, None] < n[:, :, None])  # real column, real rank
    # rows with no valid entry get finite logits, so softmax stays finite where it is masked out
    logits = torch.where(valid, logits, torch.where(valid.any(-1, keepdim=True), float("-inf"), 0.0))
    return torch.softmax(logits, -1) * valid


def absolute_spread(scores: Tensor, mask: Tensor) -> Tensor:
    """``sum_j |s_i - s_j|`` over the real documents ``j`` of each list, ``[B, L]`` (0 for padding).

    From the sorted scores instead of the ``[B, L, L]`` differences: the document at 0-based sorted
    position ``p`` of ``n`` has ``p`` documents below it and ``n - 1 - p`` above, so its sum is
    ``s (2p + 1 - n) - S_below + S_above`` with prefix sums ``S``. Memory ``O(B * L)``, time
    ``O(B * L log L)``; the value equals the pairwise sum (ties contribute 0 either way).
    """
    real = mask.to(scores.dtype)
    ordered, order = torch.where(mask, scores, torch.inf).sort(-1)  # padding sorts last
    ordered = torch.where(torch.isfinite(ordered), ordered, torch.zeros_like(ordered))
    through = ordered.cumsum(-1)  # S up to and including position p
    position = torch.arange(scores.shape[1], device=scores.device, dtype=scores.dtype)
    n = real.sum(-1, keepdim=True)
    below, above = through - ordered, through[:, -1:] - through
    per_position = ordered * (2.0 * position + 1.0 - n) - below + above
    return torch.zeros_like(scores).scatter(-1, order, per_position) * real


def sinkhorn(matrix: Tensor, *, iterations: int) -> Tensor:
    """Sinkhorn scaling of ``[B, L, L]`` (rank x document) towards a doubly stochastic matrix on the real block.

    A fixed number of alternating column and row normalizations (no data-dependent stopping, so no
    host sync). Rows and columns of padding are 0 and stay 0. Args: matrix ``[B, L, L]``.
    Returns ``[B, L, L]``.
    """
    for _ in range(iterations):
        for dim in (1, 2):
            total = matrix.sum(dim, keepdim=True)
            # an all-zero row or column (padding) divides by 1: a tiny divisor would blow up its gradient
            matrix = matrix / torch.where(total > 0, total, torch.ones_like(total))
    return matrix


def neural_ndcg_loss(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor | None = None,
    *,
    temperature: float = 1.0,
    k: int | None = None,
    gain: Gain = "exp2",
    sinkhorn_iterations: int = 50,
    reduction: Reduction = "mean",
) -> Tensor:
    """``1 - NeuralNDCG@k``: NDCG with the sort replaced by NeuralSort's relaxed permutation.

    Pobrotyn & Bialobrzeski, section 4 (NeuralNDCG@k): with ``P_hat`` the NeuralSort matrix,
    Sinkhorn-scaled to be doubly stochastic,

        ``NeuralNDCG@k = 1/IDCG@k sum_{i=1}^{k} (P_hat g)_i d_i``,  ``d_i = 1 / log2(1 + i)``,

    where ``g`` are the gains of the labels: row i of ``P_hat g`` is the (soft) gain at rank i. This is
    allRank's ``neuralNDCG`` (deterministic variant), which stops Sinkhorn at a tolerance; here the
    iteration count is fixed. A list whose real labels are all equal gives 0 with zero gradient.

    Memory: Sinkhorn needs the whole ``[B, L, L]`` matrix; with ``sinkhorn_iterations=0`` and ``k``
    only the top ``k`` rows are built, ``O(B * k * L)`` (NeuralSort's ``A_s 1`` comes from sorted
    prefix sums, ``absolute_spread``, not from the ``[B, L, L]`` differences).

    Args:
        scores, labels: ``[B, L]``; mask: ``[B, L]`` bool, True for real documents.
        temperature: NeuralSort's ``tau`` (smaller is closer to the hard sort).
        k: NDCG cut-off (None: the whole list).
        gain: ``"exp2"`` or ``"linear"``.
        sinkhorn_iterations: Sinkhorn scaling steps (0: the row-stochastic NeuralSort matrix).
        reduction: ``"mean"`` over the B queries, ``"sum"``, or ``"none"`` (``[B]``).

    Returns:
        A scalar, or ``[B]``.

    Example:
        >>> import torch
        >>> round(neural_ndcg_loss(torch.tensor([[10.0, -10.0]]), torch.tensor([[1.0, 0.0]])).item(), 4)
        0.0
    """
    scores, labels, mask = as_float32(scores, labels, mask)
    length = scores.shape[1]
    with no_autocast(scores.device):
        keep = informative(labels, mask)
        ideal = ideal_dcg(labels, mask, k=k, gain=gain).to(scores.dtype)
        keep = keep & (ideal > 0)
        top = length if k is None else min(k, length)
        if sinkhorn_iterations > 0:
            permutation = sinkhorn(neural_sort(scores, mask, temperature=temperature), iterations=sinkhorn_iterations)[
                :, :top
            ]
        else:
            permutation = neural_sort(scores, mask, temperature=temperature, rows=top)
        soft_gains = permutation @ (gains(labels, gain) * mask)[:, :, None]  # [B, top, 1]
        dcg = (soft_gains[..., 0] * discounts(top, scores.device, scores.dtype)).sum(-1)
        value = dcg / torch.where(keep, ideal, torch.ones_like(ideal))
        per_query = torch.where(keep, 1.0 - value, torch.zeros_like(value))
    return reduce(per_query, reduction, scores.shape[0])
