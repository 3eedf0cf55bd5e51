"""Click models for simulation, with their closed-form click rates (what the simulator's tests and
the propensity estimators are checked against).

All act on ``rel [..., K]``: the click probability of an examined document at each shown position
(``eps + (1 - 2 eps) * relevance probability``: ``eps`` is the click noise, a click on an examined
irrelevant document and a skip of an examined relevant one).
"""

from __future__ import annotations

import numpy as np

MODELS = ("pbm", "cascade", "dcm")


def relevance_probability(labels: np.ndarray, max_label: float) -> np.ndarray:
    """``(2^y - 1) / (2^ymax - 1)``: the graded label as a click probability (as ULTRA and Ai et al.)."""
    if max_label <= 0:
        return np.zeros_like(labels, dtype=np.float64)
    return (np.exp2(labels) - 1) / (2.0**max_label - 1)


def attractiveness(labels: np.ndarray, max_label: float, eps: float) -> np.ndarray:
    """Click probability of an examined document: ``eps + (1 - 2 eps) * relevance_probability``."""
    return eps + (1 - 2 * eps) * relevance_probability(labels, max_label)


def pbm_examination(k: int, eta: float) -> np.ndarray:
    """Position-based model's examination probabilities ``(1 / position)^eta``, ``[k]``."""
    return (1.0 / np.arange(1, k + 1)) ** eta


def click_probability(model: str, rel: np.ndarray, *, eta: float = 1.0, continuation: float = 0.5) -> np.ndarray:
    """Marginal click probability at each position ``[..., K]`` of a shown list.

    * ``pbm``: ``theta_k * rel_k``, ``theta_k = (1/k)^eta``;
    * ``cascade``: the user scans down and stops at the first click: ``rel_k prod_{j<k} (1 - rel_j)``;
    * ``dcm`` (dependent click model): after a click the user goes on with probability
      ``continuation`` (a skip always goes on): ``P(E_1) = 1``,
      ``P(E_{k+1}) = P(E_k) (1 - rel_k + rel_k * continuation)``, click ``rel_k P(E_k)``.
    """
    if model == "pbm":
        return pbm_examination(rel.shape[-1], eta) * rel
    if model == "cascade":
        continuation = 0.0
    elif model != "dcm":
        raise ValueError(f"click model must be one of {MODELS}, got {model!r}")
    go_on = 1 - rel + rel * continuation
    examined = np.concatenate([np.ones_like(rel[..., :1]), np.cumprod(go_on, -1)[..., :-1]], -1)
    return examined * rel


def sample_clicks(
    model: str, rel: np.ndarray, rng: np.random.Generator, *, eta: float = 1.0, continuation: float = 0.5
) -> np.ndarray:
    """Clicks ``[S, K]`` int8 for S shown lists with examined-click probabilities ``rel [S, K]``."""
    attracted = rng.random(rel.shape) < rel
    if model == "pbm":
        examined = rng.random(rel.shape) < pbm_examination(rel.shape[-1], eta)
        return (examined & attracted).astype(np.int8)
    if model not in ("cascade", "dcm"):
        raise ValueError(f"click model must be one of {MODELS}, got {model!r}")
    stay = continuation if model == "dcm" else 0.0
    # a user reaches position k when every earlier click was followed by going on
    go_on = np.where(attracted, rng.random(rel.shape) < stay, True)
    reached = np.concatenate([np.ones_like(go_on[:, :1]), np.cumprod(go_on, -1)[:, :-1].astype(bool)], -1)
    return (reached & attracted).astype(np.int8)
