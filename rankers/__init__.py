"""LightningModules and the nn.Module scorers they train, and their export."""

from rankers.neural.module import RankerModule
from rankers.scorers import LinearScorer, MLPScorer

__all__ = ["LinearScorer", "MLPScorer", "RankerModule"]
