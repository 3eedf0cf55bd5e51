"""LinkLearn at the paper's scale: parse, cache, index and one training epoch of a large synthetic dump.

    python -m bench.linklearn_scale --articles 150000      # the paper's size (minutes on 2 cores)
    python -m bench.linklearn_scale --articles 5000        # a quick look
    python -m bench.linklearn_scale --articles 20000 --fit # + train.py's own fit (validation included)

Prints, for a synthetic dump of N articles (``datamodules.synthetic_text.write_synthetic_dump``):
the streaming parse (MB/s of XML next to a bare ``xml.etree.iterparse`` pass over the same file, the
floor any reader pays), the cached reload, building the task (split, graph, term features), one
training epoch (examples/s) and the peak resident memory of the process. ``--fit`` then runs what
``python train.py model=linklearn data=wikipedia data.path=DUMP model.epochs=1`` runs (the pipeline,
from the cache just written): the start validated as epoch 0, one training epoch, its validation
(three query kinds, LinkLearn, its start and BM25), checkpoints and logs; it prints that fit's seconds.
"""

from __future__ import annotations

import argparse
import gc
import resource
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import torch

from bench.timing import machine
from datamodules.synthetic_text import write_synthetic_dump
from datamodules.wikipedia import WikipediaDataModule
from rankers.linklearn.module import LinkLearnModule


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--articles", type=int, default=5000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--fit", action="store_true", help="also time the pipeline's fit of one epoch")
    args = parser.parse_args()
    print(f"# {machine()}")
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        start = time.perf_counter()
        dump = write_synthetic_dump(work / "wiki.xml", n_articles=args.articles, n_topics=max(args.articles // 50, 1))
        megabytes = dump.stat().st_size / 1e6
        print(
            f"dump: {args.articles:,} articles, {megabytes:.0f} MB of XML, "
            f"written in {time.perf_counter() - start:.0f} s"
        )
        start = time.perf_counter()
        for _, element in ET.iterparse(dump):
            element.clear()
        floor = time.perf_counter() - start
        timings = {}
        for attempt in ("parse", "cached"):
            start = time.perf_counter()
            datamodule = WikipediaDataModule(str(dump), cache_dir=str(work / "cache"), batch_size=args.batch_size)
            datamodule.setup()
            timings[attempt] = time.perf_counter() - start
        print(
            f"parse + task: {timings['parse']:.0f} s ({megabytes / timings['parse']:.1f} MB/s; bare iterparse "
            f"{megabytes / floor:.1f} MB/s, ratio {floor / timings['parse']:.2f}); from the cache: "
            f"{timings['cached']:.1f} s; peak memory so far {peak_mb():,.0f} MB"
        )
        model = LinkLearnModule(task=datamodule.task)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        start = time.perf_counter()
        examples = 0
        for batch in datamodule.train_dataloader():
            optimizer.zero_grad()
            model.example_loss(batch)[0].backward()
            optimizer.step()
            examples += len(batch)
        epoch = time.perf_counter() - start
        print(
            f"one epoch: {examples:,} examples in {epoch:.0f} s ({examples / epoch:,.0f} examples/s, batch "
            f"{args.batch_size}, {datamodule.negatives} negatives); peak memory {peak_mb():,.0f} MB"
        )
        if args.fit:
            del model, optimizer, datamodule  # the pipeline loads its own copy from the cache
            gc.collect()
            pipeline_fit(dump, work, args.batch_size)


def pipeline_fit(dump: Path, work: Path, batch_size: int) -> None:
    """``train.py model=linklearn ... model.epochs=1`` through the pipeline, from the parse cache."""
    from rankers.pipeline import compose_config, train

    overrides = [
        "model=linklearn",
        "data=wikipedia",
        f"data.path={dump}",
        f"data.cache_dir={work / 'cache'}",
        f"data.batch_size={batch_size}",
        "model.epochs=1",
        "test=false",
        "export=false",
        "callbacks.progress_bar.refresh_rate=0",
    ]
    results = train(compose_config(overrides, output_dir=work / "run"))
    val = results["val"]
    print(
        f"train.py fit (start validated, 1 epoch, validated): {results['fit_seconds']:.0f} s; val/map "
        f"{val.get('map', float('nan')):.4f} (start {val.get('map_start', float('nan')):.4f}, BM25 "
        f"{val.get('map_bm25', float('nan')):.4f}); peak memory {peak_mb():,.0f} MB"
    )


if __name__ == "__main__":
    main()
