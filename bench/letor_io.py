"""LETOR parsing throughput and cache-reload speed-up on a generated MSLR-shaped file.

    python -m bench.letor_io                 # 1,000,000 lines x 136 features (about 1 GB of text)
    python -m bench.letor_io --lines 200000

Columns: sklearn's ``load_svmlight_file`` alone (the reference), our ``read_letor`` without cache
(sklearn + validation + densify), and ``read_letor`` from its binary cache.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np

from bench.timing import machine, timed
from datamodules.letor_io import read_letor


def write_mslr_like(path: Path, lines: int, features: int = 136, seed: int = 0) -> None:
    """MSLR-shaped text: ~120 documents a query, dense 1-based features, integer-heavy values."""
    rng = np.random.default_rng(seed)
    qid, left = 1, rng.integers(30, 210)
    fmt = " ".join(f"{j + 1}:%g" for j in range(features))
    with open(path, "w") as out:
        for start in range(0, lines, 20000):
            n = min(20000, lines - start)
            values = np.where(
                rng.random((n, features)) < 0.4,
                rng.integers(0, 200, (n, features)),
                np.round(rng.random((n, features)) * 100, 3),
            )
            labels = rng.choice(5, size=n, p=[0.5, 0.3, 0.13, 0.05, 0.02])
            rows = []
            for i in range(n):
                rows.append(f"{labels[i]} qid:{qid} " + fmt % tuple(values[i]) + "\n")
                left -= 1
                if left == 0:
                    qid, left = qid + 1, rng.integers(30, 210)
            out.write("".join(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--workdir", default=None, help="where to write the file (default: a temp dir)")
    args = parser.parse_args()
    from sklearn.datasets import load_svmlight_file

    work = Path(args.workdir or tempfile.mkdtemp(prefix="letor_io_"))
    work.mkdir(parents=True, exist_ok=True)
    path = work / "mslr_like.txt"
    gen_s, _ = timed(lambda: write_mslr_like(path, args.lines))
    megabytes = path.stat().st_size / 2**20
    print(f"# machine: {machine()}")
    print(f"# file: {args.lines} lines, {megabytes:.0f} MB, generated in {gen_s:.0f} s")
    sk_s, _ = timed(lambda: load_svmlight_file(str(path), query_id=True, zero_based=False, dtype=np.float32))
    ours_s, data = timed(lambda: read_letor(path, cache_dir=work / "cache"))
    cached_s, again = timed(lambda: read_letor(path, cache_dir=work / "cache"))
    assert np.array_equal(data.features, again.features) and np.array_equal(data.offsets, again.offsets)
    print("| reader | seconds | MB/s | docs/s | vs sklearn |")
    print("|---|---:|---:|---:|---:|")
    for name, seconds in [
        ("sklearn load_svmlight_file (reference)", sk_s),
        ("read_letor, first load", ours_s),
        ("read_letor, from cache", cached_s),
    ]:
        print(
            f"| {name} | {seconds:.2f} | {megabytes / seconds:.0f} | {args.lines / seconds:,.0f} | "
            f"{sk_s / seconds:.1f}x |"
        )
    print(f"cache reload speed-up over first load: {ours_s / cached_s:.0f}x")
    if args.workdir is None:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
