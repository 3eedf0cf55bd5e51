"""LinkLearn vs BM25 on collections the model never saw: the claim of Grangier & Bengio's Table 1.

    python bench/linklearn_transfer.py                         # a synthetic dump, three collections
    python bench/linklearn_transfer.py --dump enwiki.xml.bz2 --collection trec_dir/ [--collection ...]

Trains ``model=linklearn`` through ``train.py``'s pipeline (default config) on the dump, then ranks
each collection with the trained model, its untrained tf-idf start, constant factors (f = 1: a count
of shared terms) and Okapi BM25 (k1 = 1.2, b = 0.75), and prints MAP, P@10, R-precision and nDCG@10.
Without arguments it uses a synthetic dump and three synthetic collections of increasing difficulty
(different vocabulary, then shorter/longer documents, confusable topics and more common words in
queries).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._timing import machine
from datamodules.adhoc import bm25_scores, evaluate, read_collection, write_synthetic_collection
from datamodules.wikipedia import write_synthetic_dump
from rankers.linklearn import LinkLearnModule
from rankers.pipeline import compose_config, train

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
    cfg = compose_config([*base, *overrides], output_dir=work / "run", data_dir=work / "data")
    results = train(cfg)
    print(
        f"# validation (linked documents): LinkLearn MAP {results['val']['map']:.3f}, "
        f"BM25 {results['val']['map_bm25']:.3f}, {results['epochs']} epochs, {results['fit_seconds']:.0f} s; "
        f"untrained starts: {start_validation(cfg)}"
    )
    return LinkLearnModule.load_from_checkpoint(results["best_checkpoint"])


def start_validation(cfg) -> str:
    """Validation MAP of the two untrained starts (``model.init``) on the same task."""
    datamodule = instantiate(cfg.data)
    trainer = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    scores = []
    for init in ("tfidf", "ones"):
        torch.manual_seed(0)
        scores.append(trainer.validate(LinkLearnModule(init=init), datamodule=datamodule, verbose=False)[0]["val/map"])
    return f"tf-idf {scores[0]:.3f}, f = 1 {scores[1]:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dump", type=Path)
    parser.add_argument("--collection", type=Path, action="append", default=[])
    parser.add_argument("--articles", type=int, default=2000)
    parser.add_argument("overrides", nargs="*", help="train.py overrides, e.g. model.optimizer.lr=0.1")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        dump = args.dump or write_synthetic_dump(
            work / "wiki.xml.bz2", n_articles=args.articles, n_topics=args.articles // 20, seed=1
        )
        collections = {str(c): c for c in args.collection}
        if not collections:
            collections = {
                name: write_synthetic_collection(work / f"c{i}", n_docs=600, n_topics=30, n_queries=30, seed=5, **opts)
                for i, (name, opts) in enumerate(SYNTHETIC.items())
            }
        print(f"# {machine()}")
        model = trained_model(dump, work, args.overrides)
        torch.manual_seed(0)
        starts = {"its start (tf-idf, untrained)": LinkLearnModule(init="tfidf"), "f = 1": LinkLearnModule(init="ones")}
        print("| collection | model | MAP | P@10 | R-prec | nDCG@10 |")
        print("|---|---|---:|---:|---:|---:|")
        for name, path in collections.items():
            collection = read_collection(path)
            runs = {
                "LinkLearn": model.score_collection(collection.documents, collection.queries),
                **{label: m.score_collection(collection.documents, collection.queries) for label, m in starts.items()},
                "BM25": bm25_scores(collection.documents, collection.queries, k1=1.2, b=0.75),
            }
            for label, scores in runs.items():
                m = evaluate(scores, collection.labels)
                print(
                    f"| {name} | {label} | {m['map']:.3f} | {m['p@10']:.3f} | {m['r_precision']:.3f} | "
                    f"{m['ndcg@10']:.3f} |"
                )


if __name__ == "__main__":
    main()
