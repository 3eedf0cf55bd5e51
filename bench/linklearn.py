"""LinkLearn speed: training triples/s and indexing documents/s, distinct-value trick vs per-entry f.

    python -m bench.linklearn                 # CPU, and CUDA when present
    python -m bench.linklearn --articles 5000 --device cuda

Ours evaluates each of the three MLPs once per distinct tf / idf / length value of the corpus and
gathers by precomputed codes (``rankers.linklearn.entry_weights``); the reference evaluates f for every (document, term)
entry, the straightforward implementation the paper's trick avoids. Same data, same batches, same
optimizer step. Also prints the Wikipedia reader's throughput (MB/s of wikitext) on the real dump
fragment in ../shared/data/wikipedia when present, next to mwparserfromhell's ``strip_code``.
"""

from __future__ import annotations

import argparse
import bz2
import re
import tempfile
import time
from pathlib import Path

import torch
from torch import Tensor

from bench.timing import machine, sync
from datamodules.synthetic_text import write_synthetic_dump
from datamodules.wikipedia import MarkupStripper, WikipediaDataModule
from rankers.linklearn.module import LinkLearnModule, weight_matrix
from retrieval.sparse import entry_index, inverted_index, rank
from retrieval.terms import tokenize

REAL_DUMP = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2"
)


class PerEntryLinkLearn(LinkLearnModule):
    """The reference: every MLP runs on every (document, term) entry of the batch."""

    def weighted_entries(self, rows: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        corpus = self._attach()
        owner, index = entry_index(corpus["offsets"], rows)
        term = corpus["term_ids"][index]
        tf, idf, length = corpus["tfs"][index], corpus["idf"][term], corpus["lengths"][rows][owner]
        weight = self.term_weight
        start = weight.start(tf, idf, length)
        log_correction = [
            mlp.on_values(x)
            for mlp, x in (
                (weight.tf_mlp, torch.log1p(tf)),
                (weight.idf_mlp, idf),
                (weight.len_mlp, torch.log1p(length)),
            )
        ]
        return owner, term, start * torch.exp(sum(log_correction)), start


def attach(model: LinkLearnModule, device: torch.device) -> None:
    model.to(device)
    model._attach()


def training_rate(model: LinkLearnModule, batches: list[Tensor], device: torch.device) -> float:
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for batch in batches[:3]:  # warm-up
        model.example_loss(batch)[0].backward()
    sync(device)
    start = time.perf_counter()
    for batch in batches:
        optimizer.zero_grad()
        model.example_loss(batch)[0].backward()
        optimizer.step()
    sync(device)
    return sum(len(b) for b in batches) / (time.perf_counter() - start)


def indexing_rate(model: LinkLearnModule, n_docs: int, device: torch.device) -> float:
    docs = torch.arange(n_docs, device=device)
    corpus, size = model._attach(), model.vocabulary_size
    weight_matrix(model.term_weight, corpus, docs[:100], size)
    sync(device)
    start = time.perf_counter()
    for chunk in docs.split(1000):
        with torch.no_grad():
            weight_matrix(model.term_weight, corpus, chunk, size)
    sync(device)
    return n_docs / (time.perf_counter() - start)


def ranking_rates(model: LinkLearnModule, n_docs: int, device: torch.device) -> tuple[float, float]:
    """Queries/s ranking every document: CSR postings product vs a dense ``[V, Q]`` query matrix."""
    corpus, size = model._attach(), model.vocabulary_size
    with torch.no_grad():
        documents = weight_matrix(model.term_weight, corpus, torch.arange(n_docs, device=device), size)
        queries = weight_matrix(model.term_weight, corpus, torch.arange(64, device=device), size)
    index = inverted_index(documents)
    rank(index, queries)
    rates = []
    for fn in (lambda: rank(index, queries), lambda: torch.sparse.mm(documents, queries.to_dense().T).T):
        sync(device)
        start = time.perf_counter()
        for _ in range(5):
            fn()
        sync(device)
        rates.append(5 * 64 / (time.perf_counter() - start))
    return rates[0], rates[1]


def reader_rates() -> str:
    if not REAL_DUMP.exists():
        return "(../shared/data/wikipedia not present: reader throughput skipped)"
    import mwparserfromhell

    with bz2.open(REAL_DUMP, "rt") as handle:
        texts = [t.split("</text>")[0] for t in re.split(r"<text[^>]*>", handle.read())[1:]]
    megabytes = sum(len(t) for t in texts) / 1e6
    stripper = MarkupStripper({"Category", "File", "Image", "Template"})
    start = time.perf_counter()
    for text in texts:
        tokenize(stripper.strip(text))
        stripper.links(text)
    ours = megabytes / (time.perf_counter() - start)
    start = time.perf_counter()
    for text in texts:
        tokenize(mwparserfromhell.parse(text).strip_code())
    theirs = megabytes / (time.perf_counter() - start)
    return (
        f"wikitext stripping + tokenizing on the real fragment ({megabytes:.1f} MB): ours {ours:.1f} MB/s, "
        f"mwparserfromhell {theirs:.1f} MB/s ({ours / theirs:.1f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    parser.add_argument("--articles", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=60)
    args = parser.parse_args()
    devices = [torch.device("cpu")] if args.device in ("cpu", "all") else []
    if args.device in ("cuda", "all") and torch.cuda.is_available():
        devices.append(torch.device("cuda"))
    with tempfile.TemporaryDirectory() as folder:
        dump = write_synthetic_dump(Path(folder) / "wiki.xml", n_articles=args.articles, n_topics=args.articles // 20)
        datamodule = WikipediaDataModule(str(dump), batch_size=args.batch_size)
        datamodule.setup()
    batches = list(datamodule.train_dataloader())[: args.batches]
    n_docs = datamodule.task.n_docs
    print(f"# {machine()}")
    print(f"# synthetic dump: {n_docs} articles, {len(datamodule.task.features.term_ids)} (row, term) entries")
    print("| device | task | ours per s | per-entry f per s | speed-up |")
    print("|---|---|---:|---:|---:|")
    for device in devices:
        rates = {}
        for name, module in (("ours", LinkLearnModule), ("reference", PerEntryLinkLearn)):
            torch.manual_seed(0)
            model = module(task=datamodule.task, hidden=8)
            attach(model, device)
            on_device = [b.to(device) for b in batches]
            rates[name] = (training_rate(model, on_device, device), indexing_rate(model, n_docs, device))
        for i, task in enumerate(("training triples", "indexed documents")):
            ours, reference = rates["ours"][i], rates["reference"][i]
            print(f"| {device.type} | {task} | {ours:,.0f} | {reference:,.0f} | {ours / reference:.2f}x |")
        ours, dense = ranking_rates(model, n_docs, device)
        print(
            f"| {device.type} | ranked queries (reference: dense [V, Q] queries) | {ours:,.0f} | {dense:,.0f} | "
            f"{ours / dense:.2f}x |"
        )
    print(reader_rates())


if __name__ == "__main__":
    main()
