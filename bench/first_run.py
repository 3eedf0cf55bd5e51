"""A cold first ``python train.py experiment=harrington2003`` against a numpy loop, measured in the same run.

    python -m bench.first_run                      # the experiment's defaults (20 trials)
    python -m bench.first_run --trials 5           # a shorter table, the same ratio's meaning
    python -m bench.first_run --repeat 2           # the cold run twice (two fresh copies)
    python -m bench.first_run --source ../old      # another checkout (git worktree add ../old COMMIT)

What "cold" means here, as a new user meets it: a fresh copy of the repository (the files git
tracks or would track, no build outputs, no ``__pycache__``), installed into a fresh virtual
environment with README's command (``pip install -e .``, build isolation and all; the venv sees the
already-installed dependencies, ``--system-site-packages``, so nothing is downloaded but the build
backend), and every cache the run could use empty: the kernels' cache (``LTR_KERNELS_DIR``),
torch's extensions, Triton's and matplotlib's caches (``XDG_CACHE_HOME``, ``MPLCONFIGDIR``). The
install (which builds the C++ kernels) is timed and printed apart; the first run is timed from
process start to exit, imports, data generation, every stream, the test evaluations and writing
``results.json`` included. The OS page cache is not dropped (that needs root and would slow every
other process on the machine): files read by an earlier process may come from memory.

The reference is Table 1's work as one writes it first in numpy: for each trial, a Python loop over
the 50,000 examples, the N perceptrons of a run vectorized (PRank with its voted history, Widrow-Hoff
with its four rates, OAP at each tau), then the same test evaluations (PRank, PRank-VP, OAP-BPM,
-Bagg, -VP, Widrow-Hoff). One trial is measured in full and multiplied by the trial count (trials
are independent and cost the same); ``--reference-trials`` measures more of them. It is measured
before and after the cold runs and the mean taken, so that both see the machine's load of the time
(on a shared machine, the printed load averages say how loaded).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CUTS = np.array([-1.0, -0.1, 0.25, 1.0])  # Harrington (2003), section 4.1
K = 5


# -- the numpy loop (reference) ------------------------------------------------------------------


def synthetic(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Section 4.1's data through the degree-2 kernel's feature map: ``x [n, 6]`` float32, ``y [n]``."""
    u = rng.random((n, 2))
    value = 10 * (u[:, 0] - 0.5) * (u[:, 1] - 0.5) + 0.125 * rng.standard_normal(n)
    y = np.searchsorted(CUTS, value, side="left")
    s = np.sqrt(2)
    x = np.stack([u[:, 0] ** 2, u[:, 1] ** 2, s * u[:, 0] * u[:, 1], s * u[:, 0], s * u[:, 1], np.ones(n)], 1)
    return x.astype(np.float32), y


def rank(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """PRank's prediction: how many (ordered) thresholds the score reaches."""
    return (scores[..., None] >= thresholds).sum(-1)


def perceptrons(x, y, n: int, tau: float, rng, *, history: bool = False) -> dict:
    """N PRank perceptrons of one run over the stream, example by example (Algorithm 1 under
    Algorithm 2's Bernoulli presentation); with ``history`` (N = 1) every hypothesis and its survival."""
    w, c = np.zeros((n, x.shape[1]), np.float32), np.zeros((n, K - 1), np.float32)
    correct = np.zeros(n)
    levels = np.arange(K - 1)
    stored, survival = [], 0
    for t in range(len(y)):
        score = w @ x[t]
        predicted = rank(score, c)
        shown = rng.random(n) < tau
        right = predicted == y[t]
        correct += right & shown
        mistake = ~right & shown
        survival += 1
        if not mistake.any():
            continue
        if history:
            stored.append((w.copy(), c.copy(), survival - 1))
            survival = 1
        signs = np.where(y[t] <= levels, -1.0, 1.0)
        step = signs * (((score[:, None] - c) * signs <= 0) & mistake[:, None])
        w += step.sum(1, keepdims=True).astype(np.float32) * x[t]
        c -= step.astype(np.float32)
    if history:
        stored.append((w.copy(), c.copy(), survival))
    return {"w": w, "c": c, "correct": correct, "history": stored}


def widrow_hoff(x, y, etas: np.ndarray) -> np.ndarray:
    w = np.zeros((len(etas), x.shape[1]), np.float32)
    for t in range(len(y)):
        w += (etas * (y[t] - w @ x[t]))[:, None].astype(np.float32) * x[t]
    return w


def one_trial(trial: int, *, n_train: int, n_test: int, n: int, taus, etas) -> dict[str, float]:
    """Every algorithm of Table 1 on one trial's draw; returns the test rank losses."""
    rng = np.random.default_rng(trial)
    x, y = synthetic(n_train, rng)
    tx, ty = synthetic(n_test, rng)
    losses = {}
    prank = perceptrons(x, y, 1, 1.0, rng, history=True)
    losses["PRank"] = np.abs(rank(tx @ prank["w"][0], prank["c"][0]) - ty).mean()
    weights = np.stack([h[0][0] for h in prank["history"]])  # [H, d]
    thresholds = np.stack([h[1][0] for h in prank["history"]])  # [H, k-1]
    votes = np.array([h[2] for h in prank["history"]], float)
    ranks = rank(weights @ tx.T, thresholds[:, None, :])  # [H, n_test]
    losses["PRank-VP"] = np.abs(votes @ ranks / votes.sum() - ty).mean()
    wh = widrow_hoff(x, y, np.asarray(etas, np.float32))
    for e, eta in enumerate(etas):
        losses[f"Widrow-Hoff (eta={eta})"] = np.abs(np.clip(np.rint(tx @ wh[e]), 0, K - 1) - ty).mean()
    for tau in taus:
        oap = perceptrons(x, y, n, tau, rng)
        each = rank(oap["w"] @ tx.T, oap["c"][:, None, :])  # [N, n_test]
        losses[f"OAP-BPM tau={tau}"] = np.abs(rank(tx @ oap["w"].mean(0), oap["c"].mean(0)) - ty).mean()
        losses[f"OAP-Bagg tau={tau}"] = np.abs(each.mean(0) - ty).mean()
        votes = oap["correct"] if oap["correct"].sum() > 0 else np.ones(n)
        losses[f"OAP-VP tau={tau}"] = np.abs(votes @ each / votes.sum() - ty).mean()
    return losses


def numpy_loop_seconds(trials: int, measured: int, **setting) -> tuple[float, dict[str, float]]:
    """Seconds of the whole table in the numpy loop: ``measured`` trials timed, scaled to ``trials``."""
    start = time.perf_counter()
    losses = [one_trial(trial, **setting) for trial in range(measured)]
    seconds = (time.perf_counter() - start) * trials / measured
    return seconds, {name: float(np.mean([loss[name] for loss in losses])) for name in losses[0]}


# -- the cold first run ----------------------------------------------------------------------------


def fresh_copy(destination: Path, root: Path = ROOT) -> None:
    """The files a clone would have: tracked and untracked-but-not-ignored (no builds, no caches)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = root / os.fsdecode(name)
        if source.is_file():
            target = destination / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def cold_environment(scratch: Path) -> dict[str, str]:
    """Every cache a first run could reuse, pointed at empty folders."""
    env = dict(os.environ)
    for variable, name in (
        ("LTR_KERNELS_DIR", "ltr-kernels"),
        ("TORCH_EXTENSIONS_DIR", "torch-extensions"),
        ("TRITON_CACHE_DIR", "triton"),
        ("XDG_CACHE_HOME", "xdg-cache"),
        ("MPLCONFIGDIR", "matplotlib"),
    ):
        env[variable] = str(scratch / "caches" / name)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def timed(command: list[str], *, cwd: Path, env: dict[str, str], log: Path) -> float:
    start = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"`{' '.join(command)}` failed ({done.returncode}); its output: {log}")
    return seconds


def cold_first_run(
    scratch: Path, overrides: list[str], *, build_isolation: bool, source: Path = ROOT
) -> dict[str, float | str]:
    """Fresh copy, fresh venv, ``pip install -e .`` (timed), then the first run (timed)."""
    copy, venv = scratch / "repo", scratch / "venv"
    fresh_copy(copy, source)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    env = cold_environment(scratch)
    install = [python, "-m", "pip", "install", "--no-deps", "--quiet", "-e", "."]
    if not build_isolation:
        install.insert(-2, "--no-build-isolation")
    install_seconds = timed(install, cwd=copy, env=env, log=scratch / "install.log")
    run = [python, "train.py", "experiment=harrington2003", f"hydra.run.dir={scratch / 'run'}", *overrides]
    run_seconds = timed(run, cwd=copy, env=env, log=scratch / "run.log")
    output = (scratch / "run.log").read_text()
    return {"install": install_seconds, "run": run_seconds, "output": output}


def _commit(root: Path) -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    return done.stdout.strip() or "?"


def machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load:.1f}, numpy {np.__version__}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20, help="harrington.trials (the experiment's default: 20)")
    parser.add_argument("--reference-trials", type=int, default=1, help="numpy-loop trials measured (then scaled)")
    parser.add_argument("--repeat", type=int, default=1, help="cold runs, each in its own fresh copy and venv")
    parser.add_argument("--no-build-isolation", action="store_true", help="pip install without build isolation")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folders (their paths are printed)")
    parser.add_argument(
        "--source", type=Path, default=ROOT, help="the git checkout to copy (e.g. a worktree of an older commit)"
    )
    args = parser.parse_args()
    setting = {"n_train": 50000, "n_test": 1000, "n": 100, "taus": (0.3, 0.6, 0.9), "etas": (0.2, 0.1, 0.05, 0.01)}
    overrides = [] if args.trials == 20 else [f"harrington.trials={args.trials}"]
    print(f"machine: {machine()}")
    print(f"experiment=harrington2003, {args.trials} trials; the numpy loop: {args.reference_trials} trial(s) timed")
    print(f"source: {args.source} at {_commit(args.source)}")
    before, losses = numpy_loop_seconds(args.trials, args.reference_trials, **setting)
    print(f"numpy loop (before): {before:.1f} s for {args.trials} trials (load average {os.getloadavg()[0]:.1f})")
    runs = []
    for _ in range(args.repeat):
        scratch = Path(tempfile.mkdtemp(prefix="ltr-first-run-"))
        runs.append(cold_first_run(scratch, overrides, build_isolation=not args.no_build_isolation, source=args.source))
        compiled = [line for line in runs[-1]["output"].splitlines() if "compiling" in line or "built in" in line]
        print(
            f"cold: pip install -e . {runs[-1]['install']:.1f} s, first run {runs[-1]['run']:.1f} s "
            f"(load average {os.getloadavg()[0]:.1f})"
            + ("; compiled during the run: " + "; ".join(compiled) if compiled else "; nothing compiled during the run")
            + (f" (kept: {scratch})" if args.keep else "")
        )
        for line in runs[-1]["output"].splitlines():  # the run's own account of its parts
            if line.startswith("Streams:") or line.startswith("Test rank loss"):
                print(f"    {line.split('; ')[-1] if line.startswith('Test') else line}")
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    after, _ = numpy_loop_seconds(args.trials, args.reference_trials, **setting)
    print(f"numpy loop (after): {after:.1f} s (load average {os.getloadavg()[0]:.1f})")
    reference = (before + after) / 2
    print(
        f"numpy loop's mean test rank losses (sanity): PRank {losses['PRank']:.3f}, PRank-VP "
        f"{losses['PRank-VP']:.3f}, OAP-BPM tau=0.3 {losses['OAP-BPM tau=0.3']:.3f}"
    )
    print()
    print("| step | seconds | numpy loop / step |")
    print("|---|---:|---:|")
    print(f"| numpy loop, Table 1 ({args.trials} trials; mean of before and after) | {reference:.1f} | 1.0x |")
    for i, run in enumerate(runs, 1):
        print(
            f"| cold first run #{i} (`train.py experiment=harrington2003`) | {run['run']:.1f} | "
            f"{reference / run['run']:.1f}x |"
        )
        both = run["run"] + run["install"]
        print(f"| #{i} with its `pip install -e .` (kernels built there) | {both:.1f} | {reference / both:.1f}x |")


if __name__ == "__main__":
    main()
