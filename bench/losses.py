"""Forward+backward time and peak memory of ranknet_loss and lambdarank_loss vs straightforward code.

The references build the full ``[B, L, L]`` pair tensors and let autograd differentiate them, as
most peers do. Both sides get the same inputs, and the gradients are checked equal before anything
is timed.

allRank 1.4.3's ``lambdaLoss(weighing_scheme="lambdaRank_scheme")`` is timed too when its wheel is
importable (it pins torch<=1.8, so install it apart: ``pip install --no-deps --target DIR allRank``
and pass ``--allrank-site DIR``). Only its loss file is loaded. At k=None its gradient with
``reduction_log="natural"`` equals ours exactly (checked); with k=10 it keeps only pairs with both
documents in the top 10, where ours keeps pairs with at least one, so only the time compares.

    python bench/losses.py                 # CPU, and CUDA when present
    python bench/losses.py --device cpu --shapes 64x128 --allrank-site /tmp/allrank_site
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._timing import machine, median_ms
from losses import lambdarank_loss, ranknet_loss
from metrics.functional import discounts, gains, ideal_dcg

SHAPES = [(64, 128), (16, 512), (4, 4096)]
K = 10


def reference_ranknet(scores, labels, mask, sigma=1.0):
    """All pairs at once, autograd through [B, L, L]."""
    diff = sigma * (scores[:, :, None] - scores[:, None, :])
    pairs = (labels[:, :, None] > labels[:, None, :]) & mask[:, :, None] & mask[:, None, :]
    losses = F.binary_cross_entropy_with_logits(diff, torch.ones_like(diff), reduction="none")
    return (losses * pairs).sum() / pairs.sum().clamp_min(1)


def reference_lambdarank(scores, labels, mask, sigma=1.0, k=K):
    """|Delta NDCG@k|-weighted RankNet over the full [B, L, L] pair tensor, autograd backward."""
    order = torch.sort(scores.detach().masked_fill(~mask, float("-inf")), descending=True, stable=True).indices
    s, y, m = scores.gather(1, order), labels.gather(1, order), mask.gather(1, order)
    disc = discounts(s.shape[1], s.device)
    if k is not None:
        disc = disc * (torch.arange(s.shape[1], device=s.device) < k)
    g = gains(y, "exp2") * m
    delta = (g[:, :, None] - g[:, None, :]).abs() * (disc[:, None] - disc[None, :]).abs()
    delta = delta / ideal_dcg(labels, mask, k=k)[:, None, None].clamp_min(1e-12)
    pairs = (y[:, :, None] > y[:, None, :]) & m[:, :, None] & m[:, None, :]
    cost = delta * F.softplus(-sigma * (s[:, :, None] - s[:, None, :])) * pairs
    return cost.sum() / scores.shape[0]


def load_allrank_lambda_loss(site: str | None):
    """allRank's ``lambdaLoss`` from its own file, with the two constants it imports stubbed."""
    if not site:
        return None
    path = Path(site) / "allrank" / "models" / "losses" / "lambdaLoss.py"
    if not path.exists():
        raise SystemExit(f"--allrank-site: {path} not found")
    import types

    for name, attrs in {
        "allrank": {},
        "allrank.data": {},
        "allrank.models": {},
        "allrank.data.dataset_loading": {"PADDED_Y_VALUE": -1},
        "allrank.models.losses": {"DEFAULT_EPS": 1e-10},
    }.items():
        module = sys.modules.setdefault(name, types.ModuleType(name))
        vars(module).update(attrs)
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace["lambdaLoss"]


def allrank_variant(site: str | None, k: int | None):
    lambda_loss = load_allrank_lambda_loss(site)
    if lambda_loss is None:
        return None

    def run(scores, labels, mask):
        padded_labels = labels.masked_fill(~mask, -1.0)
        return lambda_loss(
            scores, padded_labels, weighing_scheme="lambdaRank_scheme", k=k, reduction="sum", reduction_log="natural"
        )

    return run


def implementations(allrank_site: str | None) -> dict:
    """loss name -> (ours, straightforward reference, allRank or None, gradients comparable to allRank)."""
    return {
        "ranknet": (lambda s, y, m: ranknet_loss(s, y, m), reference_ranknet, None, False),
        "lambdarank@10": (
            lambda s, y, m: lambdarank_loss(s, y, m, k=K),
            reference_lambdarank,
            allrank_variant(allrank_site, K),
            False,
        ),
        "lambdarank (all pairs)": (
            lambda s, y, m: lambdarank_loss(s, y, m, reduction="sum"),
            lambda s, y, m: reference_lambdarank(s, y, m, k=None) * s.shape[0],
            allrank_variant(allrank_site, None),
            True,
        ),
    }


def make_inputs(batch: int, length: int, device: torch.device):
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(batch, length, generator=g).to(device).requires_grad_(True)
    labels = torch.randint(0, 5, (batch, length), generator=g).float().to(device)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=g).to(device)
    mask = torch.arange(length, device=device)[None] < lengths[:, None]
    return scores, labels, mask


def forward_backward(fn, scores, labels, mask):
    scores.grad = None
    fn(scores, labels, mask).backward()
    return scores.grad


def measure(loss: str, side: str, batch: int, length: int, device: torch.device, site: str | None) -> dict:
    """One measurement; run in its own process so that peak RSS belongs to it alone."""
    ours, reference, allrank, _ = implementations(site)[loss]
    fn = {"ours": ours, "reference": reference, "allrank": allrank}[side]
    scores, labels, mask = make_inputs(batch, length, device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ms = median_ms(lambda: forward_backward(fn, scores, labels, mask), device, repeats=5 if length > 1000 else 15)
    if device.type == "cuda":
        peak_mb = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        peak_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    return {"ms": ms, "peak_mb": peak_mb}


def check_same_gradients(device: torch.device, site: str | None) -> None:
    for loss, (ours, reference, allrank, allrank_comparable) in implementations(site).items():
        peers = [("reference", reference)] + ([("allRank", allrank)] if allrank and allrank_comparable else [])
        for batch, length in [(8, 64), (2, 700)]:
            scores, labels, mask = make_inputs(batch, length, device)
            g_ours = forward_backward(ours, scores, labels, mask).clone()
            for name, peer in peers:
                g_peer = forward_backward(peer, scores, labels, mask)
                torch.testing.assert_close(g_ours, g_peer, atol=1e-6, rtol=1e-4, msg=f"{loss}: {name} gradients differ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    parser.add_argument("--shapes", nargs="*", default=[f"{b}x{n}" for b, n in SHAPES])
    parser.add_argument("--allrank-site", help="folder holding an allRank 1.4.3 install (--no-deps)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        loss, side, batch, length, device = args.child.split("|")
        print(json.dumps(measure(loss, side, int(batch), int(length), torch.device(device), args.allrank_site)))
        return
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    devices = [d for d in devices if d == "cpu" or torch.cuda.is_available()]
    print(f"# machine: {machine()}")
    print("peak MB: CUDA max_memory_allocated, or on CPU the rise of the process's peak RSS while timing")
    print(
        "| device | loss | shape [B, L] | ours ms | reference ms | ref/ours | allRank ms | allRank/ours "
        "| ours peak MB | reference peak MB |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    impls = implementations(args.allrank_site)
    for device in devices:
        check_same_gradients(torch.device(device), args.allrank_site)
        for shape in args.shapes:
            batch, length = map(int, shape.split("x"))
            for loss, (_, _, allrank, _) in impls.items():
                row = {}
                for side in ("ours", "reference") + (("allrank",) if allrank else ()):
                    child = [sys.executable, __file__, "--child", f"{loss}|{side}|{batch}|{length}|{device}"]
                    if args.allrank_site:
                        child += ["--allrank-site", args.allrank_site]
                    out = subprocess.run(child, capture_output=True, text=True, check=True).stdout
                    row[side] = json.loads(out.strip().splitlines()[-1])
                ours_ms = row["ours"]["ms"]
                peer = f"{row['allrank']['ms']:.2f} | {row['allrank']['ms'] / ours_ms:.1f}x" if allrank else "- | -"
                print(
                    f"| {device} | {loss} | [{batch}, {length}] | {ours_ms:.2f} | {row['reference']['ms']:.2f} | "
                    f"{row['reference']['ms'] / ours_ms:.1f}x | {peer} | {row['ours']['peak_mb']:.0f} | "
                    f"{row['reference']['peak_mb']:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
