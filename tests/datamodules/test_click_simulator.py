"""The click simulator against the click models' closed forms, and its CLI end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from datamodules.clicks import read_click_log
from datamodules.clicks.__main__ import main
from datamodules.clicks.click_models import attractiveness, click_probability, sample_clicks

REL = np.array([0.9, 0.1, 0.5, 0.7, 0.3])


def _slow_rates(model: str, rel: np.ndarray, eta: float, continuation: float) -> np.ndarray:
    """The closed forms written as the user's walk down the list, one position at a time."""
    rates, reach = [], 1.0
    for k, r in enumerate(rel, 1):
        if model == "pbm":
            rates.append((1.0 / k) ** eta * r)
            continue
        rates.append(reach * r)
        stay = 0.0 if model == "cascade" else continuation
        reach = reach * ((1 - r) + r * stay)
    return np.array(rates)


@pytest.mark.parametrize("model", ["pbm", "cascade", "dcm"])
def test_closed_form_matches_the_walk(model: str) -> None:
    np.testing.assert_allclose(
        click_probability(model, REL, eta=2.0, continuation=0.4), _slow_rates(model, REL, 2.0, 0.4), rtol=1e-12
    )


@pytest.mark.parametrize("model", ["pbm", "cascade", "dcm"])
def test_sampled_click_rates_match_the_closed_form(model: str) -> None:
    sessions = 200_000
    clicks = sample_clicks(model, np.tile(REL, (sessions, 1)), np.random.default_rng(3), eta=1.5, continuation=0.4)
    expected = click_probability(model, REL, eta=1.5, continuation=0.4)
    error = np.sqrt(expected * (1 - expected) / sessions)
    assert np.all(np.abs(clicks.mean(0) - expected) < 4 * error + 1e-9)


def test_pbm_click_rate_with_noise() -> None:
    """P(click at k) = theta_k (eps + (1 - 2 eps) (2^y - 1) / (2^ymax - 1)), for labels 0..4."""
    labels = np.array([4.0, 0.0, 2.0])
    rel = attractiveness(labels, 4.0, 0.1)
    np.testing.assert_allclose(rel, [0.9, 0.1, 0.1 + 0.8 * 3 / 15])
    np.testing.assert_allclose(click_probability("pbm", rel, eta=1.0), rel / np.arange(1, 4))


def test_cli_writes_a_log_the_reader_accepts(tmp_path: Path) -> None:
    letor = tmp_path / "train.txt"
    rng = np.random.default_rng(0)
    lines = [
        f"{rng.integers(0, 3)} qid:{q} 1:{rng.normal():.3f} 2:{rng.normal():.3f} # q{q}d{d}"
        for q in range(1, 6)
        for d in range(12)
    ]
    letor.write_text("\n".join(lines) + "\n")
    main(["simulate", "--letor", str(letor), "--out", str(tmp_path / "log"), "--sessions", "20-30", "--eta", "2"])
    log = read_click_log(tmp_path / "log" / "features.txt", tmp_path / "log" / "clicks.tsv")
    truth = json.loads((tmp_path / "log" / "simulation.json").read_text())
    assert 100 <= log.counts["sessions"] == truth["sessions"] <= 150
    assert log.max_position == 10 and np.allclose(truth["propensity"][1], 0.25)
    sessions = np.bincount(log.session)
    assert (sessions == 10).all()  # top 10 of 12 shown in every session
    # the shown lists vary between sessions: some documents are seen at several positions
    positions = {(r, p) for r, p in zip(log.row.tolist(), log.position.tolist(), strict=True)}
    assert len(positions) > len(set(log.row.tolist()))
