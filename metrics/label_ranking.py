"""Label ranking metrics: multilabel measures of a score per label, and top-label ranking distances.

Every function takes ``scores [B, d]`` (one score per label; the calibrated cut calls a label
relevant when its score is > 0), ``labels [B, d]`` (0 = not relevant, > 0 relevant, a larger value
ranked higher) and an optional ``mask [B, d]`` (True = a label that exists; padded labels never
count), and returns one value per instance, ``[B]`` float32. Averaging them over instances gives
scikit-learn's figures exactly (tests check it to 1e-6):

=============================  =================================================  ==================
function                       per instance                                       scikit-learn
=============================  =================================================  ==================
``ranking_loss``               misordered (relevant, irrelevant) pairs, ties      ``label_ranking_loss``
                               counted, / (|Y| |not Y|); 0 if either is empty
``coverage``                   labels scored >= the lowest relevant label's       ``coverage_error``
                               score; 0 without relevant labels (MULAN's
                               coverage is this minus 1)
``average_precision``          mean over relevant r of (relevant scored >= s_r)   ``label_ranking_average_
                               / (labels scored >= s_r); 1 if all or none         precision_score``
                               are relevant
``hamming_loss``               fraction of labels where ``score > 0`` disagrees   ``hamming_loss`` of
                               with relevance (the calibrated cut)                ``scores > 0``
``one_error``                  1 if the top-scored label (first by position on    --
                               ties) is not relevant (1 when none is)
``kendall_tau_distance``       generalized Kendall distance with penalty p        --
                               between top-label rankings (Fagin et al. 2004)
``footrule_distance``          Spearman footrule between top-label rankings,      --
                               tied labels at their bucket's mean position
=============================  =================================================  ==================

Top-label rankings (Brinker & Huellermeier, Definitions 3.1-3.2): the true one orders the relevant
labels by their value and ties all irrelevant ones at the bottom; the predicted one orders the labels
with a positive score by score (equal scores: lower label index first, the paper's ``argsort+``)
and ties all others at the bottom. Both distances are normalized to [0, 1] by their maximum over
permutations of the instance's labels (d(d-1)/2 pairs for Kendall, floor(d^2/2) for the footrule).
"""

from __future__ import annotations

import torch
from torch import Tensor


def _prepare(scores: Tensor, labels: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """float32 scores with padded entries zeroed, the mask, relevant and irrelevant indicators."""
    if mask is None:
        mask = torch.ones_like(labels, dtype=torch.bool)
    mask = mask.bool()
    scores = torch.where(mask, scores.float(), torch.zeros((), device=scores.device))
    labels = torch.where(mask, labels.float(), torch.zeros((), device=labels.device))
    relevant = (labels > 0) & mask
    return scores, mask, relevant, mask & ~relevant


def _at_or_above(scores: Tensor, mask: Tensor) -> Tensor:
    """``[B, d, d]``: entry (i, j) is True when label j exists and is scored >= label i."""
    return (scores[:, None, :] >= scores[:, :, None]) & mask[:, None, :]


def ranking_loss(scores: Tensor, labels: Tensor, mask: Tensor | None = None) -> Tensor:
    """Fraction of (relevant, irrelevant) label pairs whose irrelevant label scores >= the relevant one.

    Args: ``scores [B, d]``, ``labels [B, d]``, ``mask [B, d]``. Returns ``[B]``.

    Example:
        >>> ranking_loss(torch.tensor([[0.9, 0.2, 0.5]]), torch.tensor([[1.0, 1.0, 0.0]]))
        tensor([0.5000])
    """
    scores, mask, relevant, irrelevant = _prepare(scores, labels, mask)
    # (r, s): r relevant, s irrelevant, s scored >= r
    wrong = (scores[:, None, :] >= scores[:, :, None]) & relevant[:, :, None] & irrelevant[:, None, :]
    pairs = relevant.sum(1) * irrelevant.sum(1)
    return torch.where(pairs > 0, wrong.sum((1, 2)) / pairs.clamp_min(1), torch.zeros_like(pairs, dtype=torch.float32))


def coverage(scores: Tensor, labels: Tensor, mask: Tensor | None = None) -> Tensor:
    """Labels scored at or above the lowest-scored relevant label (scikit-learn's ``coverage_error``).

    Args: ``scores [B, d]``, ``labels [B, d]``, ``mask [B, d]``. Returns ``[B]`` (0 without relevant labels).

    Example:
        >>> coverage(torch.tensor([[0.9, 0.2, 0.5]]), torch.tensor([[1.0, 1.0, 0.0]]))
        tensor([3.])
    """
    scores, mask, relevant, _ = _prepare(scores, labels, mask)
    lowest = torch.where(relevant, scores, torch.full_like(scores, torch.inf)).amin(1, keepdim=True)
    covered = ((scores >= lowest) & mask).sum(1).float()
    return torch.where(relevant.any(1), covered, torch.zeros_like(covered))


def average_precision(scores: Tensor, labels: Tensor, mask: Tensor | None = None) -> Tensor:
    """Label ranking average precision (LRAP), as scikit-learn's ``label_ranking_average_precision_score``.

    Args: ``scores [B, d]``, ``labels [B, d]``, ``mask [B, d]``. Returns ``[B]`` (1 when all or no
    labels are relevant: the ranking then cannot be wrong).

    Example:
        >>> average_precision(torch.tensor([[0.9, 0.2, 0.5]]), torch.tensor([[1.0, 1.0, 0.0]]))
        tensor([0.8333])
    """
    scores, mask, relevant, irrelevant = _prepare(scores, labels, mask)
    above = _at_or_above(scores, mask).float()  # [B, i, j]: j scored >= i
    rank = above.sum(2)
    relevant_rank = (above * relevant[:, None, :]).sum(2)
    precision = torch.where(relevant, relevant_rank / rank.clamp_min(1), torch.zeros_like(rank))
    n_relevant = relevant.sum(1)
    value = precision.sum(1) / n_relevant.clamp_min(1)
    degenerate = (n_relevant == 0) | ~irrelevant.any(1)
    return torch.where(degenerate, torch.ones_like(value), value)


def hamming_loss(scores: Tensor, labels: Tensor, mask: Tensor | None = None, *, threshold: float = 0.0) -> Tensor:
    """Fraction of labels where the calibrated cut ``score > threshold`` disagrees with relevance.

    Args: ``scores [B, d]``, ``labels [B, d]``, ``mask [B, d]``; ``threshold`` the cut (0: the
    calibration point w0 of Definition 2.1). Returns ``[B]``.

    Example:
        >>> hamming_loss(torch.tensor([[0.9, -0.2, 0.5]]), torch.tensor([[1.0, 1.0, 0.0]]))
        tensor([0.6667])
    """
    scores, mask, relevant, _ = _prepare(scores, labels, mask)
    wrong = ((scores > threshold) != relevant) & mask
    return wrong.sum(1) / mask.sum(1).clamp_min(1)


def one_error(scores: Tensor, labels: Tensor, mask: Tensor | None = None) -> Tensor:
    """1 where the top-scored label is not relevant (ties: the first label by position), else 0.

    Args: ``scores [B, d]``, ``labels [B, d]``, ``mask [B, d]``. Returns ``[B]``.

    Example:
        >>> one_error(torch.tensor([[0.9, 0.2, 0.5], [0.1, 0.2, 0.5]]), torch.tensor([[1.0, 1.0, 0.0]] * 2))
        tensor([0., 1.])
    """
    scores, mask, relevant, _ = _prepare(scores, labels, mask)
    top = torch.where(mask, scores, torch.full_like(scores, -torch.inf)).argmax(1, keepdim=True)
    return (~relevant.gather(1, top)).squeeze(1).float()


def _predicted_keys(scores: Tensor, mask: Tensor) -> Tensor:
    """Sort keys of the predicted top-label ranking ``argsort+``: positive scores in a strict order
    (equal scores: lower index first), every other label tied at 0. ``[B, d]``, larger = earlier."""
    d = scores.shape[1]
    index = torch.arange(d, device=scores.device)
    # i precedes j when s_i > s_j, or s_i == s_j and i < j: position = number of labels preceding
    precedes = (scores[:, :, None] > scores[:, None, :]) | (
        (scores[:, :, None] == scores[:, None, :]) & (index[:, None] < index[None, :])
    )
    positive = (scores > 0) & mask
    preceded_by = (precedes & positive[:, :, None] & positive[:, None, :]).sum(1)
    return torch.where(positive, (d - preceded_by).float(), torch.zeros_like(scores))


def _true_keys(labels: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask & (labels > 0), labels.float(), torch.zeros_like(labels, dtype=torch.float32))


def kendall_tau_distance(scores: Tensor, labels: Tensor, mask: Tensor | None = None, *, penalty: float = 0.5) -> Tensor:
    """Generalized Kendall tau distance K^(p) between the predicted and the true top-label ranking.

    A pair ordered both ways costs 1; a pair tied in one ranking and ordered in the other costs
    ``penalty`` (p in [0, 1]; 1/2 is Fagin et al.'s choice); divided by the number of pairs.

    Args: ``scores [B, d]``, ``labels [B, d]`` (grades: larger = preferred), ``mask [B, d]``.
    Returns ``[B]`` in [0, 1] (0 for fewer than two labels).

    Example:
        >>> kendall_tau_distance(torch.tensor([[2.0, 1.0, -1.0]]), torch.tensor([[2.0, 1.0, 0.0]]))
        tensor([0.])
        >>> kendall_tau_distance(torch.tensor([[1.0, 2.0, -1.0]]), torch.tensor([[2.0, 1.0, 0.0]]))
        tensor([0.3333])
    """
    scores, mask, _, _ = _prepare(scores, labels, mask)
    pred = _predicted_keys(scores, mask)
    true = _true_keys(labels, mask)
    a = torch.sign(true[:, :, None] - true[:, None, :])
    b = torch.sign(pred[:, :, None] - pred[:, None, :])
    pair_mask = mask[:, :, None] & mask[:, None, :]
    index = torch.arange(mask.shape[1], device=mask.device)
    pair_mask = pair_mask & (index[:, None] < index[None, :])  # each pair once (bool triu is slow on CPU)
    cost = torch.where((a * b) < 0, 1.0, 0.0) + torch.where((a == 0) != (b == 0), penalty, 0.0)
    pairs = pair_mask.sum((1, 2))
    return (cost * pair_mask).sum((1, 2)) / pairs.clamp_min(1)


def _bucket_positions(keys: Tensor, mask: Tensor) -> Tensor:
    """1-based position of each label, tied labels at the mean position of their bucket. ``[B, d]``."""
    exists = mask[:, None, :]
    before = ((keys[:, None, :] > keys[:, :, None]) & exists).sum(2)
    tied = ((keys[:, None, :] == keys[:, :, None]) & exists).sum(2)
    return before + (tied + 1) / 2


def footrule_distance(scores: Tensor, labels: Tensor, mask: Tensor | None = None) -> Tensor:
    """Spearman footrule between the predicted and the true top-label ranking (bucket positions).

    ``sum_i |pos_true(i) - pos_pred(i)| / floor(n^2 / 2)`` with n the instance's labels and tied labels
    at their bucket's mean position (Fagin et al.'s F^prof).

    Args: ``scores [B, d]``, ``labels [B, d]``, ``mask [B, d]``. Returns ``[B]`` in [0, 1].

    Example:
        >>> footrule_distance(torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[3.0, 2.0, 1.0]]))
        tensor([1.])
    """
    scores, mask, _, _ = _prepare(scores, labels, mask)
    pred = _bucket_positions(_predicted_keys(scores, mask), mask)
    true = _bucket_positions(_true_keys(labels, mask), mask)
    n = mask.sum(1).float()
    most = torch.floor(n * n / 2).clamp_min(1)
    return ((pred - true).abs() * mask).sum(1) / most


LABEL_RANKING_METRICS = {
    "ranking_loss": ranking_loss,
    "hamming_loss": hamming_loss,
    "coverage": coverage,
    "average_precision": average_precision,
    "one_error": one_error,
}
TOP_LABEL_METRICS = {"kendall_tau": kendall_tau_distance, "footrule": footrule_distance}
# the direction of each (for checkpoint monitors): only average precision grows with quality
HIGHER_IS_BETTER = {"average_precision"}
