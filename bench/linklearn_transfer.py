"""LinkLearn vs its untrained start vs BM25 on collections the model never saw (Grangier & Bengio, Table 1).

    python -m bench.linklearn_transfer --corpus ../shared/data/wikispeedia --collection DIR [--collection DIR ...]
    python -m bench.linklearn_transfer --corpus CORPUS --collection DIR ... --train-links 1000,10000,30000,all
    python -m bench.linklearn_transfer                     # a synthetic corpus and synthetic collections

Runs the whole chain of ``python train.py model=linklearn data=linked_corpus data.path=CORPUS
'data.adhoc_dir=[...]'`` (``rankers.pipeline.train``, the default config plus any overrides given
after the options): parse, training, validation with the start-keeping rule, the ad-hoc evaluation
of the kept model, its untrained start and Okapi BM25 (k1 1.2, b 0.75), and ``rank_bm25``'s
``BM25Okapi`` over the same tokens as an external reference. Prints MAP, P@10, R-precision and
nDCG@10 per collection and model with MAP / BM25, the means over the collections, the fit's wall and
CPU seconds; draws ``--png`` (MAP / BM25 per collection). With ``--train-links`` it runs the chain
once per number of training links (``data.max_train_links``; ``all``: every training link) and draws
held-out MAP against that number instead.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.timing import machine
from datamodules.adhoc import read_collection
from datamodules.synthetic_text import write_synthetic_collection, write_synthetic_linked_folder
from rankers.pipeline import compose_config, train
from retrieval.evaluation import evaluate

MODELS = ("linklearn", "start", "bm25", "rank_bm25")
LABELS = {"linklearn": "LinkLearn", "start": "its start", "bm25": "BM25", "rank_bm25": "rank_bm25 BM25Okapi"}


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def rank_bm25_measures(folder: Path) -> dict[str, float]:
    """The collection ranked by rank_bm25's ``BM25Okapi`` (k1 1.2, b 0.75) over our tokens: the external reference."""
    import torch
    from rank_bm25 import BM25Okapi

    collection = read_collection(folder)
    docs, queries = collection.documents, collection.queries

    def tokens(corpus, row: int) -> list[str]:
        start, end = corpus.offsets[row], corpus.offsets[row + 1]
        return [
            docs.vocabulary[t] for t, n in zip(corpus.term_ids[start:end], corpus.tfs[start:end]) for _ in range(int(n))
        ]

    model = BM25Okapi([tokens(docs, d) for d in range(docs.n_docs)], k1=1.2, b=0.75)
    scores = torch.tensor(np.stack([model.get_scores(tokens(queries, q)) for q in range(queries.n_docs)]))
    return evaluate(scores, collection.labels)


def run_chain(corpus: list[str], collections: list[Path], work: Path, overrides: list[str]) -> dict:
    """``train.py model=linklearn data=linked_corpus`` on ``corpus`` with the collections; its results."""
    path = corpus[0] if len(corpus) == 1 else "[" + ",".join(corpus) + "]"
    adhoc = "[" + ",".join(str(c) for c in collections) + "]"
    base = ["model=linklearn", "data=linked_corpus", f"data.path={path}", f"data.adhoc_dir={adhoc}"]
    cfg = compose_config([*base, *overrides], output_dir=work, data_dir=work / "data")
    wall, cpu = time.perf_counter(), cpu_seconds()
    results = train(cfg)
    results["bench_wall_seconds"], results["bench_cpu_seconds"] = time.perf_counter() - wall, cpu_seconds() - cpu
    return results


def per_collection(results: dict, collections: list[Path]) -> dict[str, dict]:
    adhoc = results["adhoc"]
    if len(collections) == 1:
        return {collections[0].name: adhoc}
    return adhoc


def print_table(results: dict, collections: list[Path], external: dict[str, dict]) -> dict[str, dict[str, float]]:
    """The per-collection table; returns ``{model: {collection: MAP / BM25}}``."""
    print("| collection | model | MAP | P@10 | R-prec | nDCG@10 | MAP / BM25 |")
    print("|---|---|---:|---:|---:|---:|---:|")
    ratios: dict[str, dict[str, float]] = {model: {} for model in MODELS}
    for name, entry in per_collection(results, collections).items():
        entry = {**entry, "rank_bm25": external[name]}
        for model in MODELS:
            m = entry[model]
            ratio = m["map"] / entry["bm25"]["map"]
            ratios[model][name] = ratio
            print(
                f"| {name} | {LABELS[model]} | {m['map']:.4f} | {m['p@10']:.4f} | {m['r_precision']:.4f} | "
                f"{m['ndcg@10']:.4f} | {ratio:.3f} |"
            )
    maps = {
        model: [
            per_collection(results, collections)[n][model]["map"] if model != "rank_bm25" else external[n]["map"]
            for n in ratios[model]
        ]
        for model in MODELS
    }
    for model in MODELS:
        values = list(ratios[model].values())
        print(
            f"# {LABELS[model]}: mean MAP {np.mean(maps[model]):.4f}; mean MAP / BM25's mean "
            f"{np.mean(maps[model]) / np.mean(maps['bm25']):.4f}; mean of per-collection ratios {np.mean(values):.4f}, "
            f"min {min(values):.4f}"
        )
    print(f"# LinkLearn mean MAP / its start's: {np.mean(maps['linklearn']) / np.mean(maps['start']):.4f}")
    return ratios


def describe(results: dict) -> None:
    val = results.get("val", {})
    print(
        f"# validation (linked articles): kept {Path(results.get('best_checkpoint') or '?').name}, "
        f"val/map {val.get('map', float('nan')):.4f}, start {val.get('map_start', float('nan')):.4f}, "
        f"BM25 {val.get('map_bm25', float('nan')):.4f}; {results.get('epochs')} epochs"
    )
    print(
        f"# whole chain (parse, training, validation, ad-hoc evaluation, export): "
        f"{results['bench_wall_seconds']:.0f} s wall, {results['bench_cpu_seconds']:.0f} s CPU; "
        f"fit {results.get('fit_seconds', float('nan')):.0f} s"
    )


def plot_ratios(ratios: dict[str, dict[str, float]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(ratios["bm25"])
    fig, ax = plt.subplots(figsize=(max(4, 1.3 * len(names)), 3), dpi=80)
    width = 0.8 / len(MODELS)
    for i, model in enumerate(MODELS):
        ax.bar(np.arange(len(names)) + i * width, [ratios[model][n] for n in names], width, label=LABELS[model])
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2, names, rotation=20)
    ax.set_ylabel("MAP / BM25")
    ax.set_ylim(min(0.8, min(min(r.values()) for r in ratios.values()) - 0.02), None)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png)
    print(f"# wrote {png}")


def plot_curve(points: list[tuple[int, dict[str, float]]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3), dpi=80)
    links = [n for n, _ in points]
    for model in ("linklearn", "start", "bm25"):
        ax.plot(links, [means[model] for _, means in points], marker="o", label=LABELS[model])
    ax.set_xscale("log")
    ax.set_xlabel("training links")
    ax.set_ylabel("mean held-out MAP")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png)
    print(f"# wrote {png}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", action="append", default=[], help="dump or linked-corpus folder (repeatable)")
    parser.add_argument("--collection", type=Path, action="append", default=[])
    parser.add_argument("--train-links", default="", help="e.g. 1000,10000,30000,all: one chain per number")
    parser.add_argument("--png", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the results of every chain here")
    parser.add_argument("overrides", nargs="*", help="train.py overrides, e.g. model.optimizer.lr=0.01")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        corpus = args.corpus or [
            str(write_synthetic_linked_folder(work / "corpus", n_articles=600, n_topics=30, seed=1))
        ]
        collections = args.collection or [
            write_synthetic_collection(work / f"synthetic{i}", n_docs=400, n_topics=20, seed=5 + i) for i in range(2)
        ]
        print(f"# {machine()}")
        print("# corpus: " + ", ".join(corpus) + "; overrides: " + (" ".join(args.overrides) or "none"))
        external = {c.name: rank_bm25_measures(c) for c in collections}
        overrides = ["callbacks.progress_bar.refresh_rate=0", *args.overrides]
        if not args.train_links:
            results = run_chain(corpus, collections, work / "run", overrides)
            describe(results)
            ratios = print_table(results, collections, external)
            if args.png:
                plot_ratios(ratios, args.png)
            if args.json:
                args.json.write_text(json.dumps(results, indent=1, default=str))
            return
        points, everything = [], {}
        for value in args.train_links.split(","):
            limit = None if value == "all" else int(value)
            print(f"\n## training links: {value}")
            results = run_chain(
                corpus,
                collections,
                work / f"run_{value}",
                [*overrides, f"data.max_train_links={limit if limit else 'null'}"],
            )
            describe(results)
            n_links = results["data"]["train_links"]
            print_table(results, collections, external)
            entries = per_collection(results, collections)
            means = {
                model: float(np.mean([e[model]["map"] for e in entries.values()]))
                for model in ("linklearn", "start", "bm25")
            }
            points.append((n_links, means))
            everything[value] = results
        print("\n| training links | LinkLearn mean MAP | start | BM25 | LinkLearn / start |")
        print("|---:|---:|---:|---:|---:|")
        for n, means in points:
            ratio = means["linklearn"] / means["start"]
            print(f"| {n} | {means['linklearn']:.4f} | {means['start']:.4f} | {means['bm25']:.4f} | {ratio:.4f} |")
        if args.png:
            plot_curve(points, args.png)
        if args.json:
            args.json.write_text(json.dumps(everything, indent=1, default=str))


if __name__ == "__main__":
    main()
