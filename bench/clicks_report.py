"""Tables and the propensity plot of ``bench/clicks_study.sh`` outputs (docs/clicks.md).

python -m bench.clicks_report OUT [OUT ...] --plot docs/img/clicks_propensity.png
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from rankers.clicks.plots import plot_propensities

STANDARD = ("none", "ips", "dla", "lambdarank")  # first, in this order; other runs (VARIANTS) follow by name


def _mean_se(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.4f}" if values else "-"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values) / len(values) ** 0.5:.4f}"


def _ndcg(folder: Path) -> dict[str, float]:
    """Test ndcg@10 of each seed's run under ``folder`` (seed -> value)."""
    return {p.parent.name: json.loads(p.read_text())["test"]["ndcg@10"] for p in folder.glob("*/results.json")}


def table(out: Path) -> list[str]:
    """One row per (log, method): test ndcg@10 (mean ± s.e. over seeds), the paired difference to
    the naive run of the same seed, and per log the EM propensities' largest relative error."""
    rows = []
    for log in sorted(out.glob("log_*")):
        truth = json.loads((log / "simulation.json").read_text())["propensity"]
        name = log.name.removeprefix("log_")
        present = {p.name for p in (out / name).iterdir() if p.is_dir()} if (out / name).is_dir() else set()
        methods = [m for m in STANDARD if m in present] + sorted(present - set(STANDARD))
        naive = _ndcg(out / name / "none")
        for method in methods:
            runs = _ndcg(out / name / method)
            paired = [runs[s] - naive[s] for s in sorted(runs) if s in naive]
            versus = _mean_se(paired) if method != "none" and paired else ""
            rows.append(f"| {name} | {method} | {_mean_se(list(runs.values()))} ({len(runs)}) | {versus} |")
        # the default's EM first, then the other standard runs', then any variant's (a variant may change it)
        order = sorted(methods, key=lambda m: m != "ips")
        paths = [p for m in order for p in sorted((out / name / m).glob("*/results.json"))]
        runs = (json.loads(p.read_text()) for p in paths)
        estimate = next((r["propensity"] for r in runs if "propensity" in r), None)  # every click run's EM
        if estimate is not None and truth:
            errors = [abs(e / t - 1) for e, t in zip(estimate, truth, strict=False)]
            rows.append(
                f"| {name} | EM propensity, max relative error at positions 1-{len(errors)} | {max(errors):.3f} | |"
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("outs", nargs="+")
    parser.add_argument("--plot", default=None, help="PNG of the estimates against the truth (first OUT, eta2)")
    args = parser.parse_args()
    print("| log | method | test ndcg@10 (seeds) | minus naive, same seed |")
    print("|---|---|---|---|")
    for out in args.outs:
        print(f"| **{Path(out).name}** | | | |")
        print("\n".join(table(Path(out))))
    if args.plot:
        out = Path(args.outs[0])
        truth = json.loads((out / "log_eta2" / "simulation.json").read_text())["propensity"]
        dla = json.loads(next((out / "eta2" / "dla").glob("*/results.json")).read_text())
        estimates = dla["propensity_estimates"]
        plot_propensities(estimates, Path(args.plot), truth, title=f"{out.name}, PBM eta 2")
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
