"""Online ordinal perceptrons: PRank (Crammer & Singer 2001), Harrington's OAP-BPM / -Bagg / -VP, PRank-VP
and the Widrow-Hoff baseline; R runs x N perceptrons as one tensor."""

from rankers.perceptron.ensemble import PRankEnsemble, WidrowHoff, rank_of

__all__ = ["PRankEnsemble", "WidrowHoff", "rank_of"]
