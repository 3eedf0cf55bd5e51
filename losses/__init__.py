"""Pure ranking losses: no Lightning, no state. Inputs ``[B, L]``, see each docstring."""

from losses.lambdarank import lambdarank_loss, lambdas
from losses.linklearn import linklearn_hinge
from losses.margin import margin_cost, margin_lambdas
from losses.ranknet import ranknet_loss

__all__ = ["lambdarank_loss", "lambdas", "linklearn_hinge", "margin_cost", "margin_lambdas", "ranknet_loss"]
