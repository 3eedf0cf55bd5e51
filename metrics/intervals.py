"""Confidence intervals of a measure over independent trials (a paper's ``mean ± 95%`` cell).

>>> import torch
>>> mean, half = student_t_interval(torch.tensor([1.0, 2.0, 3.0, 4.0]))
>>> mean, round(half, 4)
(2.5, 2.0543)
"""

from __future__ import annotations

import math

import torch

__all__ = ["student_t_interval", "t_central_probability", "t_quantile"]


def student_t_interval(values: torch.Tensor, confidence: float = 0.95) -> tuple[float, float | None]:
    """Mean and half-width of the Student-t confidence interval of ``values [n]``; the half-width is
    None for a single value (no interval, where the formula gives NaN)."""
    n = values.numel()
    mean = values.double().mean().item()
    if n < 2:
        return mean, None
    half = t_quantile(confidence, n - 1) * values.double().std(unbiased=True).item() / n**0.5
    return mean, half


def t_central_probability(t: float, df: int) -> float:
    """``P(|T| <= t)`` for Student's t with an integer ``df``: Abramowitz & Stegun 26.7.3 (odd ``df``)
    and 26.7.4 (even), the finite sums in ``cos(atan(t / sqrt(df)))`` (exact up to rounding)."""
    theta = math.atan(t / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    first = 3 if df % 2 else 2  # odd: 1 + 2/3 cos^2 + (2.4)/(3.5) cos^4 + ...; even: 1 + 1/2 cos^2 + ...
    total = term = 1.0
    for k in range(first, df - 1, 2):
        term *= cos2 * (k - 1) / k
        total += term
    if df % 2 == 0:
        return math.sin(theta) * total
    if df == 1:
        return 2 * theta / math.pi
    return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)


def t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student-t quantile: ``t`` with ``P(|T| <= t) = confidence``, ``T ~ t(df)``.

    Bisection on :func:`t_central_probability` for ``df`` up to 1000 (to the last bit; scipy.stats
    would add ~0.5 s of imports to a first run, scipy.special ~0.2 s), ``scipy.special.stdtrit`` beyond.

    Example:
        >>> round(t_quantile(0.95, 19), 6)  # 20 trials
        2.093024
    """
    if not 0 < confidence < 1 or df < 1:
        raise ValueError(f"need 0 < confidence < 1 and df >= 1, got {confidence}, {df}")
    if df > 1000:
        from scipy.special import stdtrit

        return float(stdtrit(df, 0.5 + confidence / 2))
    low, high = 0.0, 1.0
    while t_central_probability(high, df) < confidence:
        low, high = high, 2 * high
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (middle, high) if t_central_probability(middle, df) < confidence else (low, middle)
    return high
