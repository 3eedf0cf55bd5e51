"""RankBoost as a row of Harrington's Table 2: the RankBoost paper's movie task on the same trials.

    python train.py experiment=harrington2003_cf_rankboost data.path=ratings.csv

Freund et al. (2003, section 6.2, EachMovie) rank a target user's movies with weak rankers built from
the other users' ratings: ``h(x) = 1`` if another user rated the movie above ``theta``, ``0`` below,
and ``q_def`` where that user did not rate it (the paper's abstention). The trials' features are
exactly those ratings, with 0 meaning "not rated" (``datamodules.ratings``), so each trial's 210
training items are one RankBoost query with the target's grades as feedback, and ``0`` is the
abstention value.

Table 2 measures the rank loss ``1/n sum |y_hat - y|`` of predicted grades, and RankBoost predicts an
ordering, not grades. Our reading, documented because the paper has none: a trial's test scores
become grades by the training quantiles, the ``c_g``-th smallest training score (``c_g`` the number of
training items graded at most ``g``) is the upper end of grade ``g``, so the predicted grades keep the
training set's grade shares. The row is opt-in (its own experiment): it answers "where does RankBoost
stand on the same trials", and it is not one of the paper's rows.

Each trial is its own learner, so trials are fitted one after the other; a round is one tensor
operation over every (user, threshold) candidate of that trial (``rankers.boosting.rankboost``).
The experiment is Table 2's (``experiments.harrington2003_cf``) with this row in its ``extra_rows``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from datamodules.ratings import RatingTrials
from metrics.functional import rank_loss
from rankers.boosting.rankboost import fit_rankboost, weak_outputs

# boosting rounds and candidate thresholds per user for the Table 2 row (ratings take few values, so
# the candidates are mostly every distinct rating)
ROUNDS = 40
THRESHOLDS = 10


def grades_by_training_quantiles(train_scores: Tensor, train_y: Tensor, test_scores: Tensor, n_ranks: int) -> Tensor:
    """Grades ``[R, n]`` of ``test_scores [R, n]`` that keep the training grade shares of each run.

    Args: train_scores ``[R, T]``, train_y ``[R, T]`` long grades in ``0..n_ranks-1``, test_scores
    ``[R, n]``. The upper end of grade ``g`` is the ``c_g``-th smallest training score, ``c_g`` the
    number of training items graded at most ``g``; a test score above it gets a higher grade.
    """
    ordered = train_scores.sort(-1).values  # [R, T]
    grades = torch.arange(n_ranks - 1, device=train_y.device)
    at_most = (train_y[:, :, None] <= grades).sum(1)  # [R, k-1]
    empty = at_most == 0  # no training item at or below g: everything is above g
    upper = ordered.gather(1, (at_most - 1).clamp_min(0))  # [R, k-1]
    upper = upper.masked_fill(empty, float("-inf"))
    return (test_scores[:, :, None] > upper[:, None, :]).sum(-1)


def rankboost_scores(
    trials: RatingTrials, *, device: torch.device, rounds: int = ROUNDS, thresholds: int = THRESHOLDS
) -> tuple[Tensor, Tensor]:
    """RankBoost fitted to each trial's training items: its scores of them ``[R, T]`` and of the test
    items ``[R, n]``."""
    train_scores, test_scores = [], []
    for run in range(trials.n_trials):
        x = trials.train_x[run].to(device)
        y = trials.train_y[run].to(device).float()
        one_query = torch.zeros(len(y), dtype=torch.long, device=device)
        fitted = fit_rankboost(x, y, one_query, rounds=rounds, unranked=x == 0, thresholds=thresholds)
        train_scores.append(_ensemble(fitted, x))
        test_scores.append(_ensemble(fitted, trials.test_x[run].to(device)))
    return torch.stack(train_scores), torch.stack(test_scores)


def rankboost_row(
    trials: RatingTrials, *, seed: int, device: torch.device, rounds: int = ROUNDS, thresholds: int = THRESHOLDS
) -> dict[str, Tensor]:
    """``{"RankBoost": per-trial test rank loss [R]}``

    The ``extra_rows`` hook of ``experiments.harrington2003_cf`` (``experiment=harrington2003_cf_rankboost``).

    ``seed`` is unused: RankBoost is deterministic given the trial.
    """
    del seed
    train_scores, test_scores = rankboost_scores(trials, device=device, rounds=rounds, thresholds=thresholds)
    train_y = trials.train_y.to(device)
    predicted = grades_by_training_quantiles(train_scores, train_y, test_scores, trials.n_ranks)
    return {"RankBoost": rank_loss(predicted, trials.test_y.to(device))}


def _ensemble(fitted: dict[str, Tensor], features: Tensor) -> Tensor:
    """``H(x) = sum_t alpha_t h_t(x)`` of ``features [n, d]`` -> ``[n]``."""
    if not fitted:
        return torch.zeros(features.shape[0], device=features.device)
    h = weak_outputs(features, features == 0, fitted["feature"], fitted["threshold"], fitted["q_def"])
    return h @ fitted["alpha"].to(h.dtype)
