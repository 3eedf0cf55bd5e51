"""Harrington (2003)'s synthetic ordinal data (section 4.1) and the explicit polynomial feature map,
apart from the Lightning data modules (``datamodules.ordinal`` re-exports them) so that the Table 1
experiment, which streams tensors itself, starts without importing Lightning."""

from __future__ import annotations

import math

import torch

# Harrington (2003), section 4.1: c = (-inf, -1, -0.1, 0.25, 1), ranks 1..5
HARRINGTON_CUTS = (-1.0, -0.1, 0.25, 1.0)


def harrington_synthetic(n: int, generator: torch.Generator, *, noise: float = 0.125) -> tuple:
    """``x`` uniform on the unit square ``[n, 2]``.

    ``y = max{r : 10(x1-.5)(x2-.5) + noise > c_r}``, 0-based ``[n]``.
    """
    x = torch.rand(n, 2, generator=generator, dtype=torch.float64)
    value = 10 * (x[:, 0] - 0.5) * (x[:, 1] - 0.5) + noise * torch.randn(n, generator=generator, dtype=torch.float64)
    y = torch.bucketize(value, torch.tensor(HARRINGTON_CUTS, dtype=torch.float64), right=False)
    return x.float(), y.long()


def polynomial_features(x: torch.Tensor, degree: int = 2) -> torch.Tensor:
    """Explicit feature map of the kernel ``(x . x' + 1)^degree`` (degree 1 or 2): ``phi(x).phi(x') = K``.

    For degree 2 and ``d`` inputs: ``x_i^2``, ``sqrt(2) x_i x_j`` (i < j), ``sqrt(2) x_i``, ``1``.
    """
    if degree == 1:
        return torch.cat([x, torch.ones_like(x[..., :1])], -1)
    if degree != 2:
        raise ValueError(f"degree must be 1 or 2, got {degree}")
    d = x.shape[-1]
    i, j = torch.triu_indices(d, d, offset=1)
    cross = math.sqrt(2) * x[..., i] * x[..., j]
    return torch.cat([x.square(), cross, math.sqrt(2) * x, torch.ones_like(x[..., :1])], -1)
