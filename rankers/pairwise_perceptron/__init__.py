"""Pairwise perceptrons over query documents: plain, pocket, averaged, voted and Elsas et al.'s Committee
Perceptron."""

from rankers.pairwise_perceptron.perceptron import PairwisePerceptron, preference_pairs, rank_vote_scores

__all__ = ["PairwisePerceptron", "preference_pairs", "rank_vote_scores"]
