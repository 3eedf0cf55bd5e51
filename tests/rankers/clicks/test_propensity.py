"""Propensity estimators against the simulation's own examination probabilities."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.clicks.cells import aggregate
from datamodules.clicks.click_models import attractiveness, pbm_examination, sample_clicks
from rankers.clicks import em_propensities, harvest_propensities


def _simulated_cells(eta: float, queries: int = 150, docs: int = 20, sessions: int = 150, seed: int = 0):
    """A PBM log: noisy label logging ranker redrawn per session, top 10, 10% click noise."""
    rng = np.random.default_rng(seed)
    rows, positions, clicks, session_ids = [], [], [], []
    labels = rng.integers(0, 5, size=(queries, docs)).astype(float)
    rel = attractiveness(labels, 4.0, 0.1)
    for q in range(queries):
        scores = labels[q] + rng.normal(size=(sessions, docs))
        shown = np.argsort(-scores, 1)[:, :10]
        c = sample_clicks("pbm", rel[q][shown], rng, eta=eta)
        rows.append(q * docs + shown.ravel())
        positions.append(np.tile(np.arange(1, 11), sessions))
        clicks.append(c.ravel())
        session_ids.append(np.repeat(np.arange(q * sessions, (q + 1) * sessions), 10))
    offsets = np.arange(0, queries * docs + 1, docs)
    cat = np.concatenate
    return aggregate(cat(rows), cat(positions), cat(clicks), cat(session_ids), offsets)


@pytest.mark.parametrize("eta", [1.0, 2.0])
def test_em_recovers_the_simulated_propensities(eta: float) -> None:
    estimate = em_propensities(_simulated_cells(eta), bootstrap=10)
    truth = pbm_examination(10, eta)
    assert estimate.propensity[0] == 1.0
    error = np.abs(estimate.propensity - truth)
    assert np.all((error <= 0.1 * truth) | (error <= 4 * estimate.stderr)), (estimate.propensity, estimate.stderr)
    assert np.all(estimate.stderr[1:] > 0)


def test_em_relevance_tracks_the_labels() -> None:
    cells = _simulated_cells(1.0, queries=60)
    estimate = em_propensities(cells, bootstrap=0)
    gamma = np.zeros(cells.row.max() + 1)
    gamma[cells.row] = estimate.relevance
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, size=(60, 20)).astype(float).ravel()
    shown = np.unique(cells.row)
    assert np.corrcoef(gamma[shown], attractiveness(labels[shown], 4.0, 0.1))[0, 1] > 0.8


def test_harvesting_recovers_the_simulated_propensities() -> None:
    estimate = harvest_propensities(_simulated_cells(1.0))
    np.testing.assert_allclose(estimate.propensity, pbm_examination(10, 1.0), rtol=0.15)


def test_randpair_swaps_alone_identify_the_propensities() -> None:
    """A fixed logging ranker (no noise): only RandPair's swaps with position 1 move documents, and
    harvesting reads theta_k / theta_1 from them."""
    from datamodules.clicks.simulate import Simulation, simulate_query

    rng = np.random.default_rng(5)
    sim = Simulation(eta=1.0, noise=0.0, swap=1.0)
    rows, positions, clicks, sessions = [], [], [], []
    for q in range(200):
        labels = rng.integers(0, 5, size=15).astype(float)
        shown, c = simulate_query(attractiveness(labels, 4.0, 0.1), labels, 200, sim, rng)
        rows.append(q * 15 + shown.ravel())
        positions.append(np.tile(np.arange(1, 11), 200))
        clicks.append(c.ravel())
        sessions.append(np.repeat(np.arange(q * 200, (q + 1) * 200), 10))
    cat = np.concatenate
    cells = aggregate(cat(rows), cat(positions), cat(clicks), cat(sessions), np.arange(0, 200 * 15 + 1, 15))
    np.testing.assert_allclose(harvest_propensities(cells).propensity, pbm_examination(10, 1.0), rtol=0.15)


def _long_list_cells(seed: int, queries: int = 300, docs: int = 100, sessions: int = 150):
    """Long lists, few relevant documents, a noisy label logger (sd 2), eta 2, top 10 shown: most
    documents are shown rarely and only deep, as in MSLR-style logs."""
    rng = np.random.default_rng(seed)
    labels = np.minimum(rng.geometric(0.45, size=(queries, docs)) - 1, 4).astype(float)
    rel = attractiveness(labels, 4.0, 0.1)
    rows, positions, clicks, session_ids = [], [], [], []
    for q in range(queries):
        shown = np.argsort(-(labels[q] + 2.0 * rng.normal(size=(sessions, docs))), 1)[:, :10]
        rows.append(q * docs + shown.ravel())
        positions.append(np.tile(np.arange(1, 11), sessions))
        clicks.append(sample_clicks("pbm", rel[q][shown], rng, eta=2.0).ravel())
        session_ids.append(np.repeat(np.arange(q * sessions, (q + 1) * sessions), 10))
    cat = np.concatenate
    return aggregate(cat(rows), cat(positions), cat(clicks), cat(session_ids), np.arange(0, queries * docs + 1, docs))


def test_em_refit_on_examined_documents_removes_the_deep_positions_upward_bias() -> None:
    """One fit on every cell overestimates positions 5-10 on long lists (documents examined under
    once each, whose lucky clicks set gamma = 1); the refits on documents examined at least half a
    time do not (mean relative error over positions 5-10 and 4 logs)."""
    truth = pbm_examination(10, 2.0)
    every, refit = [], []
    for seed in range(4):
        cells = _long_list_cells(seed)
        every.append(em_propensities(cells, bootstrap=0, min_examinations=0).propensity[4:] / truth[4:] - 1)
        refit.append(em_propensities(cells, bootstrap=0).propensity[4:] / truth[4:] - 1)
    assert np.mean(every) > 0.02
    assert abs(np.mean(refit)) < np.mean(every)
    assert np.abs(refit).max() < 0.15


def test_em_refit_is_not_made_where_the_selection_would_leave_a_position_few_clicks() -> None:
    """20 sessions a query: selecting well-examined documents would leave positions 8-10 a handful of
    clicks (a refit there fell to -46% at position 10), so the one fit on every cell stands."""
    cells = _long_list_cells(0, sessions=20)
    one_fit = em_propensities(cells, bootstrap=0, min_examinations=0).propensity
    np.testing.assert_array_equal(em_propensities(cells, bootstrap=0).propensity, one_fit)
