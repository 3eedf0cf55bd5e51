"""Scorers: ``nn.Module``s mapping document features ``[..., F]`` to scores ``[...]``."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "silu": nn.SiLU}


class LinearScorer(nn.Module):
    """``s = w . x + b``."""

    def __init__(self, n_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(n_features, 1)

    def forward(self, features: Tensor) -> Tensor:
        return self.linear(features).squeeze(-1)


class MLPScorer(nn.Module):
    """Feed-forward scorer: ``[Linear -> norm -> activation -> dropout] * len(hidden) -> Linear``.

    ``norm`` is ``"none"`` or ``"layer"``. Batch norm is not offered: its batch statistics would
    mix padded documents into real ones.
    """

    def __init__(
        self,
        n_features: int,
        hidden: Sequence[int] = (128, 64),
        *,
        dropout: float = 0.0,
        norm: str = "none",
        activation: str = "relu",
    ) -> None:
        super().__init__()
        if norm not in ("none", "layer"):
            raise ValueError(f"norm must be 'none' or 'layer', got {norm!r}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        layers: list[nn.Module] = []
        width = n_features
        for size in hidden:
            layers.append(nn.Linear(width, size))
            if norm == "layer":
                layers.append(nn.LayerNorm(size))
            layers.append(ACTIVATIONS[activation]())
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = size
        layers.append(nn.Linear(width, 1))
        self.layers = nn.Sequential(*layers)

    def forward(self, features: Tensor) -> Tensor:
        return self.layers(features).squeeze(-1)
