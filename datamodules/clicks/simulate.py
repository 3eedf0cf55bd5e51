"""The click simulator: from a LETOR file with labels, a logging ranker and a click model, write a
click log (``features`` + ``clicks`` TSV) and ``simulation.json`` (the truth: the examination
probabilities, for checking estimators).

The logging ranker's scores are redrawn each session (``score + noise * N(0, 1)``), so the shown list
varies between sessions and the same document appears at several positions: that is what makes
propensities identifiable from the log alone (regression EM) and what intervention harvesting uses.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datamodules.clicks.click_models import MODELS, attractiveness, pbm_examination, sample_clicks
from datamodules.letor_io import LetorData, read_letor


@dataclass
class Simulation:
    """What to simulate. ``sessions``: per query, an int or an inclusive ``(low, high)`` range."""

    click_model: str = "pbm"
    eta: float = 1.0
    eps: float = 0.1
    continuation: float = 0.5
    top_k: int = 10
    sessions: tuple[int, int] = (100, 200)
    ranker: str = "labels"
    noise: float = 1.0
    swap: float = 0.0
    seed: int = 0


def logging_scores(data: LetorData, ranker: str) -> np.ndarray:
    """The logging ranker's base scores ``[N]``: ``labels``, ``feature:J`` (1-based feature J) or
    ``scorer:PATH`` (an exported TorchScript scorer, ``[L, F] -> [L]``)."""
    if ranker == "labels":
        return data.labels.astype(np.float64)
    kind, _, value = ranker.partition(":")
    if kind == "feature":
        column = int(value) - 1
        if not 0 <= column < data.num_features:
            raise ValueError(f"ranker {ranker!r}: the file has features 1..{data.num_features}")
        return data.features[:, column].astype(np.float64)
    if kind == "scorer":
        import torch

        scorer = torch.jit.load(value)
        with torch.no_grad():
            return scorer(torch.from_numpy(data.features)).double().numpy()
    raise ValueError(f"ranker must be labels, feature:J or scorer:PATH, got {ranker!r}")


def simulate_query(
    rel: np.ndarray, base: np.ndarray, n_sessions: int, sim: Simulation, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Shown documents ``[S, K]`` (indices into the query's list) and clicks ``[S, K]`` of one query.
    ``rel [L]``: examined-click probabilities; ``base [L]``: logging scores (noise redrawn per session)."""
    k = min(sim.top_k, len(rel))
    scores = base[None, :] + sim.noise * rng.standard_normal((n_sessions, len(rel)))
    shown = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    if sim.swap > 0 and k > 1:  # RandPair-style interventions: swap position 1 with a random position
        rows = np.flatnonzero(rng.random(n_sessions) < sim.swap)
        other = rng.integers(1, k, size=len(rows))
        first = shown[rows, 0].copy()
        shown[rows, 0] = shown[rows, other]
        shown[rows, other] = first
    clicks = sample_clicks(sim.click_model, rel[shown], rng, eta=sim.eta, continuation=sim.continuation)
    return shown, clicks


def simulate(data: LetorData, doc_ids: list[str], sim: Simulation, out: str | os.PathLike) -> dict:
    """Write ``out/features.txt``, ``out/clicks.tsv`` (with its header), ``out/simulation.json`` and
    ``out/shown_labeled.txt`` (the shown documents with their true labels: the full-information reference)."""
    if sim.click_model not in MODELS:
        raise ValueError(f"click model must be one of {MODELS}, got {sim.click_model!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(sim.seed)
    rel = attractiveness(data.labels.astype(np.float64), float(data.labels.max()), sim.eps)
    base = logging_scores(data, sim.ranker)
    low, high = sim.sessions
    shown_rows = np.zeros(len(data.labels), dtype=bool)
    chunks, session = [], 0
    for q in range(data.num_queries):
        a, b = int(data.offsets[q]), int(data.offsets[q + 1])
        n = int(rng.integers(low, high + 1))
        shown, clicks = simulate_query(rel[a:b], base[a:b], n, sim, rng)
        shown_rows[a + shown.ravel()] = True
        chunks.append(_tsv_lines(session, int(data.qids[a]), [doc_ids[a + i] for i in range(b - a)], shown, clicks))
        session += n
    with open(out / "clicks.tsv", "w", encoding="utf-8") as handle:
        handle.write("session\tquery\tdoc\tposition\tclick\n")
        handle.writelines(chunks)
    _write_features(out / "features.txt", data, doc_ids, shown_rows)
    # the full-information reference: the same shown documents with their true labels
    _write_features(out / "shown_labeled.txt", data, doc_ids, shown_rows, labels=True)
    truth = {
        "simulation": {**sim.__dict__, "sessions": list(sim.sessions)},
        "sessions": session,
        "propensity": pbm_examination(sim.top_k, sim.eta).tolist() if sim.click_model == "pbm" else None,
    }
    (out / "simulation.json").write_text(json.dumps(truth, indent=2))
    return truth


def _tsv_lines(first_session: int, qid: int, docs: list[str], shown: np.ndarray, clicks: np.ndarray) -> str:
    s, k = shown.shape
    session = np.repeat(np.arange(first_session, first_session + s), k)
    position = np.tile(np.arange(1, k + 1), s)
    names = np.asarray(docs, dtype=object)[shown.ravel()]
    return "".join(
        f"s{a}\t{qid}\t{d}\t{p}\t{c}\n" for a, d, p, c in zip(session, names, position, clicks.ravel(), strict=True)
    )


def _write_features(path: Path, data: LetorData, doc_ids: list[str], keep: np.ndarray, labels: bool = False) -> None:
    """The shown (query, doc) lines, label column 0 (the log does not know relevance) unless ``labels``."""
    lines = []
    for row in np.flatnonzero(keep):
        values = data.features[row]
        pairs = " ".join(f"{j + 1}:{values[j]}" for j in np.flatnonzero(values))
        label = f"{data.labels[row]:g}" if labels else "0"
        lines.append(f"{label} qid:{int(data.qids[row])} {pairs} # {doc_ids[row]}\n")
    path.write_text("".join(lines))


def load_labeled(path: str | os.PathLike) -> tuple[LetorData, list[str]]:
    """A LETOR file with labels and its doc ids (``# docid = X`` or the first word after ``#``;
    ``q<qid>-line<N>`` where a line has none)."""
    from datamodules.clicks.io import doc_id_of
    from datamodules.letor_io import open_text

    data = read_letor(path)
    ids = []
    with open_text(Path(path)) as handle:
        for number, line in enumerate(handle, 1):
            text, _, comment = line.partition("#")
            if text.strip():
                ids.append(doc_id_of(comment) or f"line{number}")
    return data, ids


SessionsArg = Callable[[str], tuple[int, int]]


def parse_sessions(text: str) -> tuple[int, int]:
    """``"150"`` or ``"100-200"`` -> an inclusive range of sessions per query."""
    low, _, high = str(text).partition("-")
    pair = (int(low), int(high or low))
    if pair[0] < 1 or pair[1] < pair[0]:
        raise ValueError(f"sessions must be N or LOW-HIGH with 1 <= LOW <= HIGH, got {text!r}")
    return pair
