"""Online calibrated constraint classification (Brinker & Huellermeier, Algorithm 1), batched.

The hypothesis is the calibrated linear sorting function of Definition 2.1: weight vectors
``w_1..w_d`` and ``w_0 = 0``, label scores ``s_i = <w_i, x>``, the labels with ``s_i > 0`` above the
calibration point. Algorithm 1 processes one example at a time: when the loss of its prediction is
positive, every violated constraint promotes one weight vector and demotes another,

* a pair ``(r, s)`` in ``R(y) U (P(y) x N(y))`` with ``s_r <= s_s``: ``beta_r += 1``, ``beta_s -= 1``;
* ``r in P`` with ``s_r <= 0``: ``beta_r += 1``;  ``r in N`` with ``s_r >= 0``: ``beta_r -= 1``;

each counted in ``c``, and ``w_i += loss * beta_i / c * x`` -- without expanding the example into the
nd-dimensional binary examples of Section 2. ``R`` independent runs are one tensor ``[R, d, F]``: a
step is a handful of ``[R, d, d]`` and ``[R, d, F]`` ops whatever R is, so several orderings of the
stream (or several passes with different seeds) cost about what one does. The hypothesis used for
prediction averages each run's weights over its steps (the averaged perceptron) and then over runs.

Loss choices (``loss=``), computed on the projection of the prediction:

* ``"hamming"`` (multilabel): the fraction of labels on the wrong side of the zero point;
* ``"kendall"`` / ``"footrule"`` (top-label ranking): the generalized Kendall tau (p = 1/2) and the
  Spearman footrule between predicted and true top-label rankings (``metrics.label_ranking``);
* ``"constraints"``: the fraction of constraints violated (any task).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Literal

import torch
from torch import Tensor, nn

from losses.calibrated import Pairs, calibration_signs, preference_pairs
from metrics.label_ranking import footrule_distance, hamming_loss, kendall_tau_distance
from rankers.threads import torch_threads

OnlineLoss = Literal["hamming", "kendall", "footrule", "constraints"]
LOSSES = ("hamming", "kendall", "footrule", "constraints")
# from this many labels on, 0/1 labels stream through _stream_chunk_binary (per-row updates, P x N
# counting). bench/label_ranking_stream.py: 5.5x the dense loop at 374 labels, 1.5x at 159, 1.16x
# at 53; medical (45 labels) 2x, enron (53) 1.2x; at 14 labels the dense loop's fewer ops win (0.85x)
MANY_LABELS = 32


class CalibratedPerceptron(nn.Module):
    """R runs of Algorithm 1 on d labels and F features, all in one tensor.

    Args:
        n_features: ``F`` (with a bias column if the caller appends one).
        n_labels: ``d``.
        n_runs: ``R`` independent runs (each streams its own order of the examples).
        loss: the loss that gates and scales the update (see the module doc).
        pairs: ``"all"`` or ``"adjacent"`` preference constraints (``losses.calibrated.preference_pairs``).
        average: predict with each run's weights averaged over its steps (else the last weights).
        device: where the state lives.
        scripted: run the hamming and constraints losses' steps in a TorchScript loop (the same
            arithmetic as the Python loop, which stays the reference; about 2.4x faster on CPU).

    State: ``weights [R, d, F]``, ``weight_sum [R, d, F]`` (sum of the weights after every step),
    ``updates [R]`` (buffers: ``.to()``, ``state_dict`` are ``nn.Module``'s) and ``steps`` (examples
    seen per run, the module's extra state).

    Example:
        >>> x = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # [R=1, T=2, F=2]
        >>> y = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # [R, T, d=2]
        >>> learner = CalibratedPerceptron(2, 2, average=False)
        >>> learner.partial_fit(x, y)  # the loss of each prediction before its update
        tensor([[0.5000, 0.5000]])
        >>> learner.weights[0] * 3  # each step: 3 violated constraints, beta = (2, -2), rate 0.5 / 3
        tensor([[ 1., -1.],
                [-1.,  1.]])
        >>> (learner.scores(x[0]) > 0).int()  # both examples now on the right side of the zero point
        tensor([[1, 0],
                [0, 1]], dtype=torch.int32)
    """

    def __init__(
        self,
        n_features: int,
        n_labels: int,
        *,
        n_runs: int = 1,
        loss: OnlineLoss = "hamming",
        pairs: Pairs = "all",
        average: bool = True,
        device: str | torch.device | None = None,
        scripted: bool = True,
    ) -> None:
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
        if pairs not in ("all", "adjacent"):
            raise ValueError(f"pairs must be 'all' or 'adjacent', got {pairs!r}")
        super().__init__()
        self.f, self.d, self.r = n_features, n_labels, n_runs
        self.loss, self.pairs, self.average, self.scripted = loss, pairs, average, scripted
        device = torch.device(device) if device is not None else torch.device("cpu")
        self.register_buffer("weights", torch.zeros(n_runs, n_labels, n_features, device=device))
        self.register_buffer("weight_sum", torch.zeros_like(self.weights))
        self.register_buffer("updates", torch.zeros(n_runs, device=device))
        self.steps = 0

    @property
    def device(self) -> torch.device:
        return self.weights.device

    def get_extra_state(self) -> dict:
        return {"steps": self.steps}

    def set_extra_state(self, state: dict) -> None:
        self.steps = int(state["steps"])

    # -- the loss of a prediction ----------------------------------------------------------------
    def prediction_loss(self, scores: Tensor, labels: Tensor) -> Tensor:
        """``loss(pi(argsort s), y)`` for ``scores [R, d]``, ``labels [R, d]`` -> ``[R]``."""
        if self.loss == "hamming":
            return hamming_loss(scores, labels)
        if self.loss == "kendall":
            return kendall_tau_distance(scores, labels)
        if self.loss == "footrule":
            return footrule_distance(scores, labels)
        mask = torch.ones_like(labels, dtype=torch.bool)
        pairs = preference_pairs(labels, mask, pairs=self.pairs)
        signs = calibration_signs(labels, mask, pairs=self.pairs)
        _, count = self._violated(scores, pairs, signs)
        return count / (pairs.sum((1, 2)) + (signs != 0).sum(1)).clamp_min(1).float()

    # -- training --------------------------------------------------------------------------------
    def partial_fit(self, features: Tensor, labels: Tensor) -> Tensor:
        """Stream ``features [R, T, F]`` with ``labels [R, T, d]`` (grades) in order, one example a step.

        Returns the loss of the prediction made before each update, ``[R, T]`` (the online loss).
        """
        features = features.to(self.device, torch.float32)
        labels = labels.to(self.device, torch.float32)
        if features.shape[:2] != labels.shape[:2] or features.shape[0] != self.r or features.shape[2] != self.f:
            raise ValueError(
                f"expected features [R={self.r}, T, F={self.f}] and labels [R, T, d={self.d}], "
                f"got {tuple(features.shape)} and {tuple(labels.shape)}"
            )
        if labels.shape[2] != self.d:
            raise ValueError(f"labels have {labels.shape[2]} columns, the learner {self.d} labels")
        with _one_thread(self.device):
            return self._stream(features, labels)

    def _stream(self, features: Tensor, labels: Tensor) -> Tensor:
        if self._per_row(labels):
            return self._stream_binary(features, labels)
        steps = features.shape[1]
        losses = torch.empty(self.r, steps, device=self.device)
        # constraints depend on the labels only: built for a chunk of steps at once, so that a
        # step is a few ops on [R, d, d] (the chunk bounds their memory to ~16M entries)
        chunk = max(1, min(steps, (1 << 24) // max(1, self.r * self.d * self.d)))
        mask = torch.ones(self.r, chunk, self.d, dtype=torch.bool, device=self.device)
        for start in range(0, steps, chunk):
            y = labels[:, start : start + chunk]
            t = y.shape[1]
            flat_y, flat_mask = y.reshape(-1, self.d), mask[:, :t].reshape(-1, self.d)
            pairs = preference_pairs(flat_y, flat_mask, pairs=self.pairs).view(self.r, t, self.d, self.d)
            signs = calibration_signs(flat_y, flat_mask, pairs=self.pairs).view(self.r, t, self.d)
            n_constraints = (pairs.sum((2, 3)) + (signs != 0).sum(2)).float()
            relevant = y > 0
            if self.scripted and self.loss in ("hamming", "constraints"):
                losses[:, start : start + t] = _stream_chunk(
                    self.weights,
                    self.weight_sum,
                    self.updates,
                    features[:, start : start + t],
                    pairs,
                    signs,
                    relevant,
                    n_constraints,
                    self.loss == "hamming",
                )
                continue
            for i in range(t):
                x = features[:, start + i]
                scores = torch.einsum("rdf,rf->rd", self.weights, x)
                if self.loss == "hamming":  # inline: the metric's masking is not needed here
                    loss = ((scores > 0) != relevant[:, i]).float().mean(1)
                beta, count = self._violated(scores, pairs[:, i], signs[:, i])
                if self.loss == "constraints":
                    loss = count / n_constraints[:, i].clamp_min(1)
                elif self.loss != "hamming":
                    loss = self.prediction_loss(scores, y[:, i])
                # no branch on the host: a step with zero loss or nothing violated adds a zero update
                rate = torch.where(count > 0, loss / count.clamp_min(1), torch.zeros_like(loss))
                self.weights.add_((rate[:, None] * beta)[:, :, None] * x[:, None, :])
                self.weight_sum.add_(self.weights)
                self.updates.add_(rate > 0)
                losses[:, start + i] = loss
        self.steps += steps
        return losses

    def _per_row(self, labels: Tensor) -> bool:
        """Whether ``_stream_binary`` takes the stream: the scripted hamming/constraints loop on the CPU
        with ``MANY_LABELS`` or more 0/1 labels. Not on a GPU: its per-row steps branch on the host
        (how many rows changed), a sync every step that the dense loop, all on the device, avoids."""
        scripted = self.scripted and self.loss in ("hamming", "constraints") and self.device.type == "cpu"
        return scripted and self.d >= MANY_LABELS and bool(((labels == 0) | (labels == 1)).all())

    def _stream_binary(self, features: Tensor, labels: Tensor) -> Tensor:
        """The scripted stream for 0/1 labels (multilabel data), where the constraints are P x N
        whatever ``pairs``: the violated pairs are counted from the relevant labels' scores
        (``[R, |P|, d]`` instead of a ``[R, d, d]`` table), only the weight vectors a step changes
        (``beta_i != 0``) are updated, and the averaged sum of each is brought up to date when it
        changes (``n`` unchanged steps add ``n`` times its weights at once) instead of every step.
        The weights follow the same arithmetic as the dense loop; only the sum's rounding differs.
        A step costs one pass over the weights (the scores) instead of five, which is what counts
        with many labels (measured in ``bench/label_ranking_stream.py``)."""
        runs, steps, f = features.shape
        weights = torch.cat([self.weights, self.weights.new_zeros(runs, 1, f)], 1)  # a zero dummy row pads
        weight_sum = torch.cat([self.weight_sum, self.weights.new_zeros(runs, 1, f)], 1)
        last = torch.full((runs, self.d + 1), self.steps, dtype=torch.int64, device=self.device)
        losses = torch.empty(runs, steps, device=self.device)
        for start in range(0, steps, 1024):
            relevant = labels[:, start : start + 1024] > 0
            positives = _padded_indices(relevant, pad=self.d)
            losses[:, start : start + relevant.shape[1]] = _stream_chunk_binary(
                weights, weight_sum, last, self.updates, features[:, start : start + 1024], positives, relevant,
                self.steps + start, self.loss == "hamming",
            )  # fmt: skip
        end = self.steps + steps
        weight_sum += (end - last).to(weights.dtype).unsqueeze(2) * weights  # every row up to date
        self.weights, self.weight_sum = weights[:, : self.d].contiguous(), weight_sum[:, : self.d].contiguous()
        self.steps = end
        return losses

    @staticmethod
    def _violated(scores: Tensor, pairs: Tensor, signs: Tensor) -> tuple[Tensor, Tensor]:
        """Algorithm 1's ``beta [R, d]`` and ``c [R]`` given the constraints ``pairs [R, d, d]`` and
        ``signs [R, d]`` (+1: r in P, -1: r in N)."""
        violated = pairs & (scores[:, :, None] <= scores[:, None, :])
        promote = (signs > 0) & (scores <= 0)  # r in P with s_r <= 0
        demote = (signs < 0) & (scores >= 0)  # r in N with s_r >= 0
        beta = violated.sum(2) - violated.sum(1) + promote.int() - demote.int()
        count = violated.sum((1, 2)) + promote.sum(1) + demote.sum(1)
        return beta.float(), count.float()

    # -- prediction ------------------------------------------------------------------------------
    def run_weights(self) -> Tensor:
        """Each run's hypothesis ``[R, d, F]``: averaged over its steps when ``average``."""
        if self.average and self.steps > 0:
            return self.weight_sum / self.steps
        return self.weights

    def hypothesis(self) -> Tensor:
        """The weights used to predict, ``[d, F]``: the runs' hypotheses averaged."""
        return self.run_weights().mean(0)

    def scores(self, features: Tensor) -> Tensor:
        """Label scores ``features [N, F]`` -> ``[N, d]`` of the combined hypothesis (cut at 0)."""
        return features.to(self.device, torch.float32) @ self.hypothesis().T


def _one_thread(device: torch.device) -> AbstractContextManager[None]:
    """One intra-op thread on CPU for the stream: its ops are on [R, d, d] and [R, d, F] tensors,
    far too small to share, and threads that wait for each other at every op cost 30-100x on a busy
    machine (measured: 0.3 ms a step with one thread, 10-27 ms with two, 2 cores under load)."""
    return torch_threads(1 if device.type == "cpu" else None)


@torch.jit.script
def _stream_chunk(
    weights: Tensor,
    weight_sum: Tensor,
    updates: Tensor,
    features: Tensor,
    pairs: Tensor,
    signs: Tensor,
    relevant: Tensor,
    n_constraints: Tensor,
    hamming: bool,
) -> Tensor:
    """Algorithm 1 over ``features [R, t, F]`` with the chunk's constraints (``pairs [R, t, d, d]``,
    ``signs [R, t, d]``), the loop in TorchScript; updates the state in place, returns ``[R, t]`` losses."""
    runs, steps = features.shape[0], features.shape[1]
    losses = torch.empty(runs, steps, device=features.device)
    for i in range(steps):
        x = features[:, i]
        scores = torch.bmm(weights, x.unsqueeze(2)).squeeze(2)
        violated = pairs[:, i] & (scores.unsqueeze(2) <= scores.unsqueeze(1))
        sign = signs[:, i]
        promote = (sign > 0) & (scores <= 0)
        demote = (sign < 0) & (scores >= 0)
        beta = violated.sum(2) - violated.sum(1) + promote.to(torch.int64) - demote.to(torch.int64)
        count = (violated.sum([1, 2]) + promote.sum(1) + demote.sum(1)).to(torch.float32)
        if hamming:
            loss = ((scores > 0) != relevant[:, i]).to(torch.float32).mean(1)
        else:
            loss = count / n_constraints[:, i].clamp_min(1.0)
        rate = loss / count.clamp_min(1.0)  # loss > 0 implies count > 0: a zero loss adds nothing
        weights.add_((rate.unsqueeze(1) * beta.to(torch.float32)).unsqueeze(2) * x.unsqueeze(1))
        weight_sum.add_(weights)
        updates.add_((rate > 0).to(updates.dtype))
        losses[:, i] = loss
    return losses


def _padded_indices(chosen: Tensor, *, pad: int) -> Tensor:
    """The ``True`` positions of each row of ``chosen [..., d]`` in order, padded with ``pad`` to the
    longest row's count (at least 1): ``[..., k]``."""
    counts = chosen.sum(-1)
    k = max(1, int(counts.max())) if counts.numel() else 1
    order = torch.sort((~chosen).to(torch.uint8), dim=-1, stable=True).indices[..., :k]
    keep = torch.arange(k, device=chosen.device) < counts.unsqueeze(-1)
    return torch.where(keep, order, torch.full_like(order, pad))


@torch.jit.script
def _stream_chunk_binary(
    weights: Tensor,
    weight_sum: Tensor,
    last: Tensor,
    updates: Tensor,
    features: Tensor,
    positives: Tensor,
    relevant: Tensor,
    step0: int,
    hamming: bool,
) -> Tensor:
    """Algorithm 1 on 0/1 labels over ``features [R, t, F]`` (``positives [R, t, p]``: the relevant
    labels padded with d; ``relevant [R, t, d]``). ``weights``, ``weight_sum`` ``[R, d + 1, F]`` (row d
    a zero dummy) and ``last [R, d + 1]`` (the step each row's sum is up to date with) change in place."""
    runs, steps, d = relevant.shape[0], relevant.shape[1], relevant.shape[2]
    losses = torch.empty(runs, steps, device=weights.device)
    infinity = torch.full((runs, 1), float("inf"), device=weights.device)
    zero = torch.zeros((runs, 1), device=weights.device)
    for i in range(steps):
        step = step0 + i + 1
        x = features[:, i]
        scores = torch.bmm(weights[:, :d], x.unsqueeze(2)).squeeze(2)
        is_relevant = relevant[:, i]
        top = positives[:, i]
        # (r in P, s in N) is violated when s_r <= s_s; padded positives score +inf: never violated
        positive_scores = torch.cat([scores, infinity], 1).gather(1, top)
        violated = (scores.unsqueeze(1) >= positive_scores.unsqueeze(2)) & (~is_relevant).unsqueeze(1)
        wins, losses_n = violated.sum(2), violated.sum(1)  # per positive [R, p], per negative [R, d]
        promote = is_relevant & (scores <= 0)
        demote = ~is_relevant & (scores >= 0)
        beta = promote.to(torch.int64) - demote.to(torch.int64) - losses_n
        beta = torch.cat([beta, torch.zeros_like(beta[:, :1])], 1).scatter_add(1, top, wins)[:, :d]
        count = (wins.sum(1) + promote.sum(1) + demote.sum(1)).to(torch.float32)
        if hamming:
            loss = ((scores > 0) != is_relevant).to(torch.float32).mean(1)
        else:
            n_positive = is_relevant.sum(1)
            loss = count / (n_positive * (d - n_positive) + d).clamp_min(1).to(torch.float32)
        rate = loss / count.clamp_min(1.0)  # loss > 0 implies count > 0: a zero loss adds nothing
        change = torch.cat([rate.unsqueeze(1) * beta.to(torch.float32), zero], 1)  # [R, d + 1]
        touched = change[:, :d] != 0
        n_touched = touched.sum(1)
        k = int(n_touched.max())
        if 4 * k > d:  # most rows change: update them all, as the dense loop does
            lag = step - 1 - last
            if bool((lag > 0).any()):  # rows left behind by earlier per-row steps catch up first
                weight_sum.add_(lag.to(torch.float32).unsqueeze(2) * weights)
            weights.add_(change.unsqueeze(2) * x.unsqueeze(1))
            weight_sum.add_(weights)
            last.fill_(step)
        elif k > 0:
            rows = torch.sort((~touched).to(torch.uint8), dim=1, stable=True).indices[:, :k]
            rows = torch.where(torch.arange(k, device=rows.device) < n_touched.unsqueeze(1), rows, d)
            rows3 = rows.unsqueeze(2).expand(runs, k, x.shape[1])
            old = weights.gather(1, rows3)
            delta = change.gather(1, rows).unsqueeze(2) * x.unsqueeze(1)
            behind = (step - last.gather(1, rows)).to(torch.float32).unsqueeze(2)
            # the row's sum missed (behind - 1) steps of the old weights and gets the new ones now
            weight_sum.scatter_add_(1, rows3, behind * old + delta)
            weights.scatter_add_(1, rows3, delta)
            last.scatter_(1, rows, torch.full_like(rows, step))
        updates.add_((rate > 0).to(updates.dtype))
        losses[:, i] = loss
    return losses
