"""Pure ranking losses: no Lightning, no state. Inputs ``[B, L]``, see each docstring."""

from losses.approxndcg import approx_ndcg_loss, approx_ranks
from losses.calibrated import calibrated_ranking_loss
from losses.ips import ips_click_mass, ips_listwise_loss, ips_pairwise_loss, ips_weights
from losses.lambdaloss import lambdaloss
from losses.lambdarank import lambdarank_loss, lambdas
from losses.linklearn import linklearn_hinge
from losses.listmle import listmle_loss
from losses.listnet import listnet_loss
from losses.margin import margin_cost, margin_lambdas
from losses.neuralndcg import neural_ndcg_loss, neural_sort
from losses.pairwise import (
    delta_ndcg_weight,
    logistic_pair,
    margin_pair,
    ndcg_loss2_weight,
    ndcg_loss2pp_weight,
    pairwise_loss,
)
from losses.ranknet import ranknet_loss

__all__ = [
    "approx_ndcg_loss",
    "approx_ranks",
    "calibrated_ranking_loss",
    "delta_ndcg_weight",
    "ips_click_mass",
    "ips_listwise_loss",
    "ips_pairwise_loss",
    "ips_weights",
    "lambdaloss",
    "lambdarank_loss",
    "lambdas",
    "linklearn_hinge",
    "listmle_loss",
    "listnet_loss",
    "logistic_pair",
    "margin_cost",
    "margin_lambdas",
    "margin_pair",
    "ndcg_loss2_weight",
    "ndcg_loss2pp_weight",
    "neural_ndcg_loss",
    "neural_sort",
    "pairwise_loss",
    "ranknet_loss",
]
