"""Gradient-trained scorers (RankNet, LambdaRank, ListNet, ListMLE, ApproxNDCG, NeuralNDCG, LambdaLoss):
one LightningModule over any loss of ``losses/``."""

from rankers.neural.module import RankerModule

__all__ = ["RankerModule"]
