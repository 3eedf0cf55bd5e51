"""Reproduce Harrington (2003), Table 1 and section 4.1's test rank losses.

    python train.py experiment=harrington2003            # the paper's setting
    python train.py experiment=harrington2003 harrington.trials=5 harrington.n_train=5000
    python train.py experiment=harrington2003 harrington.device=cuda   # OAP through the Triton kernel

20 Monte-Carlo trials, 50,000 training and 1,000 test examples of the synthetic data, the degree-2
polynomial kernel through its exact feature map, N = 100 perceptrons, tau in {0.3, 0.6, 0.9}.
All trials (and all taus) of an algorithm run as one tensor. Prints the mean test rank loss
``1/T sum |y_hat - y|`` with 95% Student-t intervals, and writes ``table1.md`` and ``results.json``
with the seconds each part took (device-synchronized; CUDA-event timed on a GPU). On CPU every stream
takes the C++ loops of ``kernels.prank_cpu`` (PRank recording its voted history, Widrow-Hoff, OAP);
on CUDA the OAP streams take the Triton kernel, PRank and Widrow-Hoff the tensor path.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from datamodules.harrington_data import harrington_synthetic, polynomial_features
from rankers.outputs import write_results, write_text
from rankers.perceptron.ensemble import PRankEnsemble, WidrowHoff
from rankers.plots import paper_table_plot
from rankers.threads import torch_threads

log = logging.getLogger(__name__)

PAPER = {  # section 4.1 and Table 1
    "PRank": "0.37 ± 0.07",
    "PRank-VP": "0.31 ± 0.00",
    "Widrow-Hoff (eta=0.1)": "0.30 ± 0.2",
    "OAP-BPM tau=0.3": "0.23 ± 0.01",
    "OAP-BPM tau=0.6": "0.24 ± 0.03",
    "OAP-BPM tau=0.9": "0.26 ± 0.03",
    "OAP-Bagg tau=0.3": "0.33 ± 0.01",
    "OAP-Bagg tau=0.6": "0.31 ± 0.02",
    "OAP-Bagg tau=0.9": "0.32 ± 0.03",
    "OAP-VP tau=0.3": "0.32 ± 0.01",
    "OAP-VP tau=0.6": "0.31 ± 0.02",
    "OAP-VP tau=0.9": "0.31 ± 0.03",
}


NO_INTERVAL = "ci95: one trial, an interval needs at least two"


def student_t_interval(values: torch.Tensor, confidence: float = 0.95) -> tuple[float, float | None]:
    """Mean and half-width of the Student-t confidence interval of ``values [n]``; the half-width is
    None for a single value (no interval, where the formula gives NaN)."""
    n = values.numel()
    mean = values.double().mean().item()
    if n < 2:
        return mean, None
    half = t_quantile(confidence, n - 1) * values.double().std(unbiased=True).item() / n**0.5
    return mean, half


def t_central_probability(t: float, df: int) -> float:
    """``P(|T| <= t)`` for Student's t with an integer ``df``: Abramowitz & Stegun 26.7.3 (odd ``df``)
    and 26.7.4 (even), the finite sums in ``cos(atan(t / sqrt(df)))`` (exact up to rounding)."""
    theta = math.atan(t / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    first = 3 if df % 2 else 2  # odd: 1 + 2/3 cos^2 + (2.4)/(3.5) cos^4 + ...; even: 1 + 1/2 cos^2 + ...
    total = term = 1.0
    for k in range(first, df - 1, 2):
        term *= cos2 * (k - 1) / k
        total += term
    if df % 2 == 0:
        return math.sin(theta) * total
    if df == 1:
        return 2 * theta / math.pi
    return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)


def t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student-t quantile: ``t`` with ``P(|T| <= t) = confidence``, ``T ~ t(df)``.

    Bisection on :func:`t_central_probability` for ``df`` up to 1000 (to the last bit; scipy.stats
    would add ~0.5 s of imports to a first run, scipy.special ~0.2 s), ``scipy.special.stdtrit`` beyond.

    Example:
        >>> round(t_quantile(0.95, 19), 6)  # Table 1's 20 trials
        2.093024
    """
    if not 0 < confidence < 1 or df < 1:
        raise ValueError(f"need 0 < confidence < 1 and df >= 1, got {confidence}, {df}")
    if df > 1000:
        from scipy.special import stdtrit

        return float(stdtrit(df, 0.5 + confidence / 2))
    low, high = 0.0, 1.0
    while t_central_probability(high, df) < confidence:
        low, high = high, 2 * high
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (middle, high) if t_central_probability(middle, df) < confidence else (low, middle)
    return high


def make_trials(trials: int, n_train: int, n_test: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Independent train/test draws per trial, mapped by the degree-2 kernel: ``[trials, n, 6]``."""
    xs, ys, txs, tys = [], [], [], []
    for trial in range(trials):
        g = torch.Generator().manual_seed(seed * 1000 + trial)
        x, y = harrington_synthetic(n_train, g)
        tx, ty = harrington_synthetic(n_test, g)
        xs.append(polynomial_features(x))
        ys.append(y)
        txs.append(polynomial_features(tx))
        tys.append(ty)
    return torch.stack(xs), torch.stack(ys), torch.stack(txs), torch.stack(tys)


@contextmanager
def timed(seconds: dict[str, float], name: str, device: torch.device) -> Iterator[None]:
    """Adds the wall time of the block to ``seconds[name]``: CUDA events on a GPU (the device's
    own clock), perf_counter after the work is done elsewhere."""
    if device.type == "cuda":
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        yield
        stop.record()
        stop.synchronize()
        seconds[name] = seconds.get(name, 0.0) + start.elapsed_time(stop) / 1e3
        return
    begin = time.perf_counter()
    yield
    seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - begin


def mean_rank_losses(mean_rank: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-run test rank loss of an averaged (unrounded) rank ``[R, n]`` -> ``[R]``."""
    return (mean_rank.double() - labels.double()).abs().mean(-1).float()


def rank_losses(predicted: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-run test rank loss ``mean |y_hat - y|``: ``[R, n]`` -> ``[R]``."""
    return (predicted - labels).abs().float().mean(-1)


def table1(
    cfg: DictConfig | None = None,
    *,
    trials: int = 20,
    n_train: int = 50000,
    n_test: int = 1000,
    n_perceptrons: int = 100,
    taus: Sequence[float] = (0.3, 0.6, 0.9),
    etas: Sequence[float] = (0.2, 0.1, 0.05, 0.01),
    seed: int = 0,
    device: str | None = None,
    out_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Run every algorithm of section 4.1 and return ``{name: {"mean", "ci95", "per_trial"}}``."""
    if cfg is not None:  # called from train.py: options under `harrington`, output in the run directory
        options = dict(cfg.harrington)
        return table1(**options, out_dir=cfg.paths.output_dir)
    start = time.perf_counter()
    device = torch.device(device or "cpu")
    with torch_threads(1):  # small ops: threads would wait more than they work (10x on a loaded machine)
        data = make_trials(trials, n_train, n_test, seed)
    x, y, test_x, test_y = (t.to(device) for t in data)
    losses: dict[str, torch.Tensor] = {}
    seconds: dict[str, float] = {}

    prank = PRankEnsemble(6, 5, n_runs=trials, seed=seed, device=device, keep_history=True)
    with timed(seconds, f"PRank and PRank-VP stream ({_path_name(prank)})", device):
        prank.partial_fit(x, y, return_predictions=False)
    losses["PRank"] = rank_losses(prank.predict(test_x, "bpm"), test_y)
    # the voting rules score their averaged hypothesis as the paper writes it, unrounded (mean_rank),
    # as the collaborative-filtering experiment does; rounding it would be a variant of ours
    losses["PRank-VP"] = mean_rank_losses(prank.mean_rank(test_x, "voted"), test_y)

    wh = WidrowHoff(6, 5, eta=etas, n_runs=trials, device=device)
    with timed(seconds, f"Widrow-Hoff stream ({'prank_cpu kernel' if wh._fused() else 'tensor path'})", device):
        wh.partial_fit(x, y, return_predictions=False)
    wh_test = wh.predict(test_x)  # [R, E, n]
    for e, eta in enumerate(etas):
        losses[f"Widrow-Hoff (eta={eta})"] = rank_losses(wh_test[:, e], test_y)

    # all taus in one tensor: run r = (tau index, trial)
    tau_per_run = [tau for tau in taus for _ in range(trials)]
    repeat = len(taus)
    oap = PRankEnsemble(
        6, 5, n_perceptrons=n_perceptrons, tau=tau_per_run, n_runs=trials * repeat, seed=seed + 1, device=device
    )
    oap_x, oap_y = x.repeat(repeat, 1, 1), y.repeat(repeat, 1)
    path = _path_name(oap)
    with timed(seconds, f"OAP stream, {trials * repeat} runs x {n_perceptrons} perceptrons ({path})", device):
        oap.partial_fit(oap_x, oap_y, return_predictions=False)
    oap_test_x, oap_test_y = test_x.repeat(repeat, 1, 1), test_y.repeat(repeat, 1)
    each = oap.predict(oap_test_x, "each")  # [R, N, n], read out by Bagg and VP
    for combine, name in (("bpm", "OAP-BPM"), ("bagg", "OAP-Bagg"), ("vp", "OAP-VP")):
        if combine == "bpm":
            per_run = rank_losses(oap.predict(oap_test_x, combine), oap_test_y)
        else:
            per_run = mean_rank_losses(oap.mean_rank(oap_test_x, combine, each=each), oap_test_y)
        for i, tau in enumerate(taus):
            losses[f"{name} tau={tau}"] = per_run[i * trials : (i + 1) * trials]

    results = {}
    for name, values in losses.items():
        mean, half = student_t_interval(values.cpu())
        results[name] = {"mean": mean, "ci95": half, "per_trial": values.cpu().tolist(), "paper": PAPER.get(name)}
        results[name] |= {"absent": NO_INTERVAL} if half is None else {}
    total = time.perf_counter() - start
    table = format_table(
        results,
        trials=trials,
        n_train=n_train,
        n_test=n_test,
        n_perceptrons=n_perceptrons,
        seconds=total,
        device=_device_name(device),
        parts=seconds,
    )
    print(table)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "table1.md", table, "table")
        summary = {"table1": results, "seconds": total, "stream_seconds": seconds, "device": _device_name(device)}
        write_results(out / "results.json", summary)
        title = f"Harrington (2003) Table 1: {trials} trials, {n_train} training examples, N = {n_perceptrons}"
        paper_table_plot(results, out / "table1.png", title=title)
    return results


def _path_name(model: PRankEnsemble) -> str:
    kernel: Callable | None = model._kernel(None)
    return "tensor path" if kernel is None else f"{kernel.__module__.replace('kernels.', '')} kernel"


def _device_name(device: torch.device) -> str:
    return f"cuda ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else str(device)


def format_table(results: dict[str, Any], **setting: Any) -> str:
    lines = [
        f"Test rank loss, mean ± 95% Student-t interval over {setting['trials']} trials; "
        f"{setting['n_train']} training / {setting['n_test']} test examples, N = {setting['n_perceptrons']}, "
        f"degree-2 polynomial kernel (explicit map); {setting['seconds']:.1f} s on {setting['device']}.",
        "",
        "Streams: " + "; ".join(f"{name} {value:.3f} s" for name, value in setting.get("parts", {}).items()) + ".",
        "",
        "| algorithm | ours | paper |",
        "|---|---|---|",
    ]
    for name, row in results.items():
        lines.append(f"| {name} | {mean_and_interval(row)} | {row['paper'] or '-'} |")
    return "\n".join(lines) + "\n"


def mean_and_interval(row: dict[str, Any]) -> str:
    """``"0.312 ± 0.020"``, or ``"0.312 (one trial)"`` when there is no interval."""
    return f"{row['mean']:.3f} ± {row['ci95']:.3f}" if row.get("ci95") is not None else f"{row['mean']:.3f} (one trial)"
