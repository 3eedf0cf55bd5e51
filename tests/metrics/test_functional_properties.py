"""Property tests of the metrics: padding, permutation, empty lists, no NaN."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from metrics import functional as F

METRICS = {
    "ndcg": lambda s, y, m: F.ndcg(s, y, m),
    "ndcg@3": lambda s, y, m: F.ndcg(s, y, m, k=3, gain="linear"),
    "dcg@5": lambda s, y, m: F.dcg(s, y, m, k=5),
    "ap": lambda s, y, m: F.average_precision(s, y, m),
    "ap@4": lambda s, y, m: F.average_precision(s, y, m, k=4),
    "rr": lambda s, y, m: F.reciprocal_rank(s, y, m),
    "p@3": lambda s, y, m: F.precision(s, y, m, k=3),
    "rprec": lambda s, y, m: F.r_precision(s, y, m),
    "wta": lambda s, y, m: F.winner_takes_all(s, y, m),
    "pairwise": lambda s, y, m: F.pairwise_error(s, y, m),
    "kpartite": lambda s, y, m: F.kpartite_error(s, y, m, alpha=1.0),
    "rank_loss": lambda s, y, m: F.rank_loss(s, y, m),
}


@st.composite
def lists(draw, min_size: int = 0):
    n = draw(st.integers(min_size, 9))
    labels = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    # distinct scores, so a permutation of the list cannot change the ranking through ties
    scores = draw(st.lists(st.integers(-1000, 1000), min_size=n, max_size=n, unique=True))
    scores_tensor = torch.tensor(scores, dtype=torch.float32).reshape(1, n) / 7
    return scores_tensor, torch.tensor(labels, dtype=torch.float32).reshape(1, n)


@settings(max_examples=60, deadline=None)
@given(lists(), st.integers(1, 5), st.data())
def test_padding_never_changes_a_value(item, pad, data):
    scores, labels = item
    n = scores.shape[1]
    junk = torch.tensor(data.draw(st.lists(st.floats(-1e3, 1e3), min_size=pad, max_size=pad)))
    padded_scores = torch.cat([scores, junk[None]], 1)
    padded_labels = torch.cat([labels, torch.full((1, pad), 3.0)], 1)
    mask = torch.arange(n + pad)[None] < n
    for name, fn in METRICS.items():
        torch.testing.assert_close(fn(scores, labels, None), fn(padded_scores, padded_labels, mask), msg=name)


@settings(max_examples=60, deadline=None)
@given(lists(min_size=1), st.randoms(use_true_random=False))
def test_permuting_documents_with_their_scores_changes_nothing(item, rnd):
    scores, labels = item
    perm = list(range(scores.shape[1]))
    rnd.shuffle(perm)
    for name, fn in METRICS.items():
        torch.testing.assert_close(fn(scores, labels, None), fn(scores[:, perm], labels[:, perm], None), msg=name)


@settings(max_examples=40, deadline=None)
@given(lists(), st.floats(0.0, 1.0))
def test_all_padded_gives_empty_and_nothing_is_nan(item, empty):
    scores, labels = item
    mask = torch.zeros_like(labels, dtype=torch.bool)
    as_float32 = torch.tensor(empty, dtype=torch.float32)
    assert F.ndcg(scores, labels, mask, empty=empty).item() == as_float32.item()
    assert F.average_precision(scores, labels, mask, empty=empty).item() == as_float32.item()
    for name, fn in METRICS.items():
        for m in (None, mask):
            value = fn(scores, labels, m)
            assert torch.isfinite(value).all(), name
    # values in range
    for name in ("ndcg", "ap", "rr", "p@3", "rprec", "wta", "pairwise"):
        value = METRICS[name](scores, labels, None)
        assert 0.0 <= value.item() <= 1.0 + 1e-6, name


@settings(max_examples=40, deadline=None)
@given(lists(min_size=1))
def test_ideal_ordering_is_perfect(item):
    _, labels = item
    if labels.sum() == 0:
        return
    ideal_scores = labels + 1e-3 * torch.arange(labels.shape[1], 0, -1)
    assert F.ndcg(ideal_scores, labels).item() == 1.0 or abs(F.ndcg(ideal_scores, labels).item() - 1) < 1e-6
    assert F.pairwise_error(ideal_scores, labels).item() == 0.0
    assert F.kpartite_error(ideal_scores, labels, alpha=2.0).item() == 0.0
