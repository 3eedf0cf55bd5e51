"""LinkLearn (Grangier & Bengio): a term-weighting similarity learned from hyperlinks.

``rankers.linklearn.model`` holds the math (term-weight MLPs, similarity, hinge, sparse products);
``rankers.linklearn.module`` the LightningModule that trains, validates, evaluates and exports it.
"""

from rankers.linklearn.model import TermWeight, collection_scores, entry_weights, link_loss, pair_similarity
from rankers.linklearn.module import LinkLearnModule

__all__ = ["LinkLearnModule", "TermWeight", "collection_scores", "entry_weights", "link_loss", "pair_similarity"]
