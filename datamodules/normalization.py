"""Feature normalization as a module, so the exported scorer applies exactly what training saw."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch import Tensor, nn

Normalization = Literal["none", "zscore", "query_zscore", "log1p"]
KINDS = ("none", "zscore", "query_zscore", "log1p")
# below this within-query variance a feature counts as constant (and normalizes to 0)
VARIANCE_FLOOR = 1e-12


class FeatureNormalizer(nn.Module):
    """Maps raw features ``[..., L, F]`` (mask ``[..., L]``) to normalized ones of the same shape.

    * ``none``: identity.
    * ``zscore``: ``(x - mean) / std`` with the training set's per-feature mean and std (buffers).
    * ``query_zscore``: z-score over the real documents of each query (LETOR's QueryLevelNorm
      uses min-max; z-score is robust to one outlier document). Constant features become 0.
    * ``log1p``: ``sign(x) * log1p(|x|)``, for heavy-tailed counts (MSLR, Istella).
    """

    WRITES_INTO = ("none", "zscore")  # the kinds normalize_into writes

    def __init__(
        self, kind: str = "none", mean: Tensor | None = None, std: Tensor | None = None, num_features: int = 0
    ) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"normalization must be one of {KINDS}, got {kind!r}")
        self.kind = kind
        self.variance_floor = VARIANCE_FLOOR  # an attribute: TorchScript reads no module globals
        size = len(mean) if mean is not None else num_features
        self.register_buffer("mean", mean.float() if mean is not None else torch.zeros(size))
        self.register_buffer("std", std.float() if std is not None else torch.ones(size))

    @classmethod
    def fit(cls, kind: str, features: np.ndarray) -> FeatureNormalizer:
        """Statistics from training features ``[N, F]`` (used by ``zscore`` only)."""
        if kind != "zscore" or len(features) == 0:
            return cls(kind, num_features=features.shape[1])
        mean = features.mean(0, dtype=np.float64)
        std = features.std(0, dtype=np.float64)
        std[std < 1e-12] = 1.0  # a constant feature stays finite (becomes 0)
        return cls(kind, torch.from_numpy(mean).float(), torch.from_numpy(std).float())

    def writes_into(self, features: Tensor) -> bool:
        """Whether ``normalize_into`` writes these features: kinds ``none`` and ``zscore``, and features
        that need no gradient (a written buffer is not differentiable)."""
        return self.kind in self.WRITES_INTO and not (features.requires_grad and torch.is_grad_enabled())

    def normalize_into(self, features: Tensor, mask: Tensor | None, out: Tensor) -> Tensor | None:
        """``forward(features, mask)`` written into ``out`` (the features' shape and dtype), the same
        values without allocating a tensor, where ``writes_into(features)``; else None (call ``forward``)."""
        if not self.writes_into(features):
            return None
        if mask is None:
            out.copy_(features)
        else:  # as forward: padded entries (NaN, inf, anything) become 0 first
            torch.where(mask.unsqueeze(-1), features, features.new_zeros(()), out=out)
        if self.kind == "zscore":
            out.sub_(self.mean).div_(self.std)
        return out

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        if mask is not None:
            # padded entries may hold anything (NaN, inf): never let them reach a statistic
            features = features.masked_fill(~mask.unsqueeze(-1), 0.0)
        if self.kind == "zscore":
            return (features - self.mean) / self.std
        if self.kind == "log1p":
            return torch.sign(features) * torch.log1p(features.abs())
        if self.kind == "query_zscore":
            return query_zscore(features, mask, self.variance_floor)
        return features


def query_zscore(features: Tensor, mask: Tensor | None, floor: float) -> Tensor:
    """Per-list z-score of ``features [..., L, F]`` over the real documents ``mask [..., L]`` (None:
    all): each of the F columns separately; a column constant within the list (one document, too) becomes 0.

    The variance is clamped before the square root, not shifted by an epsilon: exporters
    (ONNX) may fold ``var + 1e-12`` to ``var`` in float32, and ``0 / sqrt(0)`` is NaN.
    """
    weight = torch.ones_like(features[..., :1]) if mask is None else mask.unsqueeze(-1).to(features.dtype)
    count = weight.sum(-2, keepdim=True).clamp_min(1.0)
    mean = (features * weight).sum(-2, keepdim=True) / count
    var = ((features - mean).square() * weight).sum(-2, keepdim=True) / count
    varying = var > floor
    return (features - mean) * torch.rsqrt(var.clamp_min(floor)) * varying.to(features.dtype)
