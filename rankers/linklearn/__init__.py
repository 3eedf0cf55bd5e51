"""LinkLearn (Grangier & Bengio): a term-weighting similarity learned from hyperlinks."""

from rankers.linklearn.module import LinkLearnModule, entry_weights

__all__ = ["LinkLearnModule", "entry_weights"]
