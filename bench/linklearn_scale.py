"""LinkLearn at the paper's scale: parse, cache, index and one training epoch of a large synthetic dump.

    python bench/linklearn_scale.py --articles 150000      # the paper's size (minutes on 2 cores)
    python bench/linklearn_scale.py --articles 5000        # a quick look

Prints, for a synthetic dump of N articles (``datamodules.synthetic_text.write_synthetic_dump``):
the streaming parse (MB/s of XML next to a bare ``xml.etree.iterparse`` pass over the same file, the
floor any reader pays), the cached reload, building the task (split, graph, term features), one
training epoch (examples/s) and the peak resident memory of the process.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._timing import machine
from datamodules.synthetic_text import write_synthetic_dump
from datamodules.wikipedia import WikipediaDataModule
from rankers.linklearn import LinkLearnModule


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--articles", type=int, default=5000)
    parser.add_argument("--batch-size", type=int, default=256)
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


if __name__ == "__main__":
    main()
