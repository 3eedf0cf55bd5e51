"""LightningModules and the nn.Module scorers they train, and their export."""

from rankers.base import RankerModule
from rankers.scorers import LinearScorer, MLPScorer

__all__ = ["LinearScorer", "MLPScorer", "RankerModule"]
