"""RankLib (``java -jar RankLib.jar``) as a peer for the benchmarks: train, score a file, read a model.

RankLib is timed as its whole training process (JVM start and file reading included). ``-missingZero``
reads absent features as 0, as our reader does (the maintained RankLib build throws without it).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class RankLibRun:
    scores: np.ndarray  # [N] of the test file, in file order
    fit_seconds: float
    model: str  # the saved model file's text


def java_or_exit(jar: str | None) -> str:
    """The java executable, or a clear exit when java or the jar is missing."""
    java = shutil.which("java")
    if java is None or not jar or not Path(jar).exists():
        raise SystemExit(f"RankLib needs a java runtime and its jar (--ranklib-jar), got {jar!r}")
    return java


def run_ranklib(
    jar: str,
    train: str | Path,
    test: str | Path,
    *,
    ranker: int,
    options: list[str],
    validate: str | Path | None = None,
    workdir: str | Path,
) -> RankLibRun:
    """Train RankLib's ``ranker`` on ``train`` (``-validate`` when given) and score ``test``."""
    java = java_or_exit(jar)
    model, scores = Path(workdir) / "ranklib-model.txt", Path(workdir) / "ranklib-scores.txt"
    command = [java, "-jar", jar, "-train", str(train), "-ranker", str(ranker), *options]
    command += ["-metric2t", "NDCG@10", "-missingZero", "-save", str(model)]
    if validate is not None:
        command += ["-validate", str(validate)]
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True)
    seconds = time.perf_counter() - start
    rank = [java, "-jar", jar, "-load", str(model), "-rank", str(test), "-missingZero", "-score", str(scores)]
    subprocess.run(rank, capture_output=True, check=True)
    # one "qid index score" line per document, in file order
    values = np.array([float(line.split()[-1]) for line in scores.read_text().splitlines() if line.strip()])
    return RankLibRun(values, seconds, model.read_text())


def rankboost_ensemble(model: str) -> list[tuple[int, float, float]]:
    """A saved RankLib RankBoost model as ``(0-based feature, threshold, alpha)`` per round."""
    line = next(text for text in model.splitlines() if text.strip() and not text.startswith("#"))
    rounds = []
    for token in line.split():
        feature, threshold, alpha = token.split(":")
        rounds.append((int(feature) - 1, float(threshold), float(alpha)))
    return rounds
