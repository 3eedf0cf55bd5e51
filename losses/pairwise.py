"""One pairwise scaffold: a pair function and a lambda weight (as rax's ``pairwise_loss``).

Every pairwise loss here (RankNet, LambdaRank, LambdaLoss, the NIPS'05 margin cost) is

    ``loss = sum_{pairs (i, j), label_i > label_j} w_ij * c(sigma * (s_i - s_j))``

with a *pair function* ``c`` (logistic, margin, ...) and a *lambda weight* ``w_ij`` (1 for RankNet,
|Delta NDCG| for LambdaRank, the LambdaLoss schemes). The scaffold owns what they share:

* pairs: each unordered pair of real documents with different labels is visited once (row ``i``,
  column ``j > i``); padding never counts, whatever it holds;
* memory: rows are processed in chunks so a block is ``[B, rows, L]`` (``_common.row_chunks``); a
  weight that vanishes for pairs with both documents below rank ``k`` visits only the top ``k`` rows
  of the ranking, so memory is ``O(B * k * L)``;
* gradients: the cost and its gradient w.r.t. the scores are computed together, without an autograd
  graph over pairs (a custom ``autograd.Function``), so the backward pass is one multiply;
* float32 math under autocast (float64 kept for gradcheck).

    >>> import torch
    >>> scores, labels = torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.0]])
    >>> pairwise_loss(scores, labels, pair_fn=logistic_pair, reduction="sum")  # softplus(1)
    tensor(1.3133)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from kernels import lambdarank_cpu, lambdarank_triton
from losses._common import Reduction, as_float32, no_autocast, reduce, row_chunks
from metrics.ranking import Gain, discounts, gains, ideal_dcg, sort_by_scores

# (x [B, r, L], target [B, r, L] or None) -> (cost, d cost / d x), both [B, r, L]. With target None,
# x = sigma * (s_i - s_j) is oriented so that document i should rank above document j. Both outputs must
# be new tensors (the scaffold updates them in place when no autograd graph is recorded).
PairFn = Callable[[Tensor, Tensor | None], tuple[Tensor, Tensor]]


@dataclass(frozen=True)
class PairBlock:
    """What a lambda weight may read about rows ``rows`` of the pair matrix (ranked order).

    Attributes:
        rows: ``[r]`` 0-based ranks of the block's rows; cols: ``[L]`` 0-based ranks of the columns.
        gains_row: ``[B, r]``, gains_col: ``[B, L]`` gains of the documents (0 for padding).
        inverse_ideal: ``[B]`` 1 / ideal DCG@k (0 where it is 0).
        discount: ``[L + 1]`` ``1 / log2(2 + p)`` for 0-based position ``p``.
        discount_k: ``[L + 1]`` the same, 0 at positions ``>= k``.
    """

    rows: Tensor
    cols: Tensor
    gains_row: Tensor
    gains_col: Tensor
    inverse_ideal: Tensor
    discount: Tensor
    discount_k: Tensor


LambdaWeightFn = Callable[[PairBlock], Tensor]


def logistic_pair(x: Tensor, target: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """RankNet's cross-entropy of a pair (Burges et al. 2005; eqs. 9-11 of Grangier & Bengio).

    Hard targets: ``c(x) = log(1 + exp(-x))``, ``c'(x) = -sigmoid(-x)``. Soft target probability
    ``p`` that i ranks above j: ``c(x) = p softplus(-x) + (1 - p) softplus(x)``, ``c'(x) = sigmoid(x) - p``.
    Shapes ``[B, r, L]`` in and out; exact for any score gap (softplus).
    """
    if target is None:
        minus_x = -x
        slope = torch.sigmoid(minus_x)
        # in place when no graph is recorded (the scaffold's forward): one pass less over the block
        return F.softplus(minus_x), slope.neg_() if not torch.is_grad_enabled() else -slope
    return target * F.softplus(-x) + (1.0 - target) * F.softplus(x), torch.sigmoid(x) - target


_LN2 = math.log(2.0)


def binary_logistic_pair(x: Tensor, target: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``-log2 sigmoid(x)`` and its derivative ``-sigmoid(-x) / ln 2`` (hard targets), ``[B, r, L]``:
    LambdaLoss's pair function (Wang et al. 2018 write the loss in base 2)."""
    if target is not None:
        raise ValueError("LambdaLoss takes hard targets only")
    return F.softplus(-x) / _LN2, -torch.sigmoid(-x) / _LN2


def margin_lambda_function(x: Tensor, delta: float) -> Tensor:
    """Burges NIPS'05 eqs. 4-6: 1 for ``x < 0``, ``delta - x`` on ``[0, delta]``, 0 beyond. Same shape as x."""
    return torch.where(x < 0, torch.ones_like(x), (delta - x).clamp_min(0.0))


def margin_pair_cost(x: Tensor, delta: float) -> Tensor:
    """Eqs. 7-9: ``-x`` for ``x < 0``, ``x^2/2 - delta x`` on ``[0, delta]``, ``-delta^2/2`` beyond."""
    inside = 0.5 * x.square() - delta * x
    return torch.where(x < 0, -x, torch.where(x <= delta, inside, torch.full_like(x, -0.5 * delta**2)))


def margin_pair(delta: float) -> PairFn:
    """The margin pair function of eqs. 4-9: cost eqs. 7-9, ``-c'(x)`` = the lambda of eqs. 4-6."""

    def pair_fn(x: Tensor, target: Tensor | None = None) -> tuple[Tensor, Tensor]:
        if target is not None:
            raise ValueError("the margin cost takes hard targets only")
        return margin_pair_cost(x, delta), -margin_lambda_function(x, delta)

    return pair_fn


def delta_ndcg_weight(block: PairBlock) -> Tensor:
    """LambdaRank's ``|Delta NDCG@k_ij| = |g_i - g_j| |d_i - d_j| / IDCG@k`` (ranks by score), ``[B, r, L]``."""
    gap = (block.gains_row[:, :, None] - block.gains_col[:, None, :]).abs()
    d = block.discount_k
    return gap * (d[block.rows][:, None] - d[block.cols][None, :]).abs() * block.inverse_ideal[:, None, None]


def unit_weight(block: PairBlock) -> Tensor:
    """``w_ij = 1``: every pair counts alike, taken in the ranking by score, so that ``k`` can cut
    the pairs to those with a document in the top ``k`` (the margin cost's top-k bound)."""
    return block.gains_col.new_ones(())


def ndcg_loss2_weight(block: PairBlock) -> Tensor:
    """LambdaLoss NDCG-Loss2 (Wang et al. 2018): ``delta_ij |G_i - G_j|``, ``[B, r, L]``.

    ``delta_ij = |1/D_{|i-j|} - 1/D_{|i-j|+1}|`` with ``D_n = log2(1 + n)`` and i, j the ranks by
    score; ``G = gain / IDCG``.
    """
    gap = (block.cols[None, :] - block.rows[:, None]).abs().clamp_min(1)  # |i - j| >= 1 off the diagonal
    d = block.discount  # d[n - 1] = 1 / log2(1 + n)
    delta = (d[gap - 1] - d[gap]).abs()
    gain_gap = (block.gains_row[:, :, None] - block.gains_col[:, None, :]).abs()
    return delta * gain_gap * block.inverse_ideal[:, None, None]


def ndcg_loss2pp_weight(mu: float) -> LambdaWeightFn:
    """LambdaLoss NDCG-Loss2++ (Wang et al. 2018): ``(rho_ij + mu delta_ij) |G_i - G_j|``.

    ``rho_ij |G_i - G_j|`` is LambdaRank's ``|Delta NDCG|`` (``delta_ndcg_weight``).
    """

    def weight(block: PairBlock) -> Tensor:
        return delta_ndcg_weight(block) + mu * ndcg_loss2_weight(block)

    weight.mu = mu  # read by the fused kernels' dispatch
    return weight


def pairwise_sums(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor,
    *,
    pair_fn: PairFn,
    lambdaweight_fn: LambdaWeightFn | None = None,
    sigma: float = 1.0,
    k: int | None = None,
    gain: Gain = "exp2",
    targets: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-query cost ``[B]``, its gradient w.r.t. ``scores`` ``[B, L]`` and pair counts ``[B]``.

    Plain torch ops: run it under ``no_grad`` for speed, or with autograd to differentiate the
    gradient itself (the margin Jacobian, eq. 11). Inputs are float ``[B, L]`` with padding already
    neutralized (``as_float32``).

    Without ``lambdaweight_fn`` the pairs are taken in list order and ``k`` is ignored. With it, they
    are taken in the ranking by score (ties by position), and with ``k`` only pairs with a document
    in the top ``k`` are visited. ``targets`` (soft ``p_ij``, ``[B, L, L]``, list order) makes every
    real pair ``i < j`` count once, whatever the labels.
    """
    batch, length = scores.shape
    ranked = lambdaweight_fn is not None
    if ranked and k is not None and k < 1:  # checked here: the fused kernels never reach ideal_dcg's check
        raise ValueError(f"k must be >= 1, got {k}")
    if targets is None:
        fused = _fused_sums(scores, labels, mask, pair_fn, lambdaweight_fn, sigma=sigma, k=k, gain=gain)
        if fused is not None:
            return fused
    if ranked:
        if targets is not None:
            raise ValueError("soft targets are not supported with a lambda weight")
        ranking = _Ranking.of(scores, labels, mask, k=k, gain=gain)
        order, s, y, m, top = ranking.order, ranking.scores, ranking.labels, ranking.mask, ranking.top
        discount, discount_k = ranking.discount, ranking.discount_k
        gain_sorted, inverse_ideal = ranking.gains, ranking.inverse_ideal
    else:
        s, y, m, top = scores, labels, mask, length

    cost = s.new_zeros(batch)
    count = s.new_zeros(batch)
    grad = torch.zeros_like(s)
    cols = torch.arange(length, device=scores.device)
    if not ranked and targets is None:
        # Every ordered pair with label_i > label_j is visited once, in its favourable orientation.
        # Padding holds -inf as the better side and +inf as the worse side, so one comparison gives
        # the valid pairs (cheaper than combining three boolean masks).
        better = y.masked_fill(~m, float("-inf"))
        worse = y.masked_fill(~m, float("inf"))
    for start, stop in row_chunks(batch, top, length):
        diff = s[:, start:stop, None] - s[:, None, :]
        if not ranked and targets is None:
            weight = (better[:, start:stop, None] > worse[:, None, :]).to(s.dtype)
            value, slope = pair_fn(diff * sigma if sigma != 1.0 else diff, None)
            slope_sign = sigma
        else:
            rows = torch.arange(start, stop, device=scores.device)
            pair = (cols[None, :] > rows[:, None]) & m[:, start:stop, None] & m[:, None, :]  # each pair once
            if targets is None:
                # +1 when the row document is the more relevant one (x is then the margin in its favour),
                # 0 for equal labels, which drops the pair
                slope_sign = torch.sign(y[:, start:stop, None] - y[:, None, :]) * pair
                weight = slope_sign.abs()
                slope_sign = slope_sign * sigma if sigma != 1.0 else slope_sign
                value, slope = pair_fn(diff * slope_sign, None)
            else:
                weight = pair.to(s.dtype)
                slope_sign = sigma
                value, slope = pair_fn(diff * sigma, targets[:, start:stop, :].to(s.dtype))
        count = count + weight.sum((1, 2))  # 0/1 pair indicators until a lambda weight multiplies them
        if ranked:
            block = PairBlock(rows, cols, gain_sorted[:, start:stop], gain_sorted, inverse_ideal, discount, discount_k)
            weight = lambdaweight_fn(block) * weight
        if not torch.is_grad_enabled():
            # no graph is recorded (the autograd Function's forward): update in place, fewer passes
            cost += value.mul_(weight).sum((1, 2))
            push = slope.mul_(weight)
            if not isinstance(slope_sign, float) or slope_sign != 1.0:
                push.mul_(slope_sign)
            grad[:, start:stop] += push.sum(2)
            grad -= push.sum(1)
        else:
            cost = cost + (value * weight).sum((1, 2))
            # d cost / d s_i = w c'(x) dx/ds_i, and the opposite for s_j
            push = slope * weight * slope_sign
            grad = grad + F.pad(push.sum(2), (start, length - stop)) - push.sum(1)
    if ranked:
        grad = torch.zeros_like(grad).scatter(1, order, grad)
    return cost, grad, count


def fused_weighting(pair_fn: PairFn, lambdaweight_fn: LambdaWeightFn | None) -> dict[str, float | bool] | None:
    """How the fused kernels compute this pair function and weight (``kernels.lambdarank_cpu``,
    ``kernels.lambdarank_triton``), or None where only the tensor path can: ``unit`` (RankNet's
    weights), else ``rho`` / ``delta`` (the |Delta NDCG| and LambdaLoss delta terms), and ``scale``
    (1, or 1 / ln 2 for base-2 logs)."""
    scales = {logistic_pair: 1.0, binary_logistic_pair: 1.0 / _LN2}
    if pair_fn not in scales:
        return None
    terms = {"unit": False, "scale": scales[pair_fn]}
    if lambdaweight_fn is None:
        return {**terms, "unit": True, "rho": 0.0, "delta": 0.0}
    if lambdaweight_fn is delta_ndcg_weight:
        return {**terms, "rho": 1.0, "delta": 0.0}
    if lambdaweight_fn is ndcg_loss2_weight:
        return {**terms, "rho": 0.0, "delta": 1.0}
    mu = getattr(lambdaweight_fn, "mu", None)
    return None if mu is None else {**terms, "rho": 1.0, "delta": float(mu)}


def _discounts_cut_at(length: int, k: int | None, like: Tensor) -> tuple[Tensor, Tensor]:
    """``(discount, discount_k)``, both ``[L + 1]``: ``1 / log2(2 + p)``, and the same 0 from rank k on."""
    discount = discounts(length + 1, like.device, like.dtype)
    if k is None:
        return discount, discount
    return discount, discount * (torch.arange(length + 1, device=like.device) < k)


@dataclass(frozen=True)
class _Ranking:
    """A batch in the ranking by score (ties by position, padding last) with what the lambda
    weights read: gains ``[B, L]`` (0 for padding), 1 / IDCG@k ``[B]`` (0 where IDCG is 0), the
    discounts ``[L + 1]`` and ``top``, the rows a pair must start in."""

    order: Tensor
    scores: Tensor
    labels: Tensor
    mask: Tensor
    gains: Tensor
    inverse_ideal: Tensor
    discount: Tensor
    discount_k: Tensor
    top: int

    @classmethod
    def of(
        cls, scores: Tensor, labels: Tensor, mask: Tensor, *, k: int | None, gain: Gain, unit: bool = False
    ) -> _Ranking:
        """``unit``: for RankNet's unit weights, which read no gain (so no exp2 label check) and no cut."""
        length = scores.shape[1]
        order = sort_by_scores(scores, mask)
        s, y, m = scores.gather(1, order), labels.gather(1, order), mask.gather(1, order)
        if unit:
            discount = discounts(length + 1, scores.device, scores.dtype)
            return cls(order, s, y, m, y, torch.zeros_like(scores[:, 0]), discount, discount, length)
        discount, discount_k = _discounts_cut_at(length, k, scores)
        inverse_ideal = 1.0 / ideal_dcg(labels, mask, k=k, gain=gain).to(scores.dtype)
        inverse_ideal = torch.where(torch.isfinite(inverse_ideal), inverse_ideal, torch.zeros_like(inverse_ideal))
        top = length if k is None else min(k, length)
        return cls(order, s, y, m, gains(y, gain) * m, inverse_ideal, discount, discount_k, top)


def _fused_sums(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor,
    pair_fn: PairFn,
    lambdaweight_fn: LambdaWeightFn | None,
    *,
    sigma: float,
    k: int | None,
    gain: Gain,
) -> tuple[Tensor, Tensor, Tensor] | None:
    """The scaffold's sums through a fused kernel: ``kernels.lambdarank_cpu`` on CPU,
    ``kernels.lambdarank_triton`` on CUDA (float32, no graph recorded, not compiling; each switchable
    off), or None where the tensor path runs instead."""
    weighting = fused_weighting(pair_fn, lambdaweight_fn)
    if (
        weighting is None
        or scores.dtype != torch.float32
        or torch.is_grad_enabled()
        or torch.compiler.is_compiling()  # an opaque kernel call would break the graph
    ):
        return None
    if scores.device.type == "cpu" and lambdarank_cpu.enabled():
        length = scores.shape[1]
        discount, discount_k = _discounts_cut_at(length, k, scores)
        top = length if k is None or weighting["unit"] else min(k, length)
        # gains refuse labels whose gain overflows, as the tensor path does (RankNet reads no gain)
        gain_values = labels if weighting["unit"] else gains(labels, gain) * mask
        return lambdarank_cpu.logistic_pairs(
            scores, labels, gain_values, mask, discount_k, discount, sigma=sigma, top=top, **weighting
        )
    if lambdarank_triton.enabled() and lambdarank_triton.available(scores.device) and scores.device.type == "cuda":
        return _ranked_kernel_sums(scores, labels, mask, weighting, sigma=sigma, k=k, gain=gain)
    return None


def _ranked_kernel_sums(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor,
    weighting: dict[str, float | bool],
    *,
    sigma: float,
    k: int | None,
    gain: Gain,
) -> tuple[Tensor, Tensor, Tensor] | None:
    """Rank as the tensor path does, run the Triton kernel (on CUDA, or in Triton's interpreter on
    CPU), and put the lambdas back in list order; None if the kernel failed (it warned)."""
    ranking = _Ranking.of(scores, labels, mask, k=k, gain=gain, unit=bool(weighting["unit"]))
    fused = lambdarank_triton.try_logistic_pairs(
        ranking.scores,
        ranking.labels,
        ranking.gains,
        ranking.mask.sum(1),
        ranking.discount_k,
        ranking.discount,
        ranking.inverse_ideal,
        sigma=sigma,
        top=ranking.top,
        **weighting,
    )
    if fused is None:
        return None
    cost, grad, count = fused
    return cost, torch.zeros_like(grad).scatter(1, ranking.order, grad), count


class _PairwiseSums(torch.autograd.Function):
    """Per-query cost ``[B]`` and pair counts ``[B]``; the gradient is computed in the forward."""

    @staticmethod
    def forward(ctx, scores, labels, mask, targets, options):
        cost, grad, count = pairwise_sums(scores, labels, mask, targets=targets, **options)
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(count)
        return cost, count

    @staticmethod
    def backward(ctx, grad_cost, _grad_count):
        (grad,) = ctx.saved_tensors
        return grad * grad_cost[:, None], None, None, None, None


def pairwise_loss(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor | None = None,
    *,
    pair_fn: PairFn,
    lambdaweight_fn: LambdaWeightFn | None = None,
    sigma: float = 1.0,
    k: int | None = None,
    gain: Gain = "exp2",
    targets: Tensor | None = None,
    reduction: Reduction = "mean",
    mean_over: Literal["pairs", "queries"] = "queries",
) -> Tensor:
    """``sum_{pairs} w_ij c(sigma (s_i - s_j))`` over pairs of real documents with different labels.

    Args:
        scores, labels: ``[B, L]``; mask: ``[B, L]`` bool, True for real documents.
        pair_fn: the pair cost ``c`` and its derivative (``logistic_pair``, ``margin_pair(delta)``).
        lambdaweight_fn: ``w_ij`` from a ``PairBlock`` (``delta_ndcg_weight``, ...); None for 1.
        sigma: slope applied to the score gap.
        k: with a lambda weight, visit only pairs with a document in the top ``k`` (O(B k L)).
        gain: the gains the lambda weights use.
        targets: optional soft targets ``[B, L, L]`` (no lambda weight).
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` (per-query sums ``[B]``).
        mean_over: ``"queries"`` (divide by B) or ``"pairs"`` (by the number of counted pairs).

    Returns:
        A scalar, or ``[B]``. Lists with no counted pair give 0 and zero gradient.
    """
    scores, labels, mask = as_float32(scores, labels, mask)
    if targets is not None and targets.shape != (*scores.shape, scores.shape[1]):
        raise ValueError(f"targets must be [B, L, L], got {tuple(targets.shape)}")
    options = {"pair_fn": pair_fn, "lambdaweight_fn": lambdaweight_fn, "sigma": float(sigma), "k": k, "gain": gain}
    with no_autocast(scores.device):
        per_query, count = _PairwiseSums.apply(scores, labels, mask, targets, options)
    return reduce(per_query, reduction, count.sum() if mean_over == "pairs" else scores.shape[0])


def pairwise_gradient(
    scores: Tensor,
    labels: Tensor,
    mask: Tensor | None = None,
    *,
    pair_fn: PairFn,
    lambdaweight_fn: LambdaWeightFn | None = None,
    sigma: float = 1.0,
    k: int | None = None,
    gain: Gain = "exp2",
    differentiable: bool = False,
) -> Tensor:
    """Gradient ``[B, L]`` of the ``reduction="sum"`` pairwise loss w.r.t. ``scores`` (its lambdas, negated).

    ``differentiable=True`` keeps the autograd graph (for the Jacobian of the lambdas).
    """
    scores, labels, mask = as_float32(scores, labels, mask)
    options = {"pair_fn": pair_fn, "lambdaweight_fn": lambdaweight_fn, "sigma": float(sigma), "k": k, "gain": gain}
    with torch.set_grad_enabled(differentiable and torch.is_grad_enabled()), no_autocast(scores.device):
        source = scores if differentiable else scores.detach()
        return pairwise_sums(source, labels, mask, **options)[1]
