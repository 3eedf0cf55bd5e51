"""Write a synthetic LETOR file of a named kind, for the commands on the docs site that train on one.

    python -m bench.letor_synthetic --kind mslr --queries 600 --seed 11 --out mslr.txt
    python -m bench.letor_synthetic --kind letor4 --queries 400 --seed 12 --out letor4.txt
    python -m bench.letor_synthetic --kind mslr --queries 600 --seed 21 --raw --out raw_train.txt

Kinds are ``bench.train_throughput``'s generators: ``mslr`` (136 features, 30-210 documents a list,
grades 0-4 from a nonlinear score) and ``letor4`` (46 features in [0, 1], 5-30 documents, fractional
grades 0-2). ``--raw`` gives the MSLR kind raw web-feature scales: every other feature a heavy-tailed
count ``floor(10 exp(1.5 x))``, every fourth from the second times 1,000 plus 5,000. Written by
sklearn's ``dump_svmlight_file`` with ``qid``.
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.datasets import dump_svmlight_file

from bench.train_throughput import letor_like, mslr_like
from datamodules.letor_io import LetorData

KINDS = {"mslr": mslr_like, "letor4": letor_like}


def raw_scales(features: np.ndarray) -> np.ndarray:
    """MSLR-style raw scales on a copy of ``features [N, F]`` (see the module docstring)."""
    x = features.copy()
    x[:, ::2] = np.floor(np.exp(1.5 * x[:, ::2]) * 10)
    x[:, 1::4] = x[:, 1::4] * 1000 + 5000
    return x


def write(data: LetorData, path: str, *, raw: bool = False) -> None:
    features = raw_scales(data.features) if raw else data.features
    dump_svmlight_file(features, data.labels, path, query_id=data.qids, zero_based=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=sorted(KINDS), required=True)
    parser.add_argument("--queries", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--raw", action="store_true", help="mslr only: raw web-feature scales")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.raw and args.kind != "mslr":
        parser.error("--raw applies to --kind mslr")
    write(KINDS[args.kind](args.queries, seed=args.seed), args.out, raw=args.raw)


if __name__ == "__main__":
    main()
