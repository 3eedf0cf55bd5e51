"""LinkLearn's learning curve: validation (each query kind) and held-out MAP / BM25 after every epoch.

    python -m bench.linklearn_curve --dump DUMP.xml.bz2 --collection DIR [--collection DIR ...] \
        [--epochs 10] [--lr 0.001] [--regularization 1.0] [--cloze 1] [--margin 0.5] [--seed 0]
    python -m bench.linklearn_curve --dump CORPUS_FOLDER --collection DIR ... --lr 0.003 --regularization 0.1 \
        [--max-tokens 200] [--negative-sampling degree] [--val-fraction 0.2] [--max-train-links 10000] \
        [--passes 3] [--eval-epochs 0,2] [--hard-negatives 2] [--cloze 1]

``--dump`` takes any corpus ``data=linked_corpus`` reads (a dump or a linked-corpus folder). After
each evaluated epoch it prints validation MAP per query kind, each collection's MAP / BM25, their
mean, and the learned factors ``MLP1(tf)``, ``MLP2(idf)``, ``MLP3(len)`` at a few inputs.

Two ablations the module does not offer (docs/linklearn.md), applied to this run's objects only:
``--idf-input relative`` feeds the idf factor ``idf / log N`` (the corpus's largest idf) instead of
``idf``; ``--title-examples with-cloze|only`` adds, beside (or instead of) each epoch's inverse-cloze
examples, as many known-item ones: the title of a training article as the query, the article as l+,
other articles of its dump as l-.

A plain loop over the same datamodule, module, examples and loss as ``train.py model=linklearn
data=wikipedia`` (Adam, one pass of fresh examples per epoch), without the checkpoint rule: it shows
what each epoch would give on validation and on collections it never trains on, so that a training
signal can be judged on validation alone and checked on self-made held-out sets
(``bench/linklearn_heldout.py``), never on public test collections.
"""

from __future__ import annotations

import argparse
import types
from pathlib import Path

import torch

from datamodules.adhoc import read_collection
from datamodules.wikipedia import WikipediaDataModule
from rankers.linklearn.module import VALIDATION_KINDS, LinkLearnModule
from retrieval import bm25_scores, evaluate

# the held-out sets that resemble classic test collections: their mean chose the defaults (docs/linklearn.md)
CLASSIC_LIKE = ("wsp_links", "wsp_cat", "pkgman", "pymod")


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


def relative_idf_corrections(term_weight, corpus: dict[str, torch.Tensor]):
    """``TermWeight.log_corrections`` with the idf factor reading ``idf / log N`` (``--idf-input relative``)."""
    scale = corpus["idf"].max().clamp_min(1e-6)
    return (
        term_weight.tf_mlp.on_values(torch.log1p(corpus["tf_values"])),
        term_weight.idf_mlp.on_values(corpus["idf_values"] / scale),
        term_weight.len_mlp.on_values(torch.log1p(corpus["length_values"])),
    )


def add_title_examples(examples, mode: str) -> None:
    """Make ``examples.cloze_examples`` return known-item title examples ``(title row of d, d, d,
    other articles of d's dump...)`` beside its inverse-cloze ones (``with-cloze``) or instead (``only``)."""
    cloze_examples = examples.cloze_examples

    def with_titles(generator: torch.Generator) -> torch.Tensor:
        sentences = cloze_examples(generator)
        anchors = examples.cloze_anchors.repeat(examples.cloze)
        negatives = examples.uniform_negatives(anchors, examples.negatives, generator)
        title_row = VALIDATION_KINDS["title"] * examples.n_docs + anchors
        titles = torch.cat([title_row.unsqueeze(1), anchors.unsqueeze(1), anchors.unsqueeze(1), negatives], 1)
        return titles if mode == "only" else torch.cat([sentences, titles])

    examples.cloze_examples = with_titles


def factor_shapes(term_weight) -> str:
    """The learned factors at a few inputs: ``MLP1`` at tf 1, 2, 5, 20; ``MLP2`` at idf 0.5 .. 8; ``MLP3``
    at relative length 0.1 .. 3 (all 1 for the untrained start)."""
    with torch.no_grad():
        tf = term_weight.tf_mlp.on_values(torch.log1p(torch.tensor([1.0, 2, 5, 20]))).exp()
        idf = term_weight.idf_mlp.on_values(torch.tensor([0.5, 1, 2, 4, 6, 8])).exp()
        length = term_weight.len_mlp.on_values(torch.log1p(torch.tensor([0.1, 0.3, 1, 3]))).exp()
    show = " ".join
    return (
        f"MLP1(tf 1,2,5,20) {show(f'{v:.2f}' for v in tf)}; MLP2(idf .5,1,2,4,6,8) {show(f'{v:.2f}' for v in idf)}; "
        f"MLP3(len .1,.3,1,3) {show(f'{v:.2f}' for v in length)}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dump", action="append", default=[])
    # several paths after one flag too, so that the docs' `--collection DIR/{a,b}` (shell braces) runs
    parser.add_argument("--collection", type=Path, action="extend", nargs="+", default=[])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--regularization", type=float, default=1.0)
    parser.add_argument("--margin", type=float, default=0.5)
    parser.add_argument("--cloze", type=int, default=0)
    parser.add_argument("--query-kinds", default="document,title,lead")
    parser.add_argument("--negatives", type=int, default=4)
    parser.add_argument("--hard-negatives", type=int, default=0, help="data.hard_negatives (of --negatives)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=None, help="data.max_tokens")
    parser.add_argument("--negative-sampling", default="uniform", help="data.negative_sampling")
    parser.add_argument("--val-fraction", type=float, default=0.5, help="data.val_fraction")
    parser.add_argument("--max-train-links", type=int, default=None, help="data.max_train_links")
    parser.add_argument("--passes", type=int, default=1, help="passes over the training anchors per epoch")
    parser.add_argument("--eval-epochs", default="", help="evaluate only after these epochs, e.g. 0,2")
    parser.add_argument("--cache-dir", default=None, help="parse cache (data.cache_dir)")
    parser.add_argument("--no-links", action="store_true", help="inverse-cloze examples only (an ablation)")
    parser.add_argument("--freeze", default="", help="factors kept at 1, e.g. idf or tf,len")
    parser.add_argument("--idf-input", choices=["raw", "relative"], default="raw", help="relative: idf / log N")
    parser.add_argument(
        "--title-examples", choices=["off", "with-cloze", "only"], default="off", help="needs --cloze N > 0"
    )
    args = parser.parse_args(argv)
    if args.title_examples != "off" and not args.cloze:
        parser.error("--title-examples needs --cloze N > 0 (N title examples per article and epoch)")
    torch.manual_seed(args.seed)
    datamodule = WikipediaDataModule(
        args.dump,
        cache_dir=args.cache_dir,
        cloze=args.cloze,
        query_kinds=args.query_kinds.split(","),
        negatives=args.negatives,
        hard_negatives=args.hard_negatives,
        data_seed=args.seed,
        max_tokens=args.max_tokens,
        negative_sampling=args.negative_sampling,
        val_fraction=args.val_fraction,
        max_train_links=args.max_train_links,
    )
    datamodule.setup()
    model = LinkLearnModule(**datamodule.model_inputs(), margin=args.margin, regularization=args.regularization)
    if args.idf_input == "relative":
        model.term_weight.log_corrections = types.MethodType(relative_idf_corrections, model.term_weight)
    for factor in filter(None, args.freeze.split(",")):
        getattr(model.term_weight, f"{factor}_mlp").requires_grad_(False)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    collections = [read_collection(c) for c in args.collection]
    bm25 = [evaluate(bm25_scores(c.documents, c.queries, k1=1.2, b=0.75), c.labels)["map"] for c in collections]
    examples = datamodule.train_dataloader()
    if args.no_links:
        examples.anchors = examples.anchors[:0]
    if args.title_examples != "off":
        add_title_examples(examples, args.title_examples)
    names = [c.name for c in args.collection]
    stats = datamodule.statistics
    print(
        f"# {stats['train_links']} training links, {stats['train_anchors']} link anchors, "
        f"{len(examples.cloze_anchors)} cloze anchors"
    )
    classic = [i for i, name in enumerate(names) if name in CLASSIC_LIKE]
    head = " | ".join(names) + " | mean |" + (" classic-like mean |" if classic else "")
    print("| epoch | " + " | ".join(f"val {k}" for k in VALIDATION_KINDS) + " | " + head)
    print("|---" * (len(VALIDATION_KINDS) + len(names) + 2 + bool(classic)) + "|")
    for epoch in range(args.epochs + 1):
        for _ in range(args.passes if epoch else 0):
            for batch in examples:
                loss, _ = model.example_loss(batch)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        if args.eval_epochs and str(epoch) not in args.eval_epochs.split(","):
            continue
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
            + f" | {mean:.4f} |"
            + (f" {sum(ratios[i] for i in classic) / len(classic):.4f} |" if classic else ""),
            flush=True,
        )
        print(f"# factors after epoch {epoch}: {factor_shapes(model.term_weight)}", flush=True)


if __name__ == "__main__":
    main()
