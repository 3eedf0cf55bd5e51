"""Tables and the propensity plot of ``bench/clicks_study.sh`` outputs (docs/clicks.md).

python -m bench.clicks_report OUT [OUT ...] --plot docs/img/clicks_propensity.png
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from rankers.clicks.plots import plot_propensities

METHODS = ("none", "ips", "dla", "lambdarank")


def table(out: Path) -> list[str]:
    rows = []
    for log in sorted(out.glob("log_*")):
        truth = json.loads((log / "simulation.json").read_text())["propensity"]
        name = log.name.removeprefix("log_")
        cells = [name]
        for method in METHODS:
            runs = [json.loads(p.read_text()) for p in sorted((out / name / method).glob("*/results.json"))]
            ndcg = [r["test"]["ndcg@10"] for r in runs]
            cells.append(f"{statistics.mean(ndcg):.4f} ({len(ndcg)})" if ndcg else "-")
        em = next(iter(sorted((out / name / "ips").glob("*/results.json"))), None)
        if em is not None and truth:
            r = json.loads(em.read_text())
            errors = [abs(e / t - 1) for e, t in zip(r["propensity"], truth, strict=False)]
            cells.append(f"{max(errors):.3f}")
            cells.append(f"{max(r['fit_seconds'] for r in [r]):.0f}")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("outs", nargs="+")
    parser.add_argument("--plot", default=None, help="PNG of the estimates against the truth (first OUT, eta2)")
    args = parser.parse_args()
    print("| log | naive (none) | IPS | DLA | LambdaRank on true labels | max EM error pos 1-10 | IPS fit s |")
    print("|---|---|---|---|---|---|---|")
    for out in args.outs:
        print(f"| **{Path(out).name}** | | | | | | |")
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
