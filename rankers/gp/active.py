"""Active learning of preferences (Chu & Ghahramani, section 3): which pair to ask about next.

Three selection rules, each a config value (``strategy``):

- ``entropy``: the paper's criterion, eq. (10), the expected entropy gain of the posterior of the
  pair's two latent values, ``<dH_k> = P(v>u|D) dH_{v>u} + P(v<u|D) dH_{v<u}``, with eq. (9)
  ``dH = -1/2 log det(lambda_new lambda^-1)``. For an unused pair the EP cavity is the posterior
  itself, and the EP (ADF) update of Appendix A makes ``lambda_new = lambda - c lambda 1 1^T lambda``
  with ``c = r (r + z) / sigma_*^2`` (``r = N(z)/Phi(z)``, ``z = mu / sigma_*``,
  ``sigma_*^2 = 2 sigma^2 + s^2``, ``s^2 = 1^T lambda 1`` the variance of ``f(v) - f(u)``), so
  ``dH = -1/2 log(1 - c s^2)``. Only the 2x2 blocks of the posterior enter: O(K) per candidate.
- ``entropy_all``: the "much more expensive alternative" the paper names: the expected entropy
  gain summed over the predictive distributions of all items (each item's variance after the rank-one
  update ``A_ii - c (A_iv - A_iu)^2``), O(n K) per candidate.
- ``random``: a candidate drawn uniformly from the pool.

``select`` scores a pool ``[T, P]`` for ``T`` tasks at once; ``run`` is the sequential loop
(fit, score the pool, ask, add the answer) for ``T`` trials as one tensor program.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rankers.gp.inference import GaussianPosterior
from rankers.gp.likelihoods import inverse_mills
from rankers.gp.preference import (
    difference_rows,
    fit,
    gather_columns,
    lower_solve,
    predict_pairs,
    scatter_pairs,
)

STRATEGIES = ("entropy", "entropy_all", "random")


def _gain_one_outcome(z: Tensor, sigma_star2: Tensor, ratio: Tensor) -> Tensor:
    """``-1/2 log(1 - c ratio)`` with ``c = r (r + z) / sigma_*^2`` for the outcome of sign ``z``."""
    r = inverse_mills(z)
    c = r * (r + z) / sigma_star2
    # c * s^2 < s^2 / sigma_*^2 < 1 exactly; the clamp only guards rounding in float32
    shrink = (c * ratio).clamp(max=1.0 - 1e-6)
    return -0.5 * torch.log1p(-shrink)


def expected_entropy_gain(mu: Tensor, s2: Tensor, sigma: Tensor | float) -> Tensor:
    """Eq. (10): the expected entropy gain of querying pairs with posterior ``f(v)-f(u) ~ N(mu, s2)``.

    Args:
        mu, s2: ``[..., P]``; sigma: the likelihood noise (float or ``[...]``).

    Returns:
        ``[..., P]`` >= 0 (nats). 0 for a pair whose difference the posterior already knows.

    Example:
        >>> g = expected_entropy_gain(torch.tensor([0.0, 0.0, 3.0]), torch.tensor([1.0, 0.01, 1.0]), 0.1)
        >>> bool(g[0] > g[1]) and bool(g[0] > g[2])   # uncertain and undecided pairs are worth most
        True
    """
    sigma = torch.as_tensor(sigma, dtype=mu.dtype, device=mu.device)
    if sigma.dim():
        sigma = sigma.reshape(sigma.shape + (1,) * (mu.dim() - sigma.dim()))
    s2 = s2.clamp_min(0.0)
    star2 = 2 * sigma * sigma + s2
    z = mu / star2.sqrt()
    p = torch.special.ndtr(z)
    return p * _gain_one_outcome(z, star2, s2) + (1 - p) * _gain_one_outcome(-z, star2, s2)


def expected_entropy_gain_all(
    state: GaussianPosterior, prior: Tensor, v: Tensor, u: Tensor, cand_v: Tensor, cand_u: Tensor, sigma: Tensor | float
) -> Tensor:
    """The expensive alternative of section 3: expected gain summed over all items' predictive
    entropies, ``sum_i -1/2 log(1 - c (A_iv - A_iu)^2 / A_ii)`` averaged over the two outcomes.

    Args: as ``predict_pairs``. Returns ``[T, P]``.
    """
    rows = difference_rows(prior, v, u)  # D K: [T, K, n]
    sw = state.root[..., None]
    v_all = lower_solve(state.chol, sw * rows)  # [T, K, n]
    diag = torch.diagonal(prior, dim1=-2, dim2=-1)
    a_diag = (diag - (v_all * v_all).sum(-2)).clamp_min(torch.finfo(prior.dtype).tiny)  # [T, n]
    v_cand = gather_columns(v_all, cand_v) - gather_columns(v_all, cand_u)  # [T, K, P]
    cand_rows = difference_rows(prior, cand_v, cand_u)  # D_c K: [T, P, n]
    column_diff = cand_rows - v_cand.transpose(-1, -2) @ v_all  # A_{., v} - A_{., u}: [T, P, n]
    mu, s2, _ = predict_pairs(state, prior, v, u, cand_v, cand_u, sigma)
    sigma = torch.as_tensor(sigma, dtype=mu.dtype, device=mu.device)
    if sigma.dim():
        sigma = sigma[..., None]
    star2 = (2 * sigma * sigma + s2)[..., None]  # [T, P, 1]
    z = (mu / star2[..., 0].sqrt())[..., None]
    ratio = torch.minimum(column_diff.square() / a_diag[..., None, :], s2[..., None])  # Cauchy-Schwarz bound
    p = torch.special.ndtr(z)
    gain = p * _gain_one_outcome(z, star2, ratio) + (1 - p) * _gain_one_outcome(-z, star2, ratio)
    return gain.sum(-1)


def select(
    strategy: str,
    state: GaussianPosterior,
    prior: Tensor,
    v: Tensor,
    u: Tensor,
    cand_v: Tensor,
    cand_u: Tensor,
    available: Tensor,
    sigma: Tensor | float,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Index ``[T]`` of the candidate each task asks about next (only ``available [T, P]`` ones)."""
    if strategy == "random":
        score = torch.rand(available.shape, generator=generator, dtype=prior.dtype).to(prior.device)
    elif strategy == "entropy":
        mu, s2, _ = predict_pairs(state, prior, v, u, cand_v, cand_u, sigma)
        score = expected_entropy_gain(mu, s2, sigma)
    elif strategy == "entropy_all":
        score = expected_entropy_gain_all(state, prior, v, u, cand_v, cand_u, sigma)
    else:
        raise ValueError(f"active learning strategy must be one of {STRATEGIES}, got {strategy!r}")
    return score.masked_fill(~available, float("-inf")).argmax(-1)


def ordered_pairs(target: Tensor) -> tuple[Tensor, Tensor]:
    """Every item pair ``(i, j)`` with ``target[i] > target[j]``: ``(i [M], j [M])`` (ties left out)."""
    i, j = torch.nonzero(target[:, None] > target[None, :], as_tuple=True)
    return i, j


def pair_error(latent: Tensor, target: Tensor | None = None, pairs: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """Fraction of item pairs with different ``target`` that ``latent`` orders the other way.

    Args:
        latent: ``[T, n]`` predicted utilities; target: ``[n]`` the true values (or give
            ``pairs = ordered_pairs(target)``, computed once for many calls).

    Returns:
        ``[T]``; a tie in ``latent`` counts as half an error.

    Example:
        >>> pair_error(torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([3.0, 2.0, 1.0]))
        tensor([1.])
    """
    i, j = ordered_pairs(target) if pairs is None else pairs
    diff = latent[..., i] - latent[..., j]  # should be > 0
    wrong = (diff < 0).to(latent.dtype) + 0.5 * (diff == 0).to(latent.dtype)
    return wrong.sum(-1) / max(len(i), 1)


@dataclass
class ActiveRun:
    """Result of ``run``: ``errors [T, queries + 1]`` (before any query, then after each one),
    the asked pairs ``v, u [T, k0 + queries]`` (preferred first), and Newton steps per fit."""

    errors: Tensor
    v: Tensor
    u: Tensor
    newton_steps: list[int]


def run(
    prior: Tensor,
    target: Tensor,
    pool_v: Tensor,
    pool_u: Tensor,
    init_v: Tensor,
    init_u: Tensor,
    *,
    queries: int,
    strategy: str,
    sigma: float,
    generator: torch.Generator | None = None,
    error: Callable[[Tensor], Tensor] | None = None,
    inference: str = "ep",
) -> ActiveRun:
    """Sequential active learning for ``T`` trials at once.

    Args:
        prior: ``[n, n]`` (shared) or ``[T, n, n]`` prior covariance of the ``n`` items.
        target: ``[n]`` the oracle's values (a query about ``(a, b)`` is answered ``a > b`` when
            ``target[a] > target[b]``); pool_v, pool_u: ``[T, P]`` the unlabelled candidate pairs
            (orientation irrelevant); init_v, init_u: ``[T, k0]`` the pairs labelled at the start.
        queries: how many pairs to ask; strategy: one of ``STRATEGIES``.
        error: ``latent [T, n] -> [T]`` (default: ``pair_error`` against ``target`` over all pairs).
        inference: ``ep`` (the paper's) or ``laplace``: the Gaussian posterior each step fits.

    Each step fits the posterior (warm-started from the previous step), scores the still
    unused pool pairs, asks each trial's best one, and adds the oracle's answer.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"active learning strategy must be one of {STRATEGIES}, got {strategy!r}")
    n = prior.shape[-1]
    if error is None:
        pairs = ordered_pairs(target)
        error = lambda latent: pair_error(latent, pairs=pairs)  # noqa: E731
    v, u = _orient(init_v, init_u, target)
    available = torch.ones(pool_v.shape, dtype=torch.bool, device=pool_v.device)
    rows = torch.arange(pool_v.shape[0], device=pool_v.device)
    errors, steps = [], []
    alpha0 = sites = None
    for q in range(queries + 1):
        state = fit(prior, v, u, sigma, alpha0=alpha0, sites=sites, inference=inference)
        steps.append(state.iterations)
        latent = (prior @ scatter_pairs(state.alpha, v, u, n)[..., None])[..., 0]  # f_hat = K D^T alpha
        errors.append(error(latent))
        if q == queries:
            break
        pick = select(strategy, state, prior, v, u, pool_v, pool_u, available, sigma, generator)
        new_v, new_u = _orient(pool_v[rows, pick][:, None], pool_u[rows, pick][:, None], target)
        available[rows, pick] = False
        v, u = torch.cat([v, new_v], 1), torch.cat([u, new_u], 1)
        # warm starts: the previous solution, the new pair's entry 0 (Laplace: alpha; EP: its sites)
        alpha0 = torch.cat([state.alpha, state.alpha.new_zeros(len(rows), 1)], 1)
        sites = tuple(torch.cat([t, t.new_zeros(len(rows), 1)], 1) for t in state.sites)
    return ActiveRun(errors=torch.stack(errors, 1), v=v, u=u, newton_steps=steps)


def _orient(a: Tensor, b: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """The oracle's answer: ``(preferred, other)`` for pairs ``(a, b)`` by ``target``."""
    first = target[a] > target[b]
    return torch.where(first, a, b), torch.where(first, b, a)
