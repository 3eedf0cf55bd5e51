"""Where each ranker stands on your LETOR files: our models next to LightGBM and XGBoost, trec_eval metrics.

    python -m bench.letor_peers --train train.txt --val vali.txt --test test.txt   # every model of ours
    python -m bench.letor_peers --train train.txt --val vali.txt --test test.txt --models listnet lambdaloss
    python -m bench.letor_peers --train train.txt --folds 5      # cross-validation inside one file
    python -m bench.letor_peers --train train.txt --folds 5 --no-val --models rankboost listnet \\
        --blends rankboost+listnet                                  # + an averaged pair of models
    python -m bench.letor_peers --train T --test X --models lambdarank ranknet --peers lightgbm \\
        --override model.scorer.hidden=[256,128] --seeds 0 1 2
    python -m bench.letor_peers --train T --folds 5 --no-val --seeds 43 44 --models ranknet_listnet \
        --peers lightgbm-defaults --json before.json          # then, after a change, the same folds:
    python -m bench.letor_peers --train T --folds 5 --no-val --seeds 43 44 --models ranknet_listnet \
        --peers --against before.json --paired earlier:ranknet_listnet earlier:lightgbm-defaults
    python -m bench.letor_peers --train T --folds 5 --no-val --models rankboost --plot peers.png   # + a bar chart

Our models are trained as ``python train.py model=M data=letor data.train=... data.val=...
data.test=...`` runs them (their defaults plus any ``--override``) and scored from the exported
TorchScript scorer on the test file, as ``python -m rankers.score`` does. The peers, LightGBM's
``LGBMRanker(objective="lambdarank")`` and XGBoost's ``XGBRanker(objective="rank:ndcg")``, run with
their library defaults and early stopping on the validation file (without one, on the same
held-out share of training queries our datamodule uses); ``lightgbm-defaults`` and
``xgboost-defaults`` run the defaults alone on every training query, no early stopping (how the
issues' tables ran them). Metrics are trec_eval's through
pytrec_eval (``ndcg_cut_10`` uses linear gain, as trec_eval does), averaged over the test queries;
"fit s" is the fit alone (our runs: Lightning's fit, validation included).

``--folds K`` is for tuning without touching a test set: the training file's queries are split
into K folds; each fold is the test split once, the next fold the validation split. The folds are
drawn once, from the first of ``--seeds``; every seed then trains each model on the same folds (K
runs per seed, several per test fold). For another draw of the folds, run again with another first
seed.

Needs ``pip install -e ".[bench]"`` (lightgbm, xgboost) and pytrec_eval (dev extra).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.ranklib import run_ranklib
from bench.timing import machine
from datamodules.letor_io import LetorData, read_letor, write_letor
from rankers.plots import spread_bar_plot

# every gradient-trained model of ours (conf/model/<name>.yaml), the default of --models
GRADIENT_MODELS = [
    "ranknet_listnet",
    "ranknet",
    "lambdarank",
    "listnet",
    "listmle",
    "approxndcg",
    "neuralndcg",
    "lambdaloss",
]
MEASURES = {"ndcg_cut_10": "ndcg@10", "ndcg_cut_5": "ndcg@5", "map": "map", "P_10": "P@10"}
Split = dict[str, LetorData]


def trec_metrics(data: LetorData, scores: np.ndarray) -> dict[str, float]:
    """trec_eval's measures (pytrec_eval) of ``scores [N]`` on ``data``, averaged over its queries.
    trec_eval reads integer grades; fractional grades (``bench/letor_fractional.py``) are scored by
    ``metrics.functional`` with the same conventions (linear gain, relevant when > 0)."""
    if not np.array_equal(data.labels, np.round(data.labels)):
        return fractional_metrics(data, scores)
    import pytrec_eval

    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q, (start, stop) in enumerate(zip(data.offsets[:-1], data.offsets[1:], strict=True)):
        docs = [f"d{row}" for row in range(start, stop)]
        qrels[f"q{q}"] = {doc: int(label) for doc, label in zip(docs, data.labels[start:stop], strict=True)}
        run[f"q{q}"] = {doc: float(score) for doc, score in zip(docs, scores[start:stop], strict=True)}
    per_query = pytrec_eval.RelevanceEvaluator(qrels, set(MEASURES)).evaluate(run)
    return {name: statistics.fmean(q[measure] for q in per_query.values()) for measure, name in MEASURES.items()}


def fractional_metrics(data: LetorData, scores: np.ndarray) -> dict[str, float]:
    """``MEASURES`` by ``metrics.functional`` (linear gain, ties by list position): trec_eval's
    definitions, for labels trec_eval cannot read."""
    import torch

    from metrics.functional import average_precision, ndcg, precision

    lengths = np.diff(data.offsets)
    width = int(lengths.max())
    padded_scores = np.zeros((data.num_queries, width), np.float32)
    padded_labels = np.zeros((data.num_queries, width), np.float32)
    mask = np.zeros((data.num_queries, width), bool)
    for q, (start, stop) in enumerate(zip(data.offsets[:-1], data.offsets[1:], strict=True)):
        padded_scores[q, : stop - start] = scores[start:stop]
        padded_labels[q, : stop - start] = data.labels[start:stop]
        mask[q, : stop - start] = True
    s, y, m = torch.from_numpy(padded_scores), torch.from_numpy(padded_labels), torch.from_numpy(mask)
    values = {
        "ndcg@10": ndcg(s, y, m, k=10, gain="linear"),
        "ndcg@5": ndcg(s, y, m, k=5, gain="linear"),
        "map": average_precision(s, y, m),
        "P@10": precision(s, y, m, k=10),
    }
    return {name: float(values[name].mean()) for name in MEASURES.values()}


def fit_ours(model: str, files: dict[str, str], workdir: Path, overrides: list[str], seed: int):
    """Train one of our models through the pipeline; (test scores from the exported scorer, fit seconds,
    epochs trained)."""
    from hydra.utils import get_method

    from rankers.pipeline import compose_config
    from rankers.score import score_file

    out = workdir / f"{model}-{seed}-{Path(files['test']).stem}"  # one folder per fold: no -vN checkpoints
    split_overrides = [f"data.{split}={path}" for split, path in files.items()]
    quiet = ["callbacks.progress_bar.refresh_rate=0", "~logger"]
    cfg = compose_config(
        [f"model={model}", "data=letor", *split_overrides, f"seed={seed}", *quiet, *overrides],
        output_dir=out,
        data_dir=workdir / "data",
    )
    results = get_method(cfg.entry)(cfg)  # model=auto has its own entry (rankers.selection.run.train_auto)
    exported = out / "export" / "scorer.pt"
    # model=auto: its whole cost (cross-validation, refit); the chosen candidate in place of epochs
    seconds = results.get("total_seconds", results["fit_seconds"])
    return (
        score_file(exported, files["test"])[0],
        seconds,
        results.get("selection", {}).get("chosen", results.get("epochs")),
    )


def _group_sizes(data: LetorData) -> np.ndarray:
    return np.diff(data.offsets)


def fit_lightgbm(splits: Split, seed: int, *, early_stopping: bool = True):
    import lightgbm as lgb

    ranker = lgb.LGBMRanker(objective="lambdarank", random_state=seed, verbose=-1)
    stopping = {}
    if early_stopping:
        stopping = {
            "eval_set": [(splits["val"].features, splits["val"].labels)],
            "eval_group": [_group_sizes(splits["val"])],
            "eval_at": [10],
            "callbacks": [lgb.early_stopping(50, verbose=False)],
        }
    start = time.perf_counter()
    ranker.fit(splits["train"].features, splits["train"].labels, group=_group_sizes(splits["train"]), **stopping)
    seconds = time.perf_counter() - start
    return ranker.predict(splits["test"].features), seconds


def fit_xgboost(splits: Split, seed: int, *, early_stopping: bool = True):
    import xgboost as xgb

    def group_ids(data: LetorData) -> np.ndarray:  # sorted query ids, as XGBoost requires
        return np.repeat(np.arange(data.num_queries), _group_sizes(data))

    stopping = {"early_stopping_rounds": 50, "eval_metric": "ndcg@10"} if early_stopping else {}
    ranker = xgb.XGBRanker(objective="rank:ndcg", random_state=seed, n_jobs=0, **stopping)
    evaluation = {}
    if early_stopping:
        evaluation = {
            "eval_set": [(splits["val"].features, splits["val"].labels)],
            "eval_qid": [group_ids(splits["val"])],
        }
    start = time.perf_counter()
    ranker.fit(
        splits["train"].features, splits["train"].labels, qid=group_ids(splits["train"]), verbose=False, **evaluation
    )
    seconds = time.perf_counter() - start
    return ranker.predict(splits["test"].features), seconds


def fit_ranklib(splits: Split, seed: int, *, jar: str, ranker: int, options: list[str]) -> tuple[np.ndarray, float]:
    """RankLib trained on the training split, with ``-validate`` when there is a validation file
    (without one, on every training query, as ``-train T -test X`` runs it); ``bench.ranklib``."""
    with tempfile.TemporaryDirectory(prefix="ranklib-") as folder:
        paths = {name: Path(folder) / f"{name}.txt" for name in splits}
        for name, path in paths.items():
            write_letor(path, splits[name])
        run = run_ranklib(
            jar,
            paths["train"],
            paths["test"],
            ranker=ranker,
            options=options,
            validate=paths.get("val"),
            workdir=folder,
        )
    return run.scores, run.fit_seconds


PEERS: dict[str, Callable[[Split, int], tuple[np.ndarray, float]]] = {
    "lightgbm": fit_lightgbm,
    "xgboost": fit_xgboost,
    # the libraries' defaults on every training query, no early stopping (how the issues' tables ran them)
    "lightgbm-defaults": functools.partial(fit_lightgbm, early_stopping=False),
    "xgboost-defaults": functools.partial(fit_xgboost, early_stopping=False),
}
# peers that train on the whole training split (no validation split carved out of it)
WHOLE_TRAINING_SPLIT = {"lightgbm-defaults", "xgboost-defaults"}
# RankLib's eight rankers as the issue tracker ran them (its defaults; RankBoost: 300 rounds, 10 thresholds)
RANKLIB = {
    "ranklib-mart": (0, []),
    "ranklib-ranknet": (1, []),
    "ranklib-rankboost": (2, ["-round", "300", "-tc", "10"]),
    "ranklib-adarank": (3, []),
    "ranklib-coordascent": (4, []),
    "ranklib-lambdamart": (6, []),
    "ranklib-listnet": (7, []),
    "ranklib-randomforests": (8, []),
}


def held_out_validation(train: LetorData, seed: int, fraction: float = 0.1) -> Split:
    """The split our datamodule makes when no validation file is given (same seed, same queries)."""
    order = np.random.default_rng(seed).permutation(train.num_queries)
    n_val = max(1, round(fraction * train.num_queries))
    return {"val": train.subset(np.sort(order[:n_val])), "train": train.subset(np.sort(order[n_val:]))}


def folds(
    train: LetorData, k: int, seed: int, workdir: Path, *, with_val: bool = True, small: bool = False
) -> list[dict[str, str]]:
    """K (train, val, test) file triples over the queries of ``train``: fold f is the test split,
    fold f+1 the validation split (``with_val=False``: part of the training split, and no validation
    file, as ``train.py data.train=... data.test=...`` is run). ``small`` (with ``with_val=False``):
    fold f is the training split and the other folds the test split, for small training sets."""
    order = np.random.default_rng([seed, 7]).permutation(train.num_queries)
    parts = np.array_split(order, k)
    triples = []
    for f in range(k):
        test, val = parts[f], parts[(f + 1) % k]
        rest = np.concatenate([parts[g] for g in range(k) if g not in (f, (f + 1) % k)])
        files = {}
        named = (("train", rest), ("val", val), ("test", test))
        if not with_val:
            named = (("train", np.concatenate([rest, val])), ("test", test))
        if not with_val and small:
            named = (("train", test), ("test", np.concatenate([rest, val])))
        for name, rows in named:
            path = workdir / f"fold{f}-{name}.txt"
            write_letor(path, train.subset(np.sort(rows)))
            files[name] = str(path)
        triples.append(files)
    return triples


def evaluate_setting(files: dict[str, str], args: argparse.Namespace, workdir: Path) -> dict[str, list[dict]]:
    """Every model and peer on one (train, val?, test) setting, for every seed."""
    width = max(read_letor(path).num_features for path in files.values())
    splits = {name: read_letor(path).with_num_features(width) for name, path in files.items()}
    rows: dict[str, list[dict]] = {}
    for seed in args.seeds:
        peer_splits = dict(splits) if "val" in splits else {**splits, **held_out_validation(splits["train"], seed)}
        for name in args.peers:
            if name in RANKLIB:
                ranker, options = RANKLIB[name]
                scores, seconds = fit_ranklib(splits, seed, jar=args.ranklib_jar, ranker=ranker, options=options)
            else:
                scores, seconds = PEERS[name](splits if name in WHOLE_TRAINING_SPLIT else peer_splits, seed)
            rows.setdefault(name, []).append({**trec_metrics(splits["test"], scores), "fit s": seconds})
        fitted = {}
        for model in args.models:
            scores, seconds, epochs = fit_ours(model, files, workdir, args.override, seed)
            fitted[model] = (scores, seconds)
            row = {**trec_metrics(splits["test"], scores), "fit s": seconds, "epochs": epochs}
            rows.setdefault(model, []).append(row)
        for blend in args.blends:
            members = blend.split("+")
            scores = sum(per_query_zscores(fitted[member][0], splits["test"]) for member in members)
            seconds = sum(fitted[member][1] for member in members)
            rows.setdefault(blend, []).append({**trec_metrics(splits["test"], scores), "fit s": seconds})
    return rows


def per_query_zscores(scores: np.ndarray, data: LetorData) -> np.ndarray:
    """Each query's scores centred and scaled to unit spread (constant lists: centred), so that
    models on different scales can be summed."""
    out = np.empty(len(scores), dtype=np.float64)
    for start, stop in zip(data.offsets[:-1], data.offsets[1:], strict=True):
        part = scores[start:stop].astype(np.float64)
        spread = part.std()
        out[start:stop] = (part - part.mean()) / (spread if spread > 0 else 1.0)
    return out


def table(rows: dict[str, list[dict]], note: str) -> str:
    columns = [*MEASURES.values(), "fit s"]
    lines = [note, "", "| model | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for model, runs in rows.items():
        cells = []
        for column in columns:
            values = [run[column] for run in runs]
            spread = f" ± {statistics.stdev(values):.4f}" if len(values) > 1 and column != "fit s" else ""
            cells.append(
                f"{statistics.fmean(values):.4f}{spread}" if column != "fit s" else f"{statistics.fmean(values):.1f}"
            )
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def seed_spread(runs: list[dict], n_seeds: int, measure: str = "ndcg@10") -> float | None:
    """One seed's standard deviation of ``measure`` on a test split, from the seeds' spread on each
    split (``runs`` split-major, seed-minor, as ``evaluate_setting`` appends them): the pooled
    within-split variance. None with one seed."""
    if n_seeds < 2 or len(runs) % n_seeds:
        return None
    values = np.array([run[measure] for run in runs]).reshape(-1, n_seeds)
    return float(np.sqrt(values.var(1, ddof=1).mean()))


def paired_difference(runs: list[dict], reference: list[dict], measure: str = "ndcg@10") -> str:
    """``mean ± standard error (wins / runs)`` of ``runs - reference``, run by run (the same split and
    seed at each position: both from this bench with the same folds and seeds)."""
    if len(runs) != len(reference):
        raise ValueError(f"cannot pair {len(runs)} runs with {len(reference)}: other folds or seeds?")
    gaps = np.array([run[measure] for run in runs]) - np.array([run[measure] for run in reference])
    error = gaps.std(ddof=1) / np.sqrt(len(gaps)) if len(gaps) > 1 else float("nan")
    return f"{gaps.mean():+.4f} ± {error:.4f} ({int((gaps > 0).sum())} / {len(gaps)})"


def paired_lines(rows: dict[str, list[dict]], references: dict[str, list[dict]]) -> list[str]:
    """Every row of this run against every reference row (of this run, or ``earlier:NAME`` of ``--against``)."""
    return [
        f"{name} - {reference}: {paired_difference(runs, against)}"
        for reference, against in references.items()
        for name, runs in rows.items()
        if name != reference
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--val")
    parser.add_argument("--test", help="required unless --folds")
    parser.add_argument("--folds", type=int, default=0, help="cross-validate inside --train instead")
    parser.add_argument("--models", nargs="*", default=GRADIENT_MODELS, help="conf/model names of ours")
    parser.add_argument("--peers", nargs="*", default=list(PEERS), choices=[*PEERS, *RANKLIB])
    parser.add_argument("--ranklib-jar", help="RankLib's jar, for the ranklib-* peers (needs java)")
    parser.add_argument(
        "--blends", nargs="*", default=[], help="A+B: the sum of --models A's and B's per-query z-scored test scores"
    )
    parser.add_argument(
        "--no-val", action="store_true", help="with --folds: no validation file (its fold joins training)"
    )
    parser.add_argument(
        "--small", action="store_true", help="with --folds --no-val: each fold trains alone, the others test"
    )
    parser.add_argument("--override", nargs="*", default=[], help="Hydra overrides for our models")
    parser.add_argument(
        "--seeds", nargs="*", type=int, default=[0], help="training seeds; with --folds the first also draws the folds"
    )
    parser.add_argument("--json", help="also write every run's figures here")
    parser.add_argument(
        "--paired",
        nargs="*",
        default=[],
        help="print every row's paired ndcg@10 difference against these rows (NAME, or earlier:NAME from --against)",
    )
    parser.add_argument("--against", help="an earlier run's --json (same folds and seeds), for --paired earlier:NAME")
    parser.add_argument("--plot", help="also draw ndcg@10 per row (mean bar, every run a dot, ± std) to this PNG")
    args = parser.parse_args(argv)
    if args.small and not (args.folds and args.no_val):
        parser.error("--small needs --folds and --no-val")
    earlier = json.loads(Path(args.against).read_text()) if args.against else {}
    rows_to_come = {*args.models, *args.peers, *args.blends, *(f"earlier:{name}" for name in earlier)}
    missing = [name for name in args.paired if name not in rows_to_come]
    if missing:  # said before the run, not after it
        parser.error(f"--paired names rows this run (or --against) does not have: {missing}")
    unknown = {member for blend in args.blends for member in blend.split("+")} - set(args.models)
    if unknown:
        parser.error(f"--blends name models that --models does not train: {sorted(unknown)}")
    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="letor-peers-") as folder:
        workdir = Path(folder)
        if args.folds:
            data = read_letor(args.train)
            settings = folds(data, args.folds, args.seeds[0], workdir, with_val=not args.no_val, small=args.small)
        elif args.test:
            settings = [{"train": args.train, **({"val": args.val} if args.val else {}), "test": args.test}]
        else:
            parser.error("give --test, or --folds to cross-validate inside --train")
        rows: dict[str, list[dict]] = {}
        for files in settings:
            for model, runs in evaluate_setting(files, args, workdir).items():
                rows.setdefault(model, []).extend(runs)
    where = f"{args.folds}-fold cross-validation of {args.train}" if args.folds else f"test file {args.test}"
    if args.folds and args.no_val:
        where += " without validation files"
    if args.folds and args.small:
        where += ", each fold training alone"
    note = (
        f"machine: {machine()}\n\n{where}; seeds {args.seeds}; overrides {args.override or 'none'}; "
        "mean (± std over folds and seeds)"
    )
    print(table(rows, note))
    spreads = {model: seed_spread(runs, len(args.seeds)) for model, runs in rows.items()}
    if any(spread is not None for spread in spreads.values()):
        print("\none seed's ndcg@10 standard deviation on a test split (the seeds' spread on each split):")
        print(", ".join(f"{model} {spread:.4f}" for model, spread in spreads.items() if spread is not None))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.plot:
        runs = {model: [run["ndcg@10"] for run in model_runs] for model, model_runs in rows.items()}
        title = f"{where}\nseeds {args.seeds}; trec_eval ndcg_cut_10, every run a dot; {machine()}"
        print(f"plot: {spread_bar_plot(runs, args.plot, title=title)}")
    if args.paired:
        pool = {**rows, **{f"earlier:{name}": runs for name, runs in earlier.items()}}
        print("\npaired ndcg@10 differences, run by run (mean ± standard error, wins / runs):")
        print("\n".join(paired_lines(rows, {name: pool[name] for name in args.paired})))


if __name__ == "__main__":
    main()
