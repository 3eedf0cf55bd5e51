"""Examination propensities from a click log, under the position-based model
``P(click) = theta_k * gamma_{q,d}``.

* ``em_propensities``: the EM of Wang, Golbandi, Bendersky, Metzler & Najork ("Position Bias
  Estimation for Unbiased Learning to Rank in Personal Search", WSDM 2018, section 4.2-4.3) with one
  relevance parameter per shown (query, document): the E-step's posteriors of (E, R) given a skip,
  the M-step's closed forms. With a logging ranker whose list varies between sessions the same
  document is seen at several positions, which identifies theta. Standard errors by a Poisson
  bootstrap over queries (each replicate warm-started from the estimate).
* ``harvest_propensities``: intervention harvesting (Agarwal, Zaitsev, Wang, Li, Najork & Joachims,
  WSDM 2019; RandPair of Wang et al. 2016 is its special case of swaps with position 1): for each pair
  of positions (k, k'), the documents shown at both give ``theta_k / theta_k'`` as a ratio of
  click-through rates; a weighted least-squares fit of the log-ratios gives every theta.

Both return propensities scaled so that position 1 is 1.0, on the positions 1..K of the log.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from datamodules.clicks.cells import ClickCells

_TINY = 1e-12
# a refit's selection must keep, at every position with clicks, at least this many of them and a quarter
MIN_KEPT_CLICKS = 30


@dataclass
class PropensityEstimate:
    """``propensity [K]`` (position 1 first, position 1 = 1.0), ``stderr [K]`` (bootstrap; None when
    not computed), ``relevance [C]`` the EM's gamma of each cell's document from its fit on every cell
    (refits leave some documents out; None for harvesting)."""

    propensity: np.ndarray
    stderr: np.ndarray | None = None
    relevance: np.ndarray | None = None
    iterations: int = 0
    method: str = "em"

    def as_dict(self) -> dict:
        return {
            "method": self.method,
            "propensity": [float(v) for v in self.propensity],
            "stderr": None if self.stderr is None else [float(v) for v in self.stderr],
            "iterations": self.iterations,
        }


def _em(
    cells: ClickCells, weights: np.ndarray, theta: np.ndarray, gamma: np.ndarray, max_iter: int, tol: float
) -> tuple[np.ndarray, np.ndarray, int]:
    """EM iterations on cell counts scaled by ``weights [C]``; theta ``[K]``, gamma ``[N rows]``."""
    pos, row = cells.position - 1, cells.row
    n = cells.impressions * weights
    c = cells.clicks * weights
    skips = n - c
    per_position = np.bincount(pos, weights=n, minlength=len(theta))
    per_row = np.bincount(row, weights=n, minlength=len(gamma))
    iteration = 0
    for iteration in range(1, max_iter + 1):  # noqa: B007  (the count is returned)
        t, g = theta[pos], gamma[row]
        denominator = np.maximum(1 - t * g, _TINY)
        examined = t * (1 - g) / denominator  # P(E=1, R=0 | skip)
        relevant = (1 - t) * g / denominator  # P(E=0, R=1 | skip)
        new_theta = np.bincount(pos, weights=c + skips * examined, minlength=len(theta)) / np.maximum(
            per_position, _TINY
        )
        gamma = np.bincount(row, weights=c + skips * relevant, minlength=len(gamma)) / np.maximum(per_row, _TINY)
        change = np.abs(new_theta / max(new_theta[0], _TINY) - theta / max(theta[0], _TINY)).max()
        theta = np.clip(new_theta, _TINY, 1.0)
        if change < tol:
            break
    return theta, np.clip(gamma, 0.0, 1.0), iteration


def em_propensities(
    cells: ClickCells,
    *,
    max_iter: int = 2000,
    tol: float = 1e-6,
    bootstrap: int = 10,
    bootstrap_iter: int = 100,
    min_examinations: float = 0.5,
    refits: int = 2,
    seed: int = 0,
) -> PropensityEstimate:
    """Regression EM's propensities (Wang et al. 2018), with a bootstrap standard error.

    Each shown document has its own relevance ``gamma``. A document the log expects to have been
    examined less than about once (``sum_k n_k theta_k``, long lists where it is shown rarely and
    deep) cannot pin its own ``gamma``: one lucky click sets ``gamma = 1``, which makes every skip of
    it unexamined and its click a full examination, and such documents pull the deep propensities up
    (by 6-11% on average over positions 5-10 on six MSLR-style logs with eta 2, docs/clicks.md; about
    0 with the default threshold of 0.5). So the estimate is
    fitted on all cells, then ``refits`` times again on the documents whose expected examinations
    under the last estimate reach ``min_examinations``: a choice made from impressions and
    propensities only, never from the clicks themselves.

    Args:
        cells: the log's (row, position) cells.
        max_iter, tol: stop when no scaled propensity moves by more than ``tol`` in one iteration.
        bootstrap: Poisson-bootstrap replicates over queries for the standard error (0: none).
        bootstrap_iter: EM iterations of a replicate (each starts from the estimate, so few are needed).
        min_examinations: a document's expected examinations to take part in the refits (0: one fit
            on every cell).
        refits: how many times the kept documents are chosen again and the estimate refitted. A refit
            whose selection keeps fewer than ``MIN_KEPT_CLICKS`` clicks or a quarter of a position's
            clicks at some position is not made (sparse logs): the last estimate stands, and the
            standard error is that of the estimate on the cells it was fitted on.
    """
    k = cells.max_position
    n_rows = int(cells.row.max()) + 1 if len(cells.row) else 0
    ctr = np.bincount(cells.row, weights=cells.clicks, minlength=n_rows) / np.maximum(
        np.bincount(cells.row, weights=cells.impressions, minlength=n_rows), 1
    )
    theta0 = np.full(k, 0.5)
    gamma0 = np.clip(ctr * 2, 0.01, 0.99)  # start from click rates, examination 1/2 everywhere
    theta, gamma, iterations = _em(cells, np.ones(len(cells.row)), theta0, gamma0, max_iter, tol)
    relevance = gamma[cells.row]
    kept = np.ones(len(cells.row))  # the cells the final estimate is fitted on (as weights)
    clicks_at = np.bincount(cells.position - 1, weights=cells.clicks, minlength=k)
    for _ in range(refits if min_examinations > 0 else 0):
        expected = np.bincount(cells.row, weights=cells.impressions * (theta / theta[0])[cells.position - 1])
        selected = (expected[cells.row] >= min_examinations).astype(np.float64)
        kept_clicks = np.bincount(cells.position - 1, weights=cells.clicks * selected, minlength=k)
        # a sparse log: some position would keep too few clicks to be estimated from the selection,
        # so the last estimate (fitted on ``kept``) stands rather than one of its positions collapsing
        if np.any((clicks_at > 0) & (kept_clicks < np.maximum(MIN_KEPT_CLICKS, 0.25 * clicks_at))):
            break
        kept = selected
        theta, gamma, more = _em(cells, kept, theta.copy(), gamma.copy(), max_iter, tol)
        iterations += more
    scaled = theta / theta[0]
    stderr = None
    if bootstrap > 0:
        rng = np.random.default_rng(seed)
        n_queries = int(cells.query.max()) + 1
        replicates = []
        for _ in range(bootstrap):
            weights = rng.poisson(1.0, size=n_queries)[cells.query].astype(np.float64) * kept
            t, _, _ = _em(cells, weights, theta.copy(), gamma.copy(), bootstrap_iter, tol)
            replicates.append(t / t[0])
        stderr = np.std(replicates, axis=0, ddof=1)
    return PropensityEstimate(scaled, stderr, relevance, iterations, "em")


def harvest_propensities(cells: ClickCells, *, min_pairs: int = 1) -> PropensityEstimate:
    """Intervention harvesting (Agarwal et al. 2019) from documents shown at several positions.

    For positions ``k != k'`` and the rows shown at both, with click-through rates ``ctr_k`` and
    impressions ``n_k``, ``theta_k / theta_k' = sum_d w_d ctr_{d,k} / sum_d w_d ctr_{d,k'}`` with
    ``w_d = n_{d,k} n_{d,k'} / (n_{d,k} + n_{d,k'})`` (the weight of a difference of two rates). The
    log-ratios are then fitted by weighted least squares (weight: the pair's total w and clicks),
    with log theta_1 = 0. Position pairs with fewer than ``min_pairs`` shared rows or no click at
    either position are left out; a position no pair reaches is NaN.
    """
    k = cells.max_position
    rows = np.unique(cells.row)
    index = np.searchsorted(rows, cells.row)
    n = np.zeros((len(rows), k))
    c = np.zeros((len(rows), k))
    n[index, cells.position - 1] = cells.impressions
    c[index, cells.position - 1] = cells.clicks
    ctr = c / np.maximum(n, 1)
    equations, targets, weights = [], [], []
    for a in range(k):
        for b in range(a + 1, k):
            both = (n[:, a] > 0) & (n[:, b] > 0)
            if both.sum() < min_pairs:
                continue
            w = n[both, a] * n[both, b] / (n[both, a] + n[both, b])
            top, bottom = (w * ctr[both, a]).sum(), (w * ctr[both, b]).sum()
            if top <= 0 or bottom <= 0:
                continue
            row = np.zeros(k)
            row[a], row[b] = 1.0, -1.0
            equations.append(row)
            targets.append(np.log(top / bottom))
            # roughly the inverse variance of a log-ratio of two click sums
            weights.append(1.0 / (1.0 / (w * ctr[both, a]).sum() + 1.0 / (w * ctr[both, b]).sum()))
    if not equations:
        return PropensityEstimate(np.full(k, np.nan), method="harvest")
    a_matrix, y, w = np.array(equations)[:, 1:], np.array(targets), np.sqrt(np.array(weights))
    # log theta_1 = 0: its column is dropped (equations (1, b) read -log theta_b = y)
    solution, *_ = np.linalg.lstsq(a_matrix * w[:, None], y * w, rcond=None)
    reached = np.abs(a_matrix).sum(0) > 0
    log_theta = np.concatenate([[0.0], np.where(reached, solution, np.nan)])
    return PropensityEstimate(np.exp(log_theta), method="harvest")
