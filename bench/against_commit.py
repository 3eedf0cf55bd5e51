"""Today's defaults against an earlier commit's, on the same cross-validation folds of your LETOR file.

    python -m bench.against_commit --commit e001d72 --train msn1.fold1.train.5k.txt \
        --models ranknet lambdarank --folds 5 --seeds 51 52

Both versions train ``model=M data=letor data.train=FOLD data.test=FOLD seed=S`` at their own
defaults through their own pipeline's entry, as ``bench.letor_peers`` does (no validation file: each
takes its own held-out share), each in its own process from its own checkout (``git worktree add``
of ``--commit``'s sha into ``--workdir``, made once; the process checks that it imported that
checkout's code). A run is reused only for the same data, folds, seed, overrides and code (today's:
HEAD and the uncommitted diff). Both
exported scorers are scored here, by this checkout's reader, with trec_eval's measures
(``bench.letor_peers.trec_metrics``), so the metric code is the same on both sides. Prints ndcg@10 and
MAP per model and version, and the paired difference (today - then) with its standard error over the
fold x seed runs. Folds come from ``bench.letor_peers.folds`` (the first seed draws them).

Why a separate process per fit: the earlier commit's packages have the same names as today's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from bench.letor_peers import folds, trec_metrics
from datamodules.letor_io import read_letor
from rankers.score import score_file

TODAY = Path(__file__).resolve().parents[1]
MEASURES = ("ndcg@10", "map")

# run inside a checkout (its directory first on the import path); the same call as bench.letor_peers.fit_ours
FIT = """
import sys
from pathlib import Path
from hydra.utils import get_method
from rankers.pipeline import compose_config
import rankers.pipeline
print("CODE", Path(rankers.pipeline.__file__).resolve().parents[1])
model, train, test, seed, out, *extra = sys.argv[1:]
quiet = ["callbacks.progress_bar.refresh_rate=0", "~logger"]
overrides = [f"model={model}", "data=letor", f"data.train={train}", f"data.test={test}", f"seed={seed}"]
cfg = compose_config([*overrides, *quiet, *extra], output_dir=out, data_dir=Path(out) / "data")
get_method(cfg.entry)(cfg)
"""


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(TODAY), *args], check=True, capture_output=True, text=True).stdout


def checkout(commit: str, workdir: Path) -> tuple[str, Path]:
    """``commit``'s sha and a worktree of it under ``workdir`` (made once, reused: named by the sha)."""
    sha = git("rev-parse", "--verify", f"{commit}^{{commit}}").strip()
    tree = workdir / f"checkout-{sha[:12]}"
    if not (tree / "train.py").exists():
        git("worktree", "add", "--detach", str(tree), sha)
    return sha, tree


def code_of_today() -> str:
    """HEAD and a hash of the uncommitted diff: today's side is the working tree."""
    return git("rev-parse", "HEAD").strip() + hashlib.sha256(git("diff", "HEAD").encode()).hexdigest()[:12]


def run_key(*parts: object) -> str:
    return hashlib.sha256(json.dumps([str(part) for part in parts]).encode()).hexdigest()[:12]


def fit(repo: Path, model: str, files: dict[str, str], seed: int, out: Path, overrides: list[str]) -> Path:
    """Train in ``repo``'s code (refused if the process imported another checkout's); the exported
    TorchScript scorer's path."""
    scorer = out / "export" / "scorer.pt"
    if not scorer.exists():
        args = [sys.executable, "-c", FIT, model, files["train"], files["test"], str(seed), str(out), *overrides]
        run = subprocess.run(
            args, cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)}, capture_output=True, text=True
        )
        if run.returncode:
            raise RuntimeError(f"{model} in {repo} failed:\n{run.stderr[-3000:]}")
        check_imported(run.stdout, repo)
    return scorer


def check_imported(stdout: str, repo: Path) -> None:
    """Raise unless the fit's ``CODE`` line names ``repo``: a run that imported another checkout's
    packages (an installed copy, a stray path) would compare that code instead."""
    imported = [line.split(" ", 1)[1] for line in stdout.splitlines() if line.startswith("CODE ")]
    if imported != [str(repo.resolve())]:
        raise RuntimeError(f"the run imported {imported or 'nothing it named'}, not {repo}'s code")


def paired(today: list[float], then: list[float]) -> str:
    diff = np.asarray(today) - np.asarray(then)
    error = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
    return f"{diff.mean():+.4f} ± {error:.4f} ({int((diff > 0).sum())}/{len(diff)})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", required=True, help="the earlier commit (any git revision)")
    parser.add_argument("--train", required=True)
    parser.add_argument("--models", nargs="+", default=["ranknet", "lambdarank"])
    parser.add_argument("--folds", type=int, default=5, help="at least 3 (a test, and training folds)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[51, 52])
    parser.add_argument("--override", nargs="*", default=[], help="Hydra overrides for both versions")
    parser.add_argument("--workdir", default="outputs/against_commit")
    parser.add_argument("--json", help="also write every run's figures here")
    args = parser.parse_args(argv)
    if args.folds < 3:
        parser.error(f"--folds {args.folds}: at least 3")

    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    sha, tree = checkout(args.commit, workdir)
    repos = {args.commit: (tree, sha), "today": (TODAY, code_of_today())}
    data = read_letor(args.train)
    content = hashlib.sha256(Path(args.train).read_bytes()).hexdigest()
    setting = run_key(Path(args.train).resolve(), content, args.folds, args.seeds[0])
    fold_dir = workdir / f"folds-{setting}"
    fold_dir.mkdir(exist_ok=True)
    triples = folds(data, args.folds, args.seeds[0], fold_dir, with_val=False)
    runs = []
    for f, files in enumerate(triples):
        test = read_letor(files["test"])
        for model in args.models:
            for seed in args.seeds:
                for version, (repo, code) in repos.items():
                    key = run_key(setting, code, args.override)
                    out = workdir / f"{version}-{model}-{seed}-fold{f}-{key}"
                    scores = score_file(fit(repo, model, files, seed, out, args.override), files["test"])[0]
                    runs.append(
                        {"fold": f, "seed": seed, "model": model, "version": version, **trec_metrics(test, scores)}
                    )
                    print(json.dumps(runs[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    print(
        f"\n| model | measure | {args.commit} | today | today - {args.commit} (wins / runs) |\n|---|---|---:|---:|---:|"
    )
    for model in args.models:
        for measure in MEASURES:
            then = [r[measure] for r in runs if r["model"] == model and r["version"] == args.commit]
            now = [r[measure] for r in runs if r["model"] == model and r["version"] == "today"]
            print(f"| {model} | {measure} | {np.mean(then):.4f} | {np.mean(now):.4f} | {paired(now, then)} |")


if __name__ == "__main__":
    main()
