"""Write a LETOR file with every feature put through a seeded, increasing, heavy-tailed map.

Why: our LETOR set (letor_a) ships features already scaled to [0, 1], while web-search sets such as
MSLR-WEB10K/30K ship raw counts and scores (term frequencies, stream lengths, PageRank, click counts)
spanning several orders of magnitude. The map below turns the one into a stand-in for the other
without changing which document ranks above which on any single feature: per feature f,

    x -> s_f * expm1(a_f * x) / expm1(a_f)      (a_f ~ U[0, 15], s_f ~ log-U[1, 1e5])

so x in [0, 1] becomes [0, s_f], and a_f = 15 leaves the bulk near 0 and a tail about 3e6 times
larger (an identity shape at a_f -> 0). Tree learners (LightGBM, XGBoost) bin on quantiles and see
the same data (up to float rounding); a ranker that reads the raw values, or z-scores them, does
not. Every file of one set must use the same seed (the maps are drawn from it alone).

    python -m bench.letor_rescale train_full.txt train_full_heavy.txt --seed 0
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

MAX_CURVATURE = 15.0
MAX_SCALE_LOG10 = 5.0


def heavy_tail_maps(
    n_features: int, seed: int, *, max_curvature: float = MAX_CURVATURE
) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature curvature ``a [F]`` (uniform in ``[0, max_curvature]``) and scale ``s [F]`` from ``seed``."""
    rng = np.random.default_rng(seed)
    curvature = rng.uniform(0.0, max_curvature, n_features)
    scale = 10.0 ** rng.uniform(0.0, MAX_SCALE_LOG10, n_features)
    return curvature, scale


def heavy_tail(values: np.ndarray, curvature: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``values [N, F]`` (or one value, with its feature's ``a`` and ``s``) -> the same shape;
    increasing in each column, 0 stays 0."""
    a = np.maximum(curvature, 1e-6)  # a -> 0 is the identity shape; avoid 0 / 0
    return scale * np.expm1(a * values) / np.expm1(a)


def rescale_file(
    source: Path, target: Path, *, seed: int, n_features: int, max_curvature: float = MAX_CURVATURE
) -> int:
    """Rewrite ``source`` to ``target`` line by line (labels, qids and comments kept); returns lines."""
    curvature, scale = heavy_tail_maps(n_features, seed, max_curvature=max_curvature)
    lines = 0
    with source.open() as read, target.open("w") as write:
        for number, line in enumerate(read, 1):
            body, _, comment = line.rstrip("\n").partition("#")
            tokens = body.split()
            if not tokens:
                write.write(line)
                continue
            head, pairs = [], []
            for token in tokens:
                name, sep, value = token.partition(":")
                if sep and name.isdigit():
                    index = int(name) - 1
                    if not 0 <= index < n_features:
                        raise ValueError(f"{source}:{number}: feature {name} outside 1..{n_features}")
                    try:
                        parsed = float(value)
                    except ValueError:
                        raise ValueError(f"{source}:{number}: feature {name} has no number: {value!r}") from None
                    mapped = heavy_tail(np.float64(parsed), curvature[index], scale[index])
                    pairs.append(f"{name}:{mapped:.6g}")
                else:
                    head.append(token)
            write.write(" ".join(head + pairs) + (f" #{comment}" if comment else "") + "\n")
            lines += 1
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--features", type=int, default=300, help="feature count of the set (letor_a: 300)")
    parser.add_argument("--curvature", type=float, default=MAX_CURVATURE, help="largest a_f")
    args = parser.parse_args()
    lines = rescale_file(
        args.source, args.target, seed=args.seed, n_features=args.features, max_curvature=args.curvature
    )
    print(f"{args.target}: {lines} lines, seed {args.seed}")


if __name__ == "__main__":
    main()
