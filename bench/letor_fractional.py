"""Write a LETOR file whose grades are fractions: each document's grade as the mean of noisy assessors.

Why: some web-search sets grade documents on a continuous scale (the mean of several assessors'
judgements, or a click model's estimate), not on 0-4 integers. To check our defaults on such a set
without one at hand, this turns a graded file into a stand-in: for each document, ``assessors``
judges each see its grade plus Gaussian noise (``noise``), round it and clip it to the scale, and the
new label is their mean (thirds with three judges). Features, qids and comments are kept; the draw is
seeded, so the same command writes the same file.

    python -m bench.letor_fractional msn1.fold1.train.5k.txt msn_fractional/train.txt --seed 0
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def fractional_grades(grades: np.ndarray, rng: np.random.Generator, *, assessors: int, noise: float) -> np.ndarray:
    """``grades [N]`` -> the mean of ``assessors`` rounded, clipped noisy copies ``[N]`` (same scale).

    Example:
        >>> fractional_grades(np.array([0.0, 4.0]), np.random.default_rng(0), assessors=3, noise=0.0)
        array([0., 4.])
    """
    top = float(grades.max()) if len(grades) else 0.0
    judged = np.rint(grades[:, None] + rng.normal(scale=noise, size=(len(grades), assessors)))
    return np.clip(judged, 0.0, top).mean(axis=1)


def rewrite(source: Path, target: Path, *, seed: int, assessors: int, noise: float) -> int:
    """Rewrite ``source`` to ``target`` with fractional labels; returns the number of lines."""
    lines = source.read_text().splitlines()
    labels = []
    for number, line in enumerate(lines, 1):
        head = line.split(maxsplit=1)
        try:
            labels.append(float(head[0]))
        except (IndexError, ValueError):
            raise ValueError(f"{source}:{number}: no numeric label at the start of the line") from None
    new = fractional_grades(np.array(labels), np.random.default_rng(seed), assessors=assessors, noise=noise)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w") as out:
        for line, label in zip(lines, new, strict=True):
            out.write(f"{label:.6g} {line.split(maxsplit=1)[1]}\n")
    return len(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--assessors", type=int, default=3)
    parser.add_argument("--noise", type=float, default=0.7, help="standard deviation of one judge's error")
    args = parser.parse_args()
    count = rewrite(args.source, args.target, seed=args.seed, assessors=args.assessors, noise=args.noise)
    print(f"{args.target}: {count} lines, seed {args.seed}")


if __name__ == "__main__":
    main()
