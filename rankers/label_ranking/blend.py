"""Algorithm 1 blended with the calibration constraints' logistic solution.

Section 2 of the paper expands each example into binary constraints and hands them to "an arbitrary
linear learning algorithm"; Algorithm 1 is its online perceptron. The calibration constraints alone
(``r in P`` above the zero point, ``r in N`` below it), learned by L2-regularized logistic
regression, are binary relevance (``baselines.fit_binary_relevance``): the learner the field compares
with, strong on the cut. Algorithm 1 adds the pairwise constraints ``P x N`` and ranks better, but is
unregularized and loses on the cut where features are many and labels rare (genbase, enron).

Both are calibrated linear sorting functions (Definition 2.1: ``w_1..w_d`` with ``w_0 = 0``), and so
is any positive combination of them: ``w = (1 - a) w_lr / r_lr + a w_alg1 / r_alg1``, each part
divided by the root mean square of its training scores so that ``a`` means the same on every data
set. The zero point stays where both parts put it, the result exports as one linear scorer.
``choose_blend`` picks ``a`` together with the logistic part's ``C`` by cross-validation on the
training split: of ``C`` in {0.1, 0.3, 1, 3, 10} and ``a`` in {0, 0.1, 0.2, 0.3, 0.5, 0.7, 1}, the
pair whose worse ratio to binary relevance at ``C = 1`` (scikit-learn's default, the baseline users
run) over ranking loss and Hamming loss is lowest, so neither measure pays for the other. ``C``
matters as much as ``a``: genbase wants ``C = 10``, enron ``C = 0.1``, yeast ``C = 0.3``. The
logistic part is ``logistic.fit_logistic`` (all labels in one batched Newton solve), which makes the
35 candidates on 3 folds affordable. Measured on seven MULAN sets in nested CV (docs/label_ranking.md,
bench/label_ranking_share.py): mean losses 0.825 (ranking) and 0.893 (Hamming) of binary relevance's,
the worst set 0.997 / 1.000.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from metrics.label_ranking import hamming_loss, ranking_loss
from rankers.label_ranking.logistic import fit_logistic
from rankers.label_ranking.online import CalibratedPerceptron

Linear = tuple[np.ndarray, np.ndarray]  # weight [d, F], bias [d]


def fit_online(
    features: np.ndarray,
    relevant: np.ndarray,
    *,
    epochs: int = 7,
    n_runs: int = 8,
    seed: int = 0,
    loss: str = "hamming",
) -> Linear:
    """Algorithm 1 on scaled ``features [N, F]`` and ``relevant [N, d]`` (grades; > 0 relevant):
    ``n_runs`` runs, each streaming its own random order ``epochs`` times, averaged weights.

    Returns ``weight [d, F]`` and ``bias [d]`` (a constant feature carries each label's offset).

    Example:
        >>> x = np.array([[1.0, 0.0], [0.0, 1.0]])
        >>> w, b = fit_online(x, np.array([[1, 0], [0, 1]]), epochs=2, n_runs=2)
        >>> ((x @ w.T + b) > 0).astype(int).tolist()
        [[1, 0], [0, 1]]
    """
    x = torch.as_tensor(features, dtype=torch.float32)
    x = torch.cat([x, torch.ones(len(x), 1)], 1)
    y = torch.as_tensor(np.asarray(relevant), dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    learner = CalibratedPerceptron(x.shape[1], y.shape[1], n_runs=n_runs, loss=loss)
    for _ in range(epochs):
        order = torch.stack([torch.randperm(len(x), generator=generator) for _ in range(n_runs)])
        learner.partial_fit(x[order], y[order])
    weights = learner.hypothesis().double().numpy()
    return weights[:, :-1], weights[:, -1]


def score_scale(part: Linear, features: np.ndarray) -> float:
    """Root mean square of the part's scores on ``features [N, F]`` (1 when they are all 0)."""
    weight, bias = part
    rms = float(np.sqrt(np.mean((features @ weight.T + bias) ** 2))) if len(features) else 0.0
    return rms if rms > 1e-12 else 1.0


def blend(
    logistic: Linear, online: Linear, features: np.ndarray, share: float, *, scales: tuple[float, float] | None = None
) -> Linear:
    """``(1 - share) * logistic / rms + share * online / rms``: one calibrated linear sorting function.

    ``scales``: the two parts' ``score_scale`` on ``features`` when the caller already has them (the
    CV blends each pair of parts at every share).

    Example:
        >>> x = np.array([[1.0], [-1.0]])
        >>> w, b = blend((np.array([[4.0]]), np.zeros(1)), (np.array([[-1.0]]), np.zeros(1)), x, 0.25)
        >>> w.tolist(), b.tolist()
        ([[0.5]], [0.0])
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be in [0, 1], got {share}")
    a, b = scales or (score_scale(logistic, features), score_scale(online, features))
    weight = (1 - share) * logistic[0] / a + share * online[0] / b
    bias = (1 - share) * logistic[1] / a + share * online[1] / b
    return weight, bias


def ranking_and_hamming(part: Linear, features: np.ndarray, relevant: np.ndarray) -> np.ndarray:
    """Mean ranking loss and Hamming loss of the cut ``[2]`` (``metrics.label_ranking``)."""
    scores = torch.as_tensor(features @ part[0].T + part[1], dtype=torch.float32)
    labels = torch.as_tensor(np.asarray(relevant), dtype=torch.float32)
    return np.array([float(ranking_loss(scores, labels).mean()), float(hamming_loss(scores, labels).mean())])


Candidate = tuple[float, float]  # (C of the logistic part, Algorithm 1's share)


def choose_blend(
    features: np.ndarray,
    relevant: np.ndarray,
    candidates: Sequence[Candidate],
    *,
    reference: Candidate = (1.0, 0.0),
    folds: int = 3,
    seed: int = 0,
    online: dict | None = None,
) -> tuple[Candidate, dict[Candidate, list[float]]]:
    """The logistic part's ``C`` and Algorithm 1's share, chosen by ``folds``-fold cross-validation on
    ``features [N, F]``, ``relevant [N, d]``: the candidate whose worse ratio to ``reference`` (binary
    relevance at scikit-learn's default ``C``) over ranking loss and Hamming loss is lowest, so that
    neither measure pays for the other. Ties go to the ``C`` nearest the reference's, then the smaller share.

    Returns the chosen ``(C, share)`` and the mean ``[ranking loss, Hamming loss]`` over the folds of
    each candidate and of the reference.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> x = rng.random((60, 3))
        >>> y = (x @ rng.normal(size=(3, 2)) > 0.1).astype(int)
        >>> (C, share), table = choose_blend(x, y, [(1.0, 0.0), (1.0, 0.5)], online={"epochs": 1, "n_runs": 2})
        >>> (C, share) in table, sorted(table)
        (True, [(1.0, 0.0), (1.0, 0.5)])
    """
    evaluated = sorted({(float(C), float(share)) for C, share in [*candidates, reference]})
    order = np.random.default_rng(seed).permutation(len(features))
    totals = {candidate: np.zeros(2) for candidate in evaluated}
    n_folds = min(folds, len(features))
    for held in np.array_split(order, n_folds):
        train = np.setdiff1d(order, held)
        learned = fit_online(features[train], relevant[train], seed=seed, **(online or {}))
        learned_scale = score_scale(learned, features[train])
        for C in sorted({C for C, _ in evaluated}):
            logistic = fit_logistic(features[train], relevant[train], C=C)
            scales = (score_scale(logistic, features[train]), learned_scale)
            for share in (share for c, share in evaluated if c == C):
                mixed = blend(logistic, learned, features[train], share, scales=scales)
                totals[C, share] += ranking_and_hamming(mixed, features[held], relevant[held]) / n_folds
    yardstick = totals[float(reference[0]), float(reference[1])] + 1e-12

    def preference(candidate: Candidate) -> tuple[float, float, float]:
        worse_ratio = float(np.max((totals[candidate] + 1e-12) / yardstick))
        return worse_ratio, abs(np.log(candidate[0] / reference[0])), candidate[1]

    chosen = min(((float(C), float(share)) for C, share in candidates), key=preference)
    return chosen, {candidate: total.tolist() for candidate, total in totals.items()}
