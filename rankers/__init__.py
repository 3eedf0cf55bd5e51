"""LightningModules and the nn.Module scorers they train, and their export.

The re-exports below load on first use (PEP 562): importing a family's math (``rankers.perceptron``,
``rankers.gp``) does not pull in Lightning, which costs about two seconds at start-up."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "RankerModule": "rankers.neural.module",
    "LinearScorer": "rankers.scorers",
    "MLPScorer": "rankers.scorers",
}

__all__ = ["LinearScorer", "MLPScorer", "RankerModule"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rankers' has no attribute {name!r}")
