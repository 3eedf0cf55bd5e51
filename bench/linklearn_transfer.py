"""LinkLearn vs its untrained start vs BM25 on collections the model never saw (Grangier & Bengio, Table 1).

    python bench/linklearn_transfer.py                                   # synthetic dump and collections
    python bench/linklearn_transfer.py --dump DUMP.xml.bz2 --collection DIR [--collection DIR ...] [overrides]

Trains ``model=linklearn`` through ``train.py``'s pipeline (default config) on the dump, then ranks
each collection (``docs.tsv``, ``queries.tsv``, ``qrels.txt``) with the trained model, its untrained
start and Okapi BM25 (k1 1.2, b 0.75), and prints MAP, P@10, R-precision, nDCG@10 and the ratios.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._timing import machine
from datamodules.adhoc import read_collection
from datamodules.synthetic_text import write_synthetic_collection, write_synthetic_dump
from rankers.linklearn.module import LinkLearnModule
from rankers.pipeline import compose_config, train
from retrieval import bm25_scores, evaluate

SYNTHETIC = {
    "unseen vocabulary": {},
    "+ lengths 20-600, confusable topics": {"lengths": (20, 600), "neighbour_share": 0.3, "topic_share": 0.12},
    "+ 3 common words per query": {
        "lengths": (20, 600),
        "neighbour_share": 0.3,
        "topic_share": 0.12,
        "query_words": (2, 3),
    },
}


def trained_model(dump: Path, work: Path, overrides: list[str]) -> LinkLearnModule:
    base = ["model=linklearn", "data=wikipedia", f"data.path={dump}", "callbacks.progress_bar.refresh_rate=0"]
    cfg = compose_config([*base, *overrides, "export=false"], output_dir=work / "run", data_dir=work / "data")
    results = train(cfg)
    val = results["val"]
    print(
        f"# validation (linked articles): trained {val['map']:.4f}, start {val['map_start']:.4f}, "
        f"BM25 {val['map_bm25']:.4f}; {results['epochs']} epochs, {results['fit_seconds']:.0f} s, "
        f"kept {Path(results['best_checkpoint']).name}"
    )
    print("# validation by kind: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(val.items()) if k.startswith("map_")))
    model = LinkLearnModule(**{k: v for k, v in cfg.model.items() if k not in ("_target_", "optimizer")})
    model.load_state_dict(torch.load(results["best_checkpoint"], weights_only=True)["state_dict"])
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dump", type=Path, action="append", default=[])
    parser.add_argument("--collection", type=Path, action="append", default=[])
    parser.add_argument("--articles", type=int, default=2000)
    parser.add_argument("overrides", nargs="*", help="train.py overrides, e.g. model.optimizer.lr=0.01")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        dumps = args.dump or [
            write_synthetic_dump(work / "wiki.xml.bz2", n_articles=args.articles, n_topics=args.articles // 20, seed=1)
        ]
        path = dumps[0] if len(dumps) == 1 else "[" + ",".join(map(str, dumps)) + "]"
        collections = {str(c): c for c in args.collection} or {
            name: write_synthetic_collection(work / f"c{i}", n_docs=600, n_topics=30, n_queries=30, seed=5, **opts)
            for i, (name, opts) in enumerate(SYNTHETIC.items())
        }
        print(f"# {machine()}")
        model = trained_model(path, work, args.overrides)
        print("| collection | model | MAP | P@10 | R-prec | nDCG@10 | MAP / BM25 |")
        print("|---|---|---:|---:|---:|---:|---:|")
        ratios = {"LinkLearn": [], "its start": []}
        for name, folder_ in collections.items():
            c = read_collection(folder_)
            runs = {
                "LinkLearn": model.score_collection(c.documents, c.queries),
                "its start": model.score_collection(c.documents, c.queries, corrected=False),
                "BM25": bm25_scores(c.documents, c.queries, k1=1.2, b=0.75),
            }
            measured = {label: evaluate(scores, c.labels) for label, scores in runs.items()}
            for label, m in measured.items():
                ratio = m["map"] / measured["BM25"]["map"]
                ratios.get(label, []).append(ratio)
                print(
                    f"| {name} | {label} | {m['map']:.4f} | {m['p@10']:.3f} | {m['r_precision']:.3f} | "
                    f"{m['ndcg@10']:.3f} | {ratio:.3f} |"
                )
        for label, values in ratios.items():
            print(f"# {label}: mean MAP / BM25 {sum(values) / len(values):.4f}, min {min(values):.4f}")


if __name__ == "__main__":
    main()
