"""The baselines label ranking is compared with, on the same (scaled) arrays: binary relevance with
logistic regression, and scikit-multilearn's ML-kNN when it is installed."""

from __future__ import annotations

import warnings

import numpy as np


def fit_binary_relevance(
    features: np.ndarray, relevant: np.ndarray, *, C: float = 1.0, tol: float = 1e-4, max_iter: int = 1000
) -> tuple[np.ndarray, np.ndarray]:
    """One scikit-learn ``LogisticRegression`` per label: ``weight [d, F]``, ``bias [d]`` (float32).

    A label constant on the training set (never or always relevant) gets weight 0 and bias -1 or +1,
    the only prediction its data supports (LogisticRegression refuses a single class).

    Example:
        >>> x = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> w, b = fit_binary_relevance(x, np.array([[0, 1], [0, 1], [1, 1], [1, 1]]))
        >>> bool(w[0, 0] > 0), w[1].tolist(), b[1].item()
        (True, [0.0], 1.0)
    """
    from sklearn.linear_model import LogisticRegression

    relevant = np.asarray(relevant) > 0
    d = relevant.shape[1]
    weight = np.zeros((d, features.shape[1]), dtype=np.float32)
    bias = np.zeros(d, dtype=np.float32)
    for label in range(d):
        column = relevant[:, label]
        if column.all() or not column.any():
            bias[label] = 1.0 if column.all() else -1.0
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a ConvergenceWarning at max_iter is the baseline's own business
            model = LogisticRegression(C=C, tol=tol, max_iter=max_iter).fit(features, column)
        weight[label], bias[label] = model.coef_[0], model.intercept_[0]
    return weight, bias


def mlknn_scores(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, *, k: int = 10) -> np.ndarray | None:
    """ML-kNN's (Zhang & Zhou 2007) posterior P(relevant | neighbour count) - 1/2 per label ``[N, d]``
    (cut at 0 = its own rule), from scikit-multilearn's fitted model; None when it is not installed.

    scikit-multilearn 0.2.0's ``predict_proba`` returns the posterior's numerator only, so the
    posterior is computed here from the fitted priors and conditionals, as its ``predict`` compares them.
    """
    try:
        from skmultilearn.adapt import MLkNN, mlknn
    except ImportError:
        return None
    from sklearn.neighbors import NearestNeighbors

    # (its fitted tables are private attributes: _prior_prob_true, _cond_prob_true, ...)
    # scikit-multilearn 0.2.0 calls NearestNeighbors(k) positionally, which scikit-learn >= 1.0 refuses:
    # give its module a NearestNeighbors that takes k that way (its only call)
    mlknn.NearestNeighbors = lambda k, **options: NearestNeighbors(n_neighbors=k, **options)
    relevant = (np.asarray(train_y) > 0).astype(int)
    model = MLkNN(k=k).fit(train_x, relevant)
    neighbours = model.knn_.kneighbors(test_x, k, return_distance=False)
    counts = relevant[neighbours].sum(1)  # [N, d]: relevant neighbours per label
    labels = np.arange(relevant.shape[1])
    true_cond = np.asarray(model._cond_prob_true.toarray())[labels, counts]
    false_cond = np.asarray(model._cond_prob_false.toarray())[labels, counts]
    prior_true = np.asarray(model._prior_prob_true, dtype=np.float64).reshape(-1)
    prior_false = np.asarray(model._prior_prob_false, dtype=np.float64).reshape(-1)
    numerator = prior_true * true_cond
    posterior = numerator / np.maximum(numerator + prior_false * false_cond, 1e-300)
    return (posterior - 0.5).astype(np.float32)
