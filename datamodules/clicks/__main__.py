"""``python -m datamodules.clicks simulate --letor train.txt --out DIR [options]``: see docs/clicks.md."""

from __future__ import annotations

import argparse
import json

from datamodules.clicks.click_models import MODELS
from datamodules.clicks.simulate import Simulation, load_labeled, parse_sessions, simulate


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m datamodules.clicks")
    commands = parser.add_subparsers(dest="command", required=True)
    sim = commands.add_parser("simulate", help="write a simulated click log from a LETOR file with labels")
    sim.add_argument("--letor", required=True, help="LETOR file with relevance labels")
    sim.add_argument("--out", required=True, help="folder for features.txt, clicks.tsv, simulation.json")
    sim.add_argument("--click-model", choices=MODELS, default="pbm")
    sim.add_argument("--eta", type=float, default=1.0, help="pbm: examination (1/position)^eta")
    sim.add_argument("--eps", type=float, default=0.1, help="click noise: P(click | examined, irrelevant)")
    sim.add_argument("--continuation", type=float, default=0.5, help="dcm: P(going on after a click)")
    sim.add_argument("--top-k", type=int, default=10, help="documents shown per session")
    sim.add_argument("--sessions", default="100-200", help="sessions per query: N or LOW-HIGH")
    sim.add_argument("--ranker", default="labels", help="logging ranker: labels | feature:J | scorer:PATH")
    sim.add_argument("--noise", type=float, default=1.0, help="std of the per-session noise on its scores")
    sim.add_argument("--swap", type=float, default=0.0, help="share of sessions with position 1 swapped (RandPair)")
    sim.add_argument("--seed", type=int, default=0)
    parser.epilog = sim.format_help()  # `--help` shows the command's options too
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    args = parser.parse_args(argv)
    data, ids = load_labeled(args.letor)
    setting = Simulation(
        click_model=args.click_model,
        eta=args.eta,
        eps=args.eps,
        continuation=args.continuation,
        top_k=args.top_k,
        sessions=parse_sessions(args.sessions),
        ranker=args.ranker,
        noise=args.noise,
        swap=args.swap,
        seed=args.seed,
    )
    truth = simulate(data, ids, setting, args.out)
    print(json.dumps({"out": args.out, "sessions": truth["sessions"], "propensity": truth["propensity"]}))


if __name__ == "__main__":
    main()
