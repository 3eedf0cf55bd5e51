"""Calibrated label ranking (Brinker & Huellermeier): rank a fixed set of labels for an instance, with
a zero point that cuts the relevant labels from the others. See docs/label_ranking.md."""

from rankers.label_ranking.module import BinaryRelevanceRanker, CalibratedLabelRanker, NeuralLabelRanker
from rankers.label_ranking.online import CalibratedPerceptron

__all__ = ["BinaryRelevanceRanker", "CalibratedLabelRanker", "CalibratedPerceptron", "NeuralLabelRanker"]
