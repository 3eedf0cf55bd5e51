"""Read speed of the click-log reader: ``read_click_log`` on a log of N click lines (default 10
million), against a plain ``csv`` loop (the reference) on the first million lines, same run.

    python -m bench.click_reader --log DIR [--lines 10000000]

DIR is a simulated log (``python -m datamodules.clicks simulate``); its clicks are repeated with
fresh session ids up to ``--lines`` into ``DIR/clicks_big.tsv`` (written once).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import time
from pathlib import Path

from datamodules.clicks import read_click_log


def grow(log: Path, lines: int) -> Path:
    big = log / f"clicks_{lines}.tsv"
    if big.exists():
        return big
    body = (log / "clicks.tsv").read_text().split("\n", 1)[1]
    count = body.count("\n")
    with open(big, "w") as handle:
        handle.write("session\tquery\tdoc\tposition\tclick\n")
        for copy in range(-(-lines // count)):
            handle.write(body.replace("\ns", f"\nr{copy}s").replace("s", f"r{copy}s", 1) if copy else body)
    return big


def csv_reference(path: Path, lines: int) -> float:
    start = time.perf_counter()
    with open(path, newline="") as handle:
        rows = [
            (s, q, d, int(p), int(c))
            for s, q, d, p, c in itertools.islice(csv.reader(handle, delimiter="\t"), 1, lines)
        ]
    assert rows
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--lines", type=int, default=10_000_000)
    args = parser.parse_args()
    log = Path(args.log)
    big = grow(log, args.lines)
    start, cpu = time.perf_counter(), time.process_time()
    data = read_click_log(log / "features.txt", big)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    n = data.counts["click_lines"]
    reference = csv_reference(big, 1_000_000) * n / 1_000_000
    print("| reader | click lines | seconds | lines/s |")
    print("|---|---|---|---|")
    print(f"| read_click_log (parse, join, checks) | {n:,} | {seconds:.1f} | {n / seconds:,.0f} |")
    print(f"| csv loop, parse only (1M lines, scaled) | {n:,} | {reference:.1f} | {n / reference:,.0f} |")
    print(f"ratio csv / read_click_log: {reference / seconds:.2f}x")
    # on a shared machine the wall clock includes waiting for a core; the process's CPU time does not
    print(f"read_click_log CPU seconds (user + system, this process): {cpu:.1f}")


if __name__ == "__main__":
    main()
