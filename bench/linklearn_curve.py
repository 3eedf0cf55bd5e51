"""LinkLearn's learning curve: validation (each query kind) and held-out MAP / BM25 after every epoch.

    python bench/linklearn_curve.py --dump DUMP.xml.bz2 --collection DIR [--collection DIR ...] \
        [--epochs 10] [--lr 0.001] [--regularization 1.0] [--cloze 1] [--margin 0.5] [--seed 0]

A plain loop over the same datamodule, module, examples and loss as ``train.py model=linklearn
data=wikipedia`` (Adam, one pass of fresh examples per epoch), without the checkpoint rule: it shows
what each epoch would give on validation and on collections it never trains on, so that a training
signal can be judged on validation alone and checked on self-made held-out sets
(``bench/linklearn_heldout.py``), never on public test collections.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datamodules.adhoc import read_collection
from datamodules.wikipedia import WikipediaDataModule
from rankers.linklearn import VALIDATION_KINDS, LinkLearnModule
from retrieval import bm25_scores, evaluate


def validation_maps(model: LinkLearnModule, *, corrected: bool = True) -> dict[str, float]:
    """Validation MAP per query kind of the model (or of its start)."""
    queries = model.task.val_queries
    out = {}
    with torch.no_grad():
        for name, kind in VALIDATION_KINDS.items():
            scored = "linklearn" if corrected else "start"
            ap = torch.cat(
                [
                    model._average_precision(model._validation_scores(chunk, kind, model=scored), chunk, kind)
                    for chunk in queries.split(128)
                ]
            )
            out[name] = float(ap.mean())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dump", action="append", default=[])
    parser.add_argument("--collection", type=Path, action="append", default=[])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--regularization", type=float, default=1.0)
    parser.add_argument("--margin", type=float, default=0.5)
    parser.add_argument("--cloze", type=int, default=0)
    parser.add_argument("--query-kinds", default="document,title,lead")
    parser.add_argument("--negatives", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-links", action="store_true", help="inverse-cloze examples only (an ablation)")
    parser.add_argument("--freeze", default="", help="factors kept at 1, e.g. idf or tf,len")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    datamodule = WikipediaDataModule(
        args.dump,
        cloze=args.cloze,
        query_kinds=args.query_kinds.split(","),
        negatives=args.negatives,
        data_seed=args.seed,
    )
    datamodule.setup()
    model = LinkLearnModule(**datamodule.model_inputs(), margin=args.margin, regularization=args.regularization)
    for factor in filter(None, args.freeze.split(",")):
        getattr(model.term_weight, f"{factor}_mlp").requires_grad_(False)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    collections = [read_collection(c) for c in args.collection]
    bm25 = [evaluate(bm25_scores(c.documents, c.queries, k1=1.2, b=0.75), c.labels)["map"] for c in collections]
    examples = datamodule.train_dataloader()
    if args.no_links:
        examples.anchors = examples.anchors[:0]
    names = [c.name for c in args.collection]
    print(f"# {datamodule.statistics['train_anchors']} link anchors, {len(examples.cloze_anchors)} cloze anchors")
    print("| epoch | " + " | ".join(f"val {k}" for k in VALIDATION_KINDS) + " | " + " | ".join(names) + " | mean |")
    print("|---" * (len(VALIDATION_KINDS) + len(names) + 2) + "|")
    for epoch in range(args.epochs + 1):
        if epoch:
            for batch in examples:
                loss, _ = model.example_loss(batch)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        val = validation_maps(model)
        ratios = [
            evaluate(model.score_collection(c.documents, c.queries), c.labels)["map"] / base
            for c, base in zip(collections, bm25)
        ]
        mean = sum(ratios) / max(len(ratios), 1)
        print(
            f"| {epoch} | "
            + " | ".join(f"{v:.4f}" for v in val.values())
            + " | "
            + " | ".join(f"{r:.4f}" for r in ratios)
            + f" | {mean:.4f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
