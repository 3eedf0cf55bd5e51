"""Forward+backward time and peak memory of every loss in ``losses/`` vs straightforward code and allRank.

The references build the full ``[B, L, L]`` pair (or NeuralSort) tensors and let autograd
differentiate them, as most peers do. Both sides get the same inputs, and the gradients are checked
equal before anything is timed.

allRank 1.4.3's losses are timed too when its wheel is importable (it pins torch<=1.8, so install it
apart: ``pip install --no-deps --target DIR allRank`` and pass ``--allrank-site DIR``). Only its loss
files are loaded. Gradients are checked equal to allRank's where the definitions coincide (LambdaRank
at k=None with ``reduction_log="natural"``, LambdaLoss NDCG-Loss2++, ListNet, ApproxNDCG); with k=10
allRank's LambdaRank keeps only pairs with both documents in the top 10 where ours keeps pairs with
at least one, its ListMLE breaks label ties at random, and its NeuralNDCG stops Sinkhorn at a
tolerance, so there only the time compares.

    python -m bench.losses                 # CPU, and CUDA when present
    python -m bench.losses --device cpu --shapes 64x128 --allrank-site /work/peers/allrank
    python -m bench.losses --device cpu --shapes 64x128 16x512 --losses "lambdarank (all pairs)" lambdarank@10
    python -m bench.losses --device cpu --shapes 64x64 32x128 16x256 8x512 --losses lambdarank@10 --plot speed.png

"fused ms" is ours with the fused kernel (RankNet, LambdaRank, LambdaLoss): ``kernels.lambdarank_cpu`` on CPU,
``kernels.lambdarank_triton`` on CUDA; the "ours ms" column is then the tensor path
(``LTR_CPU_KERNELS=0 LTR_TRITON_KERNELS=0``), measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.timing import machine, median_ms
from losses import (
    approx_ndcg_loss,
    lambdaloss,
    lambdarank_loss,
    listmle_loss,
    listnet_loss,
    margin_cost,
    neural_ndcg_loss,
    ranknet_loss,
)
from metrics.ranking import discounts, gains, ideal_dcg
from rankers.plots import speed_plot

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


def load_allrank(site: str | None) -> dict | None:
    """allRank's loss functions from their own files, with the constants and helper they import stubbed."""
    if not site:
        return None
    root = Path(site) / "allrank" / "models"
    if not (root / "losses" / "lambdaLoss.py").exists():
        raise SystemExit(f"--allrank-site: {root / 'losses' / 'lambdaLoss.py'} not found")
    import importlib.util
    import types

    for name, attrs in {
        "allrank": {},
        "allrank.data": {},
        "allrank.data.dataset_loading": {"PADDED_Y_VALUE": -1},
        "allrank.models": {},
        "allrank.models.losses": {"DEFAULT_EPS": 1e-10},
        "allrank.models.model_utils": {
            "get_torch_device": lambda: torch.device("cuda" if torch.cuda.is_available() else "cpu")
        },
    }.items():
        module = sys.modules.setdefault(name, types.ModuleType(name))
        vars(module).update(attrs)
    functions: dict = {}
    for name, path in [
        ("allrank.models.metrics", root / "metrics.py"),
        ("allrank.models.losses.loss_utils", root / "losses" / "loss_utils.py"),
        *[
            (f"allrank.models.losses.{f}", root / "losses" / f"{f}.py")
            for f in ("listNet", "listMLE", "approxNDCG", "lambdaLoss", "neuralNDCG")
        ],
    ]:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        functions.update(vars(module))
    return functions


def allrank_losses(site: str | None) -> dict:
    """loss name -> allRank's function on ``(scores, labels, mask)`` (labels of padding set to -1)."""
    peer = load_allrank(site)
    if peer is None:
        return {}

    def wrap(fn, **options):
        return lambda scores, labels, mask: fn(scores, labels.masked_fill(~mask, -1.0), **options)

    lambda_loss = peer["lambdaLoss"]
    return {
        "lambdarank@10": wrap(
            lambda_loss, weighing_scheme="lambdaRank_scheme", k=K, reduction="sum", reduction_log="natural"
        ),
        "lambdarank (all pairs)": wrap(
            lambda_loss, weighing_scheme="lambdaRank_scheme", k=None, reduction="sum", reduction_log="natural"
        ),
        "lambdaloss ndcg_loss2pp": wrap(lambda_loss, weighing_scheme="ndcgLoss2PP_scheme", mu=10.0, reduction="sum"),
        "listnet": wrap(peer["listNet"], eps=1e-30),
        "listmle": wrap(peer["listMLE"]),
        "approxndcg": wrap(peer["approxNDCGLoss"], eps=1e-30),
        "neuralndcg@10": wrap(peer["neuralNDCG"], k=K),
    }


def reference_listnet(scores, labels, mask):
    target = torch.softmax(labels.masked_fill(~mask, float("-inf")), -1)
    log_p = torch.log_softmax(scores.masked_fill(~mask, float("-inf")), -1)
    return -(target * log_p).nan_to_num().sum(-1).mean()


def reference_listmle(scores, labels, mask):
    """All suffix sums as a [B, L, L] triangle, autograd backward."""
    key = torch.sort(scores.detach(), dim=-1, descending=True, stable=True).indices
    by_label = torch.sort(labels.masked_fill(~mask, -1.0).gather(1, key), dim=-1, descending=True, stable=True).indices
    order = key.gather(1, by_label)
    s, m = scores.gather(1, order), mask.gather(1, order)
    length = s.shape[1]
    later = torch.ones(length, length, dtype=torch.bool, device=s.device).triu()  # [i, k]: k >= i
    suffix = torch.logsumexp(s[:, None, :].masked_fill(~(later & m[:, None, :]), float("-inf")), -1)
    return ((suffix - s) * m).nan_to_num().sum(-1).mean()


def reference_approx_ndcg(scores, labels, mask, alpha=1.0):
    pair = mask[:, :, None] & mask[:, None, :] & ~torch.eye(scores.shape[1], dtype=torch.bool, device=scores.device)
    ranks = 1 + (torch.sigmoid(alpha * (scores[:, None, :] - scores[:, :, None])) * pair).sum(-1)
    g = gains(labels, "exp2") * mask / ideal_dcg(labels, mask)[:, None].clamp_min(1e-12)
    return (1 - (g / torch.log2(1 + ranks)).sum(-1)).mean()


def reference_neural_ndcg(scores, labels, mask, tau=1.0, k=K, iterations=50):
    n = mask.sum(-1, keepdim=True).float()
    pair = mask[:, :, None] & mask[:, None, :]
    spread = ((scores[:, :, None] - scores[:, None, :]).abs() * pair).sum(-1)
    scale = n[:, :, None] - 1 - 2 * torch.arange(scores.shape[1], device=scores.device)[None, :, None]
    valid = mask[:, None, :] & (torch.arange(scores.shape[1], device=scores.device)[None, :, None] < n[:, :, None])
    logits = ((scale * scores[:, None, :] - spread[:, None, :]) / tau).masked_fill(~valid, -1e30)
    p = torch.softmax(logits, -1) * valid
    for _ in range(iterations):
        for dim in (1, 2):
            total = p.sum(dim, keepdim=True)
            p = p / torch.where(total > 0, total, torch.ones_like(total))
    soft = (p @ (gains(labels, "exp2") * mask)[:, :, None])[:, :k, 0]
    dcg = (soft * discounts(soft.shape[1], scores.device)).sum(-1)
    return (1 - dcg / ideal_dcg(labels, mask, k=k).clamp_min(1e-12)).mean()


def reference_lambdaloss(scores, labels, mask, mu=10.0):
    """NDCG-Loss2++ over the full [B, L, L] pair tensor, autograd backward."""
    order = torch.sort(scores.detach().masked_fill(~mask, float("-inf")), descending=True, stable=True).indices
    s, y, m = scores.gather(1, order), labels.gather(1, order), mask.gather(1, order)
    length = s.shape[1]
    d = discounts(length + 1, s.device)
    pos = torch.arange(length, device=s.device)
    gap = (pos[:, None] - pos[None, :]).abs().clamp_min(1)
    delta = (d[gap - 1] - d[gap]).abs()
    rho = (d[:length, None] - d[None, :length]).abs()
    g = gains(y, "exp2") * m / ideal_dcg(labels, mask)[:, None].clamp_min(1e-12)
    w = (rho + mu * delta) * (g[:, :, None] - g[:, None, :]).abs()
    pairs = (y[:, :, None] > y[:, None, :]) & m[:, :, None] & m[:, None, :]
    cost = w * F.softplus(-(s[:, :, None] - s[:, None, :])) / math.log(2.0) * pairs
    return cost.sum() / scores.shape[0]


def reference_margin(scores, labels, mask, delta=1.0):
    x = scores[:, :, None] - scores[:, None, :]
    better = (labels[:, :, None] > labels[:, None, :]) & mask[:, :, None] & mask[:, None, :]
    inside = 0.5 * x.square() - delta * x
    cost = torch.where(x < 0, -x, torch.where(x <= delta, inside, torch.full_like(x, -0.5 * delta**2)))
    return (cost * better).sum()


# loss name -> (ours, straightforward reference, gradients comparable to allRank's, longest list timed)
LOSSES = {
    "ranknet": (lambda s, y, m: ranknet_loss(s, y, m), reference_ranknet, False, None),
    "lambdarank@10": (lambda s, y, m: lambdarank_loss(s, y, m, k=K), reference_lambdarank, False, None),
    "lambdarank (all pairs)": (
        lambda s, y, m: lambdarank_loss(s, y, m, reduction="sum"),
        lambda s, y, m: reference_lambdarank(s, y, m, k=None) * s.shape[0],
        True,
        None,
    ),
    "margin": (lambda s, y, m: margin_cost(s, y, m), reference_margin, False, None),
    "lambdaloss ndcg_loss2pp": (
        lambda s, y, m: lambdaloss(s, y, m, reduction="sum"),
        lambda s, y, m: reference_lambdaloss(s, y, m) * s.shape[0],
        True,
        None,
    ),
    "listnet": (lambda s, y, m: listnet_loss(s, y, m), reference_listnet, True, None),
    "listmle": (lambda s, y, m: listmle_loss(s, y, m), reference_listmle, False, None),
    "approxndcg": (lambda s, y, m: approx_ndcg_loss(s, y, m), reference_approx_ndcg, False, None),
    # Sinkhorn needs the whole [B, L, L] matrix 50 times over, for every implementation
    "neuralndcg@10": (lambda s, y, m: neural_ndcg_loss(s, y, m, k=K), reference_neural_ndcg, False, 1024),
}


def implementations(allrank_site: str | None) -> dict:
    """loss name -> (ours, straightforward reference, allRank or None, gradients comparable to allRank)."""
    peers = allrank_losses(allrank_site)
    return {name: (ours, ref, peers.get(name), same) for name, (ours, ref, same, _) in LOSSES.items()}


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
    fn = {"ours": ours, "fused": ours, "reference": reference, "allrank": allrank}[side]
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
        for batch, length in [(8, 64), (2, 300)]:
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
    parser.add_argument("--losses", nargs="*", default=list(LOSSES), choices=list(LOSSES))
    parser.add_argument("--plot", help="also draw ms against list length (one line per loss and implementation) here")
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
        "| ours peak MB | reference peak MB | fused ms | allRank/fused |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    impls = implementations(args.allrank_site)
    series: dict[str, dict[int, float]] = {}  # "device loss (side)" -> {list length: ms}, for --plot
    for device in devices:
        check_same_gradients(torch.device(device), args.allrank_site)
        for shape in args.shapes:
            batch, length = map(int, shape.split("x"))
            for loss, (_, _, allrank, _) in impls.items():
                longest = LOSSES[loss][3]
                if loss not in args.losses or (longest is not None and length > longest):
                    continue
                fused = loss.startswith(("ranknet", "lambdarank", "lambdaloss"))
                row = {}
                for side in ("ours", "reference") + (("allrank",) if allrank else ()) + (("fused",) if fused else ()):
                    child = [sys.executable, __file__, "--child", f"{loss}|{side}|{batch}|{length}|{device}"]
                    if args.allrank_site:
                        child += ["--allrank-site", args.allrank_site]
                    # "ours" is the tensor path; "fused" the same loss with the C++ kernel allowed
                    allowed = "1" if side == "fused" else "0"
                    env = {**os.environ, "LTR_CPU_KERNELS": allowed, "LTR_TRITON_KERNELS": allowed}
                    out = subprocess.run(child, capture_output=True, text=True, check=True, env=env).stdout
                    row[side] = json.loads(out.strip().splitlines()[-1])
                    name = {"ours": "tensor path", "fused": "fused kernel", "allrank": "allRank"}.get(side, side)
                    series.setdefault(f"{device} {loss} ({name})", {})[length] = row[side]["ms"]
                ours_ms = row["ours"]["ms"]
                peer = f"{row['allrank']['ms']:.2f} | {row['allrank']['ms'] / ours_ms:.1f}x" if allrank else "- | -"
                fused_cells = "- | -"
                if fused:
                    ratio = f"{row['allrank']['ms'] / row['fused']['ms']:.1f}x" if allrank else "-"
                    fused_cells = f"{row['fused']['ms']:.2f} | {ratio}"
                print(
                    f"| {device} | {loss} | [{batch}, {length}] | {ours_ms:.2f} | {row['reference']['ms']:.2f} | "
                    f"{row['reference']['ms'] / ours_ms:.1f}x | {peer} | {row['ours']['peak_mb']:.0f} | "
                    f"{row['reference']['peak_mb']:.0f} | {fused_cells} |",
                    flush=True,
                )
    if args.plot:
        title = f"forward + backward, shapes {' '.join(args.shapes)}; {machine()}"
        print(f"plot: {speed_plot(series, args.plot, title=title)}")


if __name__ == "__main__":
    main()
