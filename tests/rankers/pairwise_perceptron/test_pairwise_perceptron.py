"""The batched pairwise perceptron against a scalar transcription of Elsas et al.'s pseudo-code."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
import torch

from rankers.pairwise_perceptron.perceptron import (
    LOCKED,
    PairwisePerceptron,
    pass_orders,
    preference_pairs,
    rank_vote_scores,
    rank_votes,
)


def _queries(seed: int = 0, n_queries: int = 6, max_docs: int = 7, d: int = 5):
    """Padded queries: features ``[B, L, d]`` float64, graded labels ``[B, L]``, mask ``[B, L]``."""
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(n_queries, max_docs, d, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 3, (n_queries, max_docs), generator=generator).double()
    lengths = torch.randint(2, max_docs + 1, (n_queries,), generator=generator)
    mask = torch.arange(max_docs) < lengths[:, None]
    features[~mask] = float("nan")  # padding must never reach the learner
    labels[1] = 1.0  # a query without pairs
    return features, labels, mask


def _flat_stream(features, labels, mask):
    """Flat documents ``[B*L, d]``, pairs ``[P, 2]`` into them, and eta ``[P]``."""
    found, eta = preference_pairs(labels, mask)
    width = labels.shape[1]
    pairs = torch.stack([found[:, 0] * width + found[:, 1], found[:, 0] * width + found[:, 2]], 1)
    return features.reshape(-1, features.shape[-1]), pairs, eta.double()


class Reference:
    """The pseudo-code for one run, in Python floats and a heap: W holds (c, l, w) keyed by (c, l)."""

    def __init__(self, d: int, k: int) -> None:
        self.k, self.w, self.c, self.l = k, np.zeros(d), 0, 0
        self.heap: list[tuple[int, int, np.ndarray]] = []
        self.history: list[tuple[np.ndarray, int]] = []  # every closed hypothesis (w^l, c_l)
        self.mistakes: list[bool] = []

    def offer(self) -> None:
        """``c_min = min_k c_k`` (a free slot counts as lower than any count); add, then remove the minimum."""
        if len(self.heap) < self.k or self.c > self.heap[0][0]:
            heapq.heappush(self.heap, (self.c, self.l, self.w.copy()))
            while len(self.heap) > self.k:
                heapq.heappop(self.heap)

    def pair(self, d_i: np.ndarray, d_j: np.ndarray, eta: float) -> None:
        mistake = float(self.w @ d_j) >= float(self.w @ d_i)  # s(d_j, w^l) >= s(d_i, w^l)
        self.mistakes.append(mistake)
        if mistake:
            self.offer()
            self.history.append((self.w.copy(), self.c))
            self.w = self.w + eta * (d_i - d_j)
            self.l += 1
            self.c = 0
        else:
            self.c += 1

    def committee(self, *, include_current: bool = True) -> list[tuple[int, int, np.ndarray]]:
        """Members ``(l, c, w)`` sorted by l, the running hypothesis offered first if asked."""
        saved = list(self.heap)
        if include_current:
            self.offer()
        members = sorted((birth, c, w) for c, birth, w in self.heap)
        self.heap = saved
        return members

    def all_hypotheses(self) -> list[tuple[np.ndarray, int]]:
        return [*self.history, (self.w.copy(), self.c)]


def _reference_runs(flat, pairs, eta, sizes, seeds, passes):
    runs = [Reference(flat.shape[1], k) for k in sizes]
    for epoch in range(passes):
        order = pass_orders(len(pairs), seeds, epoch)
        for run, reference in enumerate(runs):
            for p in order[run].tolist():
                i, j = pairs[p].tolist()
                reference.pair(flat[i].numpy(), flat[j].numpy(), float(eta[p]))
    return runs


def _tensor_committee(learner: PairwisePerceptron, run: int):
    """The run's committee state as ``(births, counts, weights)`` sorted by birth, empty slots left out."""
    filled = (learner.counts[run] >= 0) & (learner.counts[run] < LOCKED)  # not empty, not beyond the run's K
    births, counts, weights = learner.births[run][filled], learner.counts[run][filled], learner.committee[run][filled]
    order = births.argsort()
    return births[order], counts[order], weights[order]


SIZES, SEEDS = [1, 3, 1000], [11, 12, 13]


def test_committee_follows_the_pseudo_code_pair_by_pair():
    features, labels, mask = _queries()
    flat, pairs, eta = _flat_stream(features, labels, mask)
    learner = PairwisePerceptron(flat.shape[1], committee_size=SIZES, n_runs=3, dtype=torch.float64)
    references = [Reference(flat.shape[1], k) for k in SIZES]
    for epoch in range(3):
        order = pass_orders(len(pairs), SEEDS, epoch)
        for t in range(order.shape[1]):
            chosen = order[:, t : t + 1]
            mistakes = learner.partial_fit(flat[pairs[chosen, 0]] - flat[pairs[chosen, 1]], eta[chosen])
            for run, reference in enumerate(references):
                i, j = pairs[chosen[run, 0]].tolist()
                reference.pair(flat[i].numpy(), flat[j].numpy(), float(eta[chosen[run, 0]]))
                assert bool(mistakes[run, 0]) == reference.mistakes[-1]
                assert int(learner.successes[run]) == reference.c and int(learner.hypotheses[run]) == reference.l
                np.testing.assert_allclose(learner.weights[run].numpy(), reference.w, rtol=1e-12, atol=1e-12)
                births, votes, weights = _tensor_committee(learner, run)
                members = reference.committee(include_current=False)
                assert births.tolist() == [birth for birth, _, _ in members]
                assert votes.tolist() == [c for _, c, _ in members]
                if members:
                    np.testing.assert_allclose(weights.numpy(), np.stack([w for _, _, w in members]), atol=1e-12)
    assert learner.mistakes.tolist() == [sum(r.mistakes) for r in references]
    assert min(r.l for r in references) > 5  # the stream really made several hypotheses


def _reference_scores(members, features, mask, *, vote: bool) -> torch.Tensor:
    """Scores ``[B, L]`` of one run's committee ``[(w, c)]``, by loops over queries and documents."""
    scores = torch.zeros(mask.shape, dtype=torch.float64)
    total = sum(c for _, c in members)
    if total == 0:
        return scores
    weight = sum(c * w for w, c in members) / total
    for b in range(mask.shape[0]):
        docs = [features[b, i].numpy() for i in range(mask.shape[1]) if mask[b, i]]
        for i, x in enumerate(docs):
            if not vote:
                scores[b, i] = float(weight @ x)
                continue
            value = 0.0
            for w, c in members:
                own = float(w @ x)
                others = [float(w @ y) for n, y in enumerate(docs) if n != i]
                value += c * (sum(s < own for s in others) + 0.5 * sum(s == own for s in others))
            scores[b, i] = value / total
    return scores


@pytest.mark.parametrize("include_current", [True, False])
def test_final_scores_match_the_reference(include_current):
    features, labels, mask = _queries(seed=1)
    flat, pairs, eta = _flat_stream(features, labels, mask)
    learner = PairwisePerceptron(flat.shape[1], committee_size=SIZES, n_runs=3, dtype=torch.float64)
    for epoch in range(4):
        learner.fit_pairs(flat, pairs, eta, pass_orders(len(pairs), SEEDS, epoch))
    references = _reference_runs(flat, pairs, eta, SIZES, SEEDS, 4)
    clean = features.nan_to_num(0.0)
    for combine in ("weight", "vote", "last", "average"):
        scores = learner.scores(clean, mask, combine, include_current=include_current)
        for run, reference in enumerate(references):
            if combine in ("weight", "vote"):
                members = [(w, c) for _, c, w in reference.committee(include_current=include_current)]
            elif combine == "last":
                members = [(reference.w, 1)]
            else:
                members = reference.all_hypotheses() if include_current else reference.history
            expected = _reference_scores(members, clean, mask, vote=combine == "vote")
            torch.testing.assert_close(scores[run] * mask, expected, rtol=1e-9, atol=1e-9)


def test_committee_of_one_is_the_pocket_perceptron():
    """Gallant's pocket: keep the hypothesis with the longest run of successes (strictly longer wins)."""
    features, labels, mask = _queries(seed=2)
    flat, pairs, eta = _flat_stream(features, labels, mask)
    learner = PairwisePerceptron(flat.shape[1], committee_size=1, n_runs=1, dtype=torch.float64)
    pocket, pocket_run, w, run = np.zeros(flat.shape[1]), -1, np.zeros(flat.shape[1]), 0
    for epoch in range(3):
        order = pass_orders(len(pairs), [5], epoch)
        learner.fit_pairs(flat, pairs, eta, order)
        for p in order[0].tolist():
            x = (flat[pairs[p, 0]] - flat[pairs[p, 1]]).numpy()
            if w @ x > 0:
                run += 1
                continue
            if run > pocket_run:
                pocket, pocket_run = w.copy(), run
            w, run = w + float(eta[p]) * x, 0
    if run > pocket_run:
        pocket, pocket_run = w.copy(), run
    np.testing.assert_allclose(learner.linear_weights("weight")[0].numpy(), pocket, atol=1e-12)
    assert int(learner.members()[1][0, 0]) == pocket_run > 0


def test_large_committee_is_the_voted_perceptron():
    """K >= the number of hypotheses: every hypothesis with its count, i.e. the voted perceptron;
    a smaller K: the voted perceptron restricted to the hypotheses the committee kept."""
    features, labels, mask = _queries(seed=3)
    flat, pairs, eta = _flat_stream(features, labels, mask)
    learner = PairwisePerceptron(flat.shape[1], committee_size=[10_000, 4], n_runs=2, dtype=torch.float64)
    for epoch in range(3):
        learner.fit_pairs(flat, pairs, eta, pass_orders(len(pairs), [7, 7], epoch))
    hypotheses = _reference_runs(flat, pairs, eta, [10_000], [7], 3)[0].all_hypotheses()
    assert int(learner.hypotheses[0]) + 1 == len(hypotheses) > 10
    clean = features.nan_to_num(0.0)
    voted = _reference_scores(hypotheses, clean, mask, vote=True)
    scores = learner.scores(clean, mask, "vote")
    torch.testing.assert_close(scores[0] * mask, voted, rtol=1e-9, atol=1e-9)
    # the small committee: its members are hypotheses of the same stream, with their own counts
    births = learner.births[1, :4].tolist()  # slots beyond K = 4 are locked
    current = int(learner.hypotheses[1])
    committee, votes = learner.members()
    kept = []
    for slot, birth in enumerate(births):
        birth = current if not torch.equal(committee[1, slot], learner.committee[1, slot]) else birth
        w, c = hypotheses[birth]
        np.testing.assert_allclose(committee[1, slot].numpy(), w, atol=1e-12)
        assert float(votes[1, slot]) == c
        kept.append((w, c))
    assert sorted(c for _, c in kept) == sorted(c for _, c in hypotheses)[-4:]  # the 4 best counts
    torch.testing.assert_close(scores[1] * mask, _reference_scores(kept, clean, mask, vote=True), rtol=1e-9, atol=1e-9)


def test_query_balancing_weights():
    labels = torch.tensor([[2.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 9.0], [3.0, 3.0, 3.0, 3.0]])
    mask = torch.tensor([[True, True, True, True], [True, True, True, False], [True] * 4])
    pairs, eta = preference_pairs(labels, mask)
    expected = [(b, i, j) for b in range(3) for i in range(4) for j in range(4) if mask[b, i] and mask[b, j]]
    expected = [(b, i, j) for b, i, j in expected if labels[b, i] > labels[b, j]]
    assert pairs.tolist() == [list(p) for p in expected]
    per_query = {b: sum(1 for q, _, _ in expected if q == b) for b in range(3)}
    assert per_query == {0: 5, 1: 2, 2: 0}
    assert eta.tolist() == pytest.approx([1 / per_query[b] for b, _, _ in expected])
    _, plain = preference_pairs(labels, mask, query_balance=False)
    assert plain.tolist() == [1.0] * len(expected)
    # the first pair is always a mistake (w = 0): w^1 = eta_q (d_i - d_j)
    learner = PairwisePerceptron(2, committee_size=2)
    x = torch.tensor([[[3.0, -1.0]]])
    learner.partial_fit(x, torch.tensor([[0.2]]))
    torch.testing.assert_close(learner.weights, torch.tensor([[0.6, -0.2]]))


def test_no_pairs_leave_the_learner_untouched():
    labels = torch.ones(2, 3)
    pairs, eta = preference_pairs(labels, torch.ones(2, 3, dtype=torch.bool))
    assert pairs.shape == (0, 3) and eta.shape == (0,)
    learner = PairwisePerceptron(4, committee_size=[1, 5], n_runs=2)
    mistakes = learner.fit_pairs(torch.randn(6, 4), pairs[:, 1:], eta, pass_orders(0, [0, 1], 0))
    assert mistakes.tolist() == [0, 0] and learner.seen.tolist() == [0, 0]
    features = torch.randn(3, 4, 4)
    for combine in ("last", "average", "weight", "vote"):
        scores = learner.scores(features, None, combine)
        assert scores.shape == (2, 3, 4) and torch.isfinite(scores).all()
        assert torch.equal(scores, torch.full_like(scores, scores.flatten()[0]))  # every document ties


def test_a_sweep_of_runs_equals_runs_one_at_a_time():
    features, labels, mask = _queries(seed=4)
    flat, pairs, eta = _flat_stream(features, labels, mask)
    sizes, seeds = [2, 5, 2], [1, 1, 9]
    batched = PairwisePerceptron(flat.shape[1], committee_size=sizes, n_runs=3, dtype=torch.float64)
    singles = [PairwisePerceptron(flat.shape[1], committee_size=k, dtype=torch.float64) for k in sizes]
    for epoch in range(2):
        batched.fit_pairs(flat, pairs, eta, pass_orders(len(pairs), seeds, epoch))
        for single, seed in zip(singles, seeds, strict=True):
            single.fit_pairs(flat, pairs, eta, pass_orders(len(pairs), [seed], epoch))
    for run, single in enumerate(singles):
        k = sizes[run]
        assert torch.equal(batched.counts[run, :k], single.counts[0])
        assert torch.equal(batched.births[run, :k], single.births[0])
        torch.testing.assert_close(batched.committee[run, :k], single.committee[0], rtol=0, atol=1e-12)
        for combine in ("weight", "average", "last"):
            torch.testing.assert_close(batched.linear_weights(combine)[run], single.linear_weights(combine)[0])


def test_rank_votes_count_documents_below_with_half_ties():
    scores = torch.tensor([[[3.0, 1.0], [1.0, 1.0], [2.0, 5.0], [7.0, 0.0]]])  # [1, L=4, K=2]
    mask = torch.tensor([[True, True, True, False]])
    ranks = rank_votes(scores, mask)
    assert ranks.tolist() == [[[2.0, 0.5], [0.0, 0.5], [1.0, 2.0], [0.0, 0.0]]]
    votes = torch.tensor([[3.0, 1.0]])
    torch.testing.assert_close(rank_vote_scores(scores, votes, mask), (ranks * torch.tensor([0.75, 0.25])).sum(-1))
