"""float32 matmul rates with MKL's own dispatch against MKL with ``kernels.mkl_vendor`` active, and oneDNN.

    python -m bench.mkl_vendor            # the MLP 136-256-128-64-1's products at 6,286 rows, and 2048^3

Each side runs in its own process (the shim acts only before torch is loaded): one with
``LTR_MKL_VENDOR_SHIM=0``, one with it active; both also time oneDNN's linear
(``rankers.neural.onednn_mlp``), which does not depend on the shim. Products, as a training step
makes them: the forward ``h W^T``, the weight gradient ``g^T h`` (``torch.mm`` on transposed views,
which BLAS reads in place; oneDNN's linear copies them first), the input gradient ``g W``. Each
figure is the best of ``--repeats`` timings (GFLOP/s); the last column is the shim's MKL over MKL's
own dispatch, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# (rows, in, out): the MLP's layers at a 64-query batch of MSLR-WEB30K's lists, and a large square
SHAPES = [(6286, 136, 256), (6286, 256, 128), (6286, 128, 64), (2048, 2048, 2048)]

MEASURE = """
import json, sys, time
from kernels import mkl_vendor
active = mkl_vendor.activate()
import torch
from rankers.neural import onednn_mlp
shapes, repeats = json.loads(sys.argv[1]), int(sys.argv[2])

def rate(fn, flops):
    fn()
    best = min(_timed(fn) for _ in range(repeats))
    return flops / best / 1e9

def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start

rows = []
for n, i, o in shapes:
    h, w, g = torch.randn(n, i), torch.randn(o, i), torch.randn(n, o)
    flops = 2 * n * i * o
    mkl = {
        "forward h W^T": lambda: torch.mm(h, w.t()),
        "weight gradient g^T h": lambda: torch.mm(g.t(), h),
        "input gradient g W": lambda: torch.mm(g, w),
    }
    onednn = {
        "forward h W^T": lambda: onednn_mlp.linear(h, w, None),
        "weight gradient g^T h": lambda: onednn_mlp.linear(g.t(), h.t(), None),
        "input gradient g W": lambda: onednn_mlp.linear(g, w.t(), None),
    }
    for name in mkl:
        row = {"shape": f"{n}x{i}x{o}", "product": name, "mkl": rate(mkl[name], flops)}
        row["onednn"] = rate(onednn[name], flops) if onednn_mlp.available() else None
        rows.append(row)
print(json.dumps({"active": active, "rows": rows}))
"""


def measure(shim: bool, repeats: int, threads: int | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LTR_MKL_VENDOR_SHIM": "1" if shim else "0"}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, json.dumps(SHAPES), str(repeats)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of both processes")
    args = parser.parse_args(argv)
    plain, shim = measure(False, args.repeats, args.threads), measure(True, args.repeats, args.threads)
    if not shim["active"]:
        print("# kernels.mkl_vendor does not apply here (not an AMD CPU with AVX-512, or turned off)")
    print("| product | rows x in x out | MKL, own dispatch | MKL, shim | oneDNN linear | shim / own |")
    print("|---|---|---:|---:|---:|---:|")
    for before, after in zip(plain["rows"], shim["rows"], strict=True):
        onednn = max(before["onednn"] or 0.0, after["onednn"] or 0.0)
        print(
            f"| {before['product']} | {before['shape']} | {before['mkl']:.0f} | {after['mkl']:.0f} | "
            f"{onednn:.0f} | {after['mkl'] / before['mkl']:.2f}x |"
        )


if __name__ == "__main__":
    main()
