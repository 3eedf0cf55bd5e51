"""Metrics against independent references: trec_eval (pytrec_eval), sklearn, torchmetrics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from metrics import functional as F

pytrec_eval = pytest.importorskip("pytrec_eval")


def random_batch(seed: int, batch: int = 6, length: int = 12, levels: int = 4):
    """Distinct scores (so tie conventions do not matter), graded labels, ragged padding."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, length, generator=g)
    labels = torch.randint(0, levels, (batch, length), generator=g).float()
    lengths = torch.randint(2, length + 1, (batch,), generator=g)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    labels[0] = 0.0  # a query with no relevant document
    return scores, labels, mask


def trec_eval(scores, labels, mask, measures: set[str]) -> list[dict[str, float]]:
    qrels, run = {}, {}
    for b in range(scores.shape[0]):
        real = mask[b].nonzero().flatten().tolist()
        qrels[f"q{b}"] = {f"d{i}": int(labels[b, i]) for i in real}
        run[f"q{b}"] = {f"d{i}": float(scores[b, i]) for i in real}
    result = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    return [result[f"q{b}"] for b in range(scores.shape[0])]


@pytest.mark.parametrize("seed", range(5))
def test_against_trec_eval(seed):
    scores, labels, mask = random_batch(seed)
    ref = trec_eval(scores, labels, mask, {"ndcg_cut.1,5,10", "map", "map_cut.5", "recip_rank", "P.5,10", "Rprec"})
    ours = {
        "ndcg_cut_1": F.ndcg(scores, labels, mask, k=1, gain="linear"),
        "ndcg_cut_5": F.ndcg(scores, labels, mask, k=5, gain="linear"),
        "ndcg_cut_10": F.ndcg(scores, labels, mask, k=10, gain="linear"),
        "map": F.average_precision(scores, labels, mask),
        "map_cut_5": F.average_precision(scores, labels, mask, k=5),
        "recip_rank": F.reciprocal_rank(scores, labels, mask),
        "P_5": F.precision(scores, labels, mask, k=5),
        "P_10": F.precision(scores, labels, mask, k=10),
        "Rprec": F.r_precision(scores, labels, mask),
    }
    for name, values in ours.items():
        expected = torch.tensor([q[name] for q in ref], dtype=torch.float32)
        torch.testing.assert_close(values, expected, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("k", [None, 1, 3, 10])
def test_ndcg_against_sklearn(k):
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    scores, labels, _ = random_batch(11, batch=8, length=10)
    labels[0, 3] = 2.0  # sklearn has no 'empty' convention for all-zero rows: avoid them
    expected = sklearn_metrics.ndcg_score(labels.numpy(), scores.numpy(), k=k)
    ours = F.ndcg(scores, labels, k=k, gain="linear").mean().item()
    assert ours == pytest.approx(expected, abs=1e-6)


def test_against_torchmetrics_retrieval():
    tmf = pytest.importorskip("torchmetrics.functional.retrieval")
    scores, labels, _ = random_batch(3, batch=5, length=9)
    for b in range(1, 5):
        s, y = scores[b], labels[b]
        if y.sum() == 0:
            continue
        binary = y > 0
        # torchmetrics 1.9 counts a document with a score <= 0 as not retrieved; a monotone map to
        # positive scores keeps the ranking and makes every document retrieved, as in our metrics.
        s = s.sigmoid()
        assert F.average_precision(s[None], y[None]).item() == pytest.approx(
            tmf.retrieval_average_precision(s, binary).item(), abs=1e-6
        )
        assert F.reciprocal_rank(s[None], y[None]).item() == pytest.approx(
            tmf.retrieval_reciprocal_rank(s, binary).item(), abs=1e-6
        )
        assert F.precision(s[None], y[None], k=4).item() == pytest.approx(
            tmf.retrieval_precision(s, binary, top_k=4).item(), abs=1e-6
        )
        assert F.ndcg(s[None], y[None], k=5, gain="linear").item() == pytest.approx(
            tmf.retrieval_normalized_dcg(s, y.long(), top_k=5).item(), abs=1e-6
        )


def test_ndcg_exp2_by_hand():
    scores = torch.tensor([[0.1, 0.9, 0.5]])
    labels = torch.tensor([[2.0, 0.0, 1.0]])
    # ranking: doc1 (rel 0), doc2 (rel 1), doc0 (rel 2); gains 0, 1, 3
    dcg = 1 / math.log2(3) + 3 / math.log2(4)
    ideal = 3 / math.log2(2) + 1 / math.log2(3)
    assert F.dcg(scores, labels).item() == pytest.approx(dcg, rel=1e-6)
    assert F.ndcg(scores, labels).item() == pytest.approx(dcg / ideal, rel=1e-6)
    assert F.ndcg(scores, labels, k=1).item() == 0.0
    assert F.ndcg(scores, labels, k=2).item() == pytest.approx((1 / math.log2(3)) / (3 + 1 / math.log2(3)), rel=1e-6)


def test_ties_broken_by_list_position():
    scores = torch.zeros(1, 4)
    labels = torch.tensor([[0.0, 1.0, 0.0, 0.0]])
    assert F.reciprocal_rank(scores, labels).item() == 0.5
    assert F.winner_takes_all(scores, labels).item() == 1.0
    assert F.winner_takes_all(scores, labels.flip(-1).roll(1, -1) * 0 + torch.tensor([[1.0, 0, 0, 0]])).item() == 0.0
    # real document scored -inf still ranks before padding
    mask = torch.tensor([[True, True, False, False]])
    assert F.reciprocal_rank(torch.tensor([[0.0, -math.inf, 5.0, 5.0]]), labels, mask).item() == 0.5


@pytest.mark.parametrize(("alpha", "expected"), [(0.0, 2.5 / 3), (1.0, 3.5 / 3), (2.0, 5.5 / 3)])
def test_kpartite_error_by_hand(alpha, expected):
    # ratings 1, 2, 3: pair (1,2) tied -> 1/2; pair (1,3) misordered, weight 2^alpha; pair (2,3) misordered
    scores = torch.tensor([[0.5, 0.5, 0.1]])
    labels = torch.tensor([[1.0, 2.0, 3.0]])
    assert F.kpartite_error(scores, labels, alpha=alpha).item() == pytest.approx(expected, rel=1e-6)


def test_kpartite_bipartite_is_one_minus_auc():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    g = torch.Generator().manual_seed(5)
    scores = torch.randint(0, 5, (1, 40), generator=g).float()  # many ties: AUC counts them 1/2
    labels = torch.randint(0, 2, (1, 40), generator=g).float()
    auc = sklearn_metrics.roc_auc_score(labels[0].numpy(), scores[0].numpy())
    for alpha in (0.0, 1.0, 3.0):
        assert F.kpartite_error(scores, labels, alpha=alpha).item() == pytest.approx(1 - auc, abs=1e-6)


def test_pairwise_error_and_wta_by_hand():
    scores = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    labels = torch.tensor([[0.0, 2.0, 1.0, 0.0]])
    # pairs with different labels: (1,0) wrong, (2,0) wrong, (1,2) right, (1,3) right, (2,3) right
    assert F.pairwise_error(scores, labels).item() == pytest.approx(2 / 5)
    assert F.winner_takes_all(scores, labels).item() == 1.0
    assert F.winner_takes_all(-scores, labels.flip(-1)).item() == 1.0
    assert F.winner_takes_all(scores, labels.roll(-1, -1)).item() == 0.0


def test_rank_loss_is_mean_absolute_error():
    pred = torch.tensor([[0.0, 2.0, 4.0, 1.0]])
    labels = torch.tensor([[1.0, 2.0, 1.0, 0.0]])
    mask = torch.tensor([[True, True, True, False]])
    assert F.rank_loss(pred, labels, mask).item() == pytest.approx((1 + 0 + 3) / 3)
    assert F.rank_loss(pred, labels, torch.zeros_like(mask)).item() == 0.0


def test_rank_loss_in_float64_keeps_a_mean_ranks_digits():
    """An unrounded mean rank (a voting ensemble's) summed in float64: the loop's value to 1e-15."""
    pred = torch.tensor([[0.1, 2.0 / 3.0, 3.3]], dtype=torch.float64)
    labels = torch.tensor([[0, 1, 3]])
    loss = F.rank_loss(pred, labels, dtype=torch.float64)
    assert loss.dtype == torch.float64
    assert loss.item() == pytest.approx((0.1 + 1.0 / 3.0 + 0.3) / 3, rel=1e-15)
    empty = F.rank_loss(pred, labels, torch.zeros_like(labels, dtype=torch.bool), dtype=torch.float64)
    assert empty.item() == 0.0  # not 0/0


def test_empty_convention_and_no_nan():
    scores = torch.randn(3, 5)
    labels = torch.zeros(3, 5)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[2] = False
    for fn in (
        F.ndcg,
        F.average_precision,
        F.reciprocal_rank,
        F.r_precision,
        F.winner_takes_all,
        F.pairwise_error,
        F.kpartite_error,
    ):
        assert torch.equal(fn(scores, labels, mask), torch.zeros(3)), fn.__name__
        assert torch.equal(fn(scores, labels, mask, empty=1.0), torch.ones(3)), fn.__name__
    assert torch.equal(F.precision(scores, labels, mask, k=3), torch.zeros(3))
    zero_length = torch.zeros(2, 0)
    assert torch.equal(F.ndcg(zero_length, zero_length, empty=1.0), torch.ones(2))
    assert torch.equal(F.reciprocal_rank(zero_length, zero_length), torch.zeros(2))
    assert torch.equal(F.r_precision(zero_length, zero_length), torch.zeros(2))


def test_numpy_labels_of_any_dtype():
    scores = torch.tensor(np.array([[0.3, 0.2]], dtype=np.float64))
    labels = torch.tensor([[1, 0]])
    assert F.ndcg(scores, labels).dtype == torch.float32
    assert F.ndcg(scores, labels).item() == 1.0
