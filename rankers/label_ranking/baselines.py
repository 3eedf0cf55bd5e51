"""The baselines label ranking is compared with, on the same (scaled) arrays: binary relevance with
logistic regression, and scikit-multilearn's ML-kNN when it is installed."""

from __future__ import annotations

import warnings

import numpy as np


def fit_binary_relevance(
    features: np.ndarray, relevant: np.ndarray, *, C: float = 1.0, max_iter: int = 1000
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
            model = LogisticRegression(C=C, max_iter=max_iter).fit(features, column)
        weight[label], bias[label] = model.coef_[0], model.intercept_[0]
    return weight, bias


def mlknn_scores(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, *, k: int = 10) -> np.ndarray | None:
    """ML-kNN's posterior P(relevant) - 1/2 per label ``[N, d]`` (cut at 0 = its own 1/2 rule), or None
    when scikit-multilearn is not installed or fails with the installed scikit-learn."""
    try:
        from skmultilearn.adapt import MLkNN
    except ImportError:
        return None
    try:
        model = MLkNN(k=k).fit(train_x, (train_y > 0).astype(int))
        proba = model.predict_proba(test_x)
    except Exception:  # scikit-multilearn is unmaintained; its calls into scikit-learn break across versions
        return None
    return np.asarray(proba.todense() if hasattr(proba, "todense") else proba, dtype=np.float32) - 0.5
