"""Reading a linked-corpus folder: seconds for thousands of text files, against the floor of reading + tokenizing.

    python -m bench.linklearn_read                                   # 5,000 synthetic Wikispeedia-layout files
    python -m bench.linklearn_read --folder ../shared/data/wikispeedia
    python -m bench.linklearn_read --articles 5000 --tokens 3000

Times ``datamodules.wikipedia.read_linked_folder`` (decode, cut the boilerplate, tokenize, count terms,
titles, lead sentences and sentences, read and resolve the link list) next to the floor any reader
pays: reading every file's bytes, decoding them and running the tokenizer over them, in the same run.
Prints wall and CPU seconds, MB/s and the ratio to the floor, and the machine's load.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import numpy as np

from bench.timing import machine
from datamodules.synthetic_text import COMMON_WORDS
from datamodules.wikipedia.folder import read_linked_folder
from retrieval.terms import tokenize

HEADER = "   #copyright\n\n{title}\n\n2007 Schools Wikipedia Selection. Related subjects: Synthetic\n\n"
FOOTER = '\n   Retrieved from " http://en.wikipedia.org/wiki/{name}"\n   Licence text.\n'


def write_folder(folder: Path, n_articles: int, tokens: int, links: int, seed: int = 0) -> Path:
    """A Wikispeedia-layout folder of ``n_articles`` texts of about ``tokens`` tokens and ``links`` links each."""
    rng = np.random.default_rng(seed)
    vocabulary = np.array(COMMON_WORDS + [f"w{i}" for i in range(20000)])
    zipf = 1.0 / np.arange(1, len(vocabulary) + 1)
    zipf /= zipf.sum()
    names = [f"Article_{i}_é" for i in range(n_articles)]
    texts = folder / "plaintext_articles"
    texts.mkdir(parents=True)
    for name in names:
        words = vocabulary[rng.choice(len(vocabulary), tokens, p=zipf)]
        lines = [" ".join(words[j : j + 12]) for j in range(0, tokens, 12)]
        body = "".join(f"   {line}.\n" + ("\n" if k % 6 == 5 else "") for k, line in enumerate(lines))
        text = HEADER.format(title=name.replace("_", " ")) + body + FOOTER.format(name=name)
        (texts / f"{quote(name)}.txt").write_text(text)
    (folder / "articles.tsv").write_text("# names\n\n" + "".join(quote(n) + "\n" for n in names))
    targets = rng.integers(0, n_articles, (n_articles, links))
    rows = [f"{quote(names[i])}\t{quote(names[j])}\n" for i in range(n_articles) for j in targets[i]]
    (folder / "links.tsv").write_text("# links\n\n" + "".join(rows))
    return folder


def floor(folder: Path) -> tuple[float, float]:
    """Wall and CPU seconds to read, decode and tokenize every text file: what no reader of this folder avoids."""
    start, used = time.perf_counter(), cpu()
    for path in sorted((folder / "plaintext_articles").glob("*.txt")):
        tokenize(path.read_bytes().decode("utf-8"))
    return time.perf_counter() - start, cpu() - used


def cpu() -> float:
    times = os.times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", type=Path, default=None, help="a linked-corpus folder to read instead")
    parser.add_argument("--articles", type=int, default=5000)
    parser.add_argument("--tokens", type=int, default=3000, help="tokens per synthetic article (Wikispeedia: 3,242)")
    parser.add_argument("--links", type=int, default=26)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    print(f"# {machine()}; load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as work:
        folder = args.folder or write_folder(Path(work) / "corpus", args.articles, args.tokens, args.links)
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6
        floor_seconds, floor_cpu = floor(folder)
        wall, used = time.perf_counter(), cpu()
        linked = read_linked_folder(folder)
        wall, used = time.perf_counter() - wall, cpu() - used
        stats = linked.statistics
        print(
            "| folder | articles | links | MB | read_linked_folder s (CPU s) | MB/s | floor s (CPU s) "
            "| x floor (CPU) |\n"
            f"|---|---:|---:|---:|---:|---:|---:|---:|\n"
            f"| {args.folder or 'synthetic'} | {stats['articles']:,} | {stats['links']:,} | {size:.0f} | "
            f"{wall:.1f} ({used:.1f}) | {size / wall:.1f} | {floor_seconds:.1f} ({floor_cpu:.1f}) | "
            f"{used / floor_cpu:.2f} |"
        )


if __name__ == "__main__":
    main()
