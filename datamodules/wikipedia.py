"""Wikipedia as a hyperlinked training corpus for LinkLearn (Grangier & Bengio, section 4).

    python train.py model=linklearn data=wikipedia data.path=enwiki-pages-articles.xml.bz2

Streams a MediaWiki XML dump (plain or ``.bz2``) with bounded memory: main-namespace articles only,
redirects resolved, markup stripped, text tokenized into term counts (the text is never kept).
The link graph L(d) holds the articles linking to d or linked from d. Articles are split by seed
into training and validation sets and links crossing the split are removed (section 4). Each epoch
samples fresh (d, l+, l-) triples with l+ in L(d) and l- not in L(d). The parsed corpus is cached.

Markup is stripped with regular expressions rather than mwparserfromhell, which is an order of
magnitude slower on the real dump fragment in ../shared/data/wikipedia (``bench/linklearn.py``
prints both throughputs; docs/benchmarks.md); the expressions remove what the issue lists
(templates, references, tables, files, categories, interlanguage links, comments, HTML tags,
emphasis).
"""

from __future__ import annotations

import bz2
import hashlib
import html
import json
import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from datamodules.text import (
    TOKENIZER,
    Corpus,
    CorpusBuilder,
    entry_index,
    load_corpus,
    save_corpus,
    synthetic_words,
    tokenize,
)

log = logging.getLogger(__name__)

CACHE_VERSION = 1
# namespaces a [[Prefix:...]] link may point to besides the ones the dump's siteinfo declares
NAMESPACE_ALIASES = {"image", "wp", "wt", "project", "cat", "w", "wiktionary", "wikt", "commons", "meta", "s", "q", "n"}
INTERLANGUAGE = re.compile(r"^[a-z]{2,3}(?:-[a-z]+)*$")

COMMENT = re.compile(r"<!--.*?-->", re.S)
# tags whose content is not prose: formulas, galleries of file names, code, charts
BLOCK = re.compile(
    r"<(math|gallery|timeline|chem|score|syntaxhighlight|source|graph|mapframe|imagemap)\b[^>]*>.*?</\1\s*>",
    re.S | re.I,
)
REF = re.compile(r"<ref[^>/]*/>|<ref[^>]*>.*?</ref>", re.S | re.I)
TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
TABLE = re.compile(r"\{\|(?:(?!\{\|).)*?\|\}", re.S)
LINK = re.compile(r"\[\[([^\[\]|]*)(?:\|([^\[\]]*))?\]\]")
EXTERNAL = re.compile(r"\[(?:https?|ftp)://[^\s\]]+\s*([^\]]*)\]")
TAG = re.compile(r"<[^>]+>")
EMPHASIS = re.compile(r"'{2,}")
HEADING = re.compile(r"^=+\s*(.*?)\s*=+\s*$", re.M)


class WikipediaFormatError(ValueError):
    """A dump that cannot be used; the message names the file (and line where known)."""


@dataclass
class Page:
    title: str
    namespace: int
    redirect: str | None
    text: str


def normalize_title(title: str) -> str:
    """MediaWiki's canonical title: ``_`` as space, collapsed spaces, no ``#section``, first letter upper."""
    title = title.split("#", 1)[0].replace("_", " ")
    title = " ".join(title.split())
    return title[:1].upper() + title[1:]


def _remove_nested(pattern: re.Pattern, text: str, replace=" ") -> str:
    """Replace innermost matches until none is left (templates, tables and links nest)."""
    while True:
        text, count = pattern.subn(replace, text)
        if not count:
            return text


class MarkupStripper:
    """Wikitext -> (plain text, article link targets), knowing the dump's namespace names."""

    def __init__(self, namespaces: set[str]) -> None:
        self.namespaces = {name.lower() for name in namespaces} | NAMESPACE_ALIASES

    def is_article_link(self, target: str) -> bool:
        if not target.strip() or target.startswith(":"):
            return False
        if ":" in target:
            prefix = target.split(":", 1)[0].strip().lower()
            if prefix in self.namespaces or INTERLANGUAGE.match(prefix):
                return False
        return True

    def links(self, text: str) -> list[str]:
        """Article link targets of raw wikitext (comments removed first), normalized."""
        text = COMMENT.sub(" ", text)
        return [normalize_title(m.group(1)) for m in LINK.finditer(text) if self.is_article_link(m.group(1))]

    def strip(self, text: str) -> str:
        text = html.unescape(COMMENT.sub(" ", text))  # &nbsp; and friends are not words
        text = BLOCK.sub(" ", text)
        text = REF.sub(" ", text)
        text = _remove_nested(TEMPLATE, text)
        text = _remove_nested(TABLE, text)

        def replace_link(match: re.Match) -> str:
            target, label = match.group(1), match.group(2)
            if not self.is_article_link(target):
                return " "  # files, categories, interlanguage links
            return label if label is not None else target

        # innermost first: [[File:x.jpg|a [[link]] in a caption]] loses the caption with the file
        text = _remove_nested(LINK, text, replace_link)
        text = EXTERNAL.sub(r" \1 ", text)
        text = TAG.sub(" ", text)
        text = EMPHASIS.sub("", text)
        return HEADING.sub(r"\1", text)


def _open(path: Path):
    return bz2.open(path, "rb") if path.suffix == ".bz2" else open(path, "rb")


def iter_pages(path: str | Path) -> Iterator[Page | set[str]]:
    """Yield the namespace names (once, from ``siteinfo``) and then every ``Page``, streaming."""
    path = Path(path)
    if not path.exists():
        raise WikipediaFormatError(f"{path}: no such file")
    try:
        with _open(path) as handle:
            events = ET.iterparse(handle, events=("start", "end"))
            _, root = next(events)
            if _local(root.tag) != "mediawiki":
                raise WikipediaFormatError(f"{path}: not a MediaWiki XML dump (root element <{_local(root.tag)}>)")
            namespaces: set[str] = set()
            for event, element in events:
                if event != "end":
                    continue
                tag = _local(element.tag)
                if tag == "namespace" and element.text:
                    namespaces.add(element.text)
                elif tag == "siteinfo":
                    yield namespaces
                elif tag == "page":
                    yield _page(element)
                    root.clear()  # bounded memory: drop the finished page
    except ET.ParseError as error:
        line = error.position[0] if error.position else "?"
        raise WikipediaFormatError(f"{path}:{line}: truncated or malformed XML ({error})") from None
    except (EOFError, OSError) as error:
        raise WikipediaFormatError(f"{path}: truncated or unreadable ({error})") from None
    except StopIteration:
        raise WikipediaFormatError(f"{path}: empty file") from None


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _page(element: ET.Element) -> Page:
    fields = {_local(child.tag): child for child in element.iter()}
    redirect = fields.get("redirect")
    text = fields.get("text")
    namespace = fields.get("ns")
    return Page(
        title=(fields["title"].text or "") if "title" in fields else "",
        namespace=int(namespace.text) if namespace is not None and namespace.text else 0,
        redirect=redirect.get("title") if redirect is not None else None,
        text=(text.text or "") if text is not None else "",
    )


@dataclass
class LinkedCorpus:
    """Articles as term statistics plus the undirected link graph ``edges [E, 2]`` (i < j)."""

    corpus: Corpus
    titles: list[str]
    edges: np.ndarray
    statistics: dict[str, int]


def parse_dump(path: str | Path, *, max_articles: int | None = None) -> LinkedCorpus:
    """Stream the dump once: tokens per article, link targets, redirects; then resolve the links."""
    builder = CorpusBuilder()
    titles: list[str] = []
    targets: list[list[str]] = []
    redirects: dict[str, str] = {}
    stripper = MarkupStripper(set())
    counts = {"pages": 0, "other_namespaces": 0, "redirects": 0, "articles": 0}
    for item in iter_pages(path):
        if isinstance(item, set):
            stripper = MarkupStripper(item)
            continue
        counts["pages"] += 1
        if item.namespace != 0:
            counts["other_namespaces"] += 1
        elif item.redirect is not None:
            redirects[normalize_title(item.title)] = normalize_title(item.redirect)
            counts["redirects"] += 1
        elif max_articles is None or len(titles) < max_articles:
            titles.append(normalize_title(item.title))
            targets.append(stripper.links(item.text))
            builder.add(tokenize(stripper.strip(item.text)))
    counts["articles"] = len(titles)
    if not titles:
        raise WikipediaFormatError(f"{path}: no main-namespace articles")
    edges, link_counts = resolve_links(titles, targets, redirects)
    counts.update(link_counts)
    if len(edges) == 0:
        raise WikipediaFormatError(f"{path}: no links between its {len(titles)} articles")
    return LinkedCorpus(builder.build(), titles, edges, counts)


def resolve_links(
    titles: list[str], targets: list[list[str]], redirects: dict[str, str]
) -> tuple[np.ndarray, dict[str, int]]:
    """Undirected edges between articles, following redirect chains (up to 5 hops)."""
    index = {title: i for i, title in enumerate(titles)}
    pairs = set()
    counts = {"links": 0, "links_via_redirect": 0, "links_outside_corpus": 0, "self_links": 0}
    for source, links in enumerate(targets):
        for target in links:
            counts["links"] += 1
            hops = 0
            while target in redirects and target not in index and hops < 5:
                target, hops = redirects[target], hops + 1
            destination = index.get(target)
            if destination is None:
                counts["links_outside_corpus"] += 1
            elif destination == source:
                counts["self_links"] += 1
            else:
                counts["links_via_redirect"] += hops > 0
                pairs.add((min(source, destination), max(source, destination)))
    edges = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)
    counts["edges"] = len(edges)
    return edges, counts


def load_or_parse(path: str | Path, cache_dir: str | Path | None, *, max_articles: int | None = None) -> LinkedCorpus:
    """``parse_dump`` with a cache keyed by the file's path, size, mtime and the parse options."""
    path = Path(path)
    if cache_dir is None:
        return parse_dump(path, max_articles=max_articles)
    if not path.exists():
        raise WikipediaFormatError(f"{path}: no such file")
    stat = path.stat()
    key = json.dumps([str(path.resolve()), stat.st_size, stat.st_mtime_ns, max_articles, CACHE_VERSION, TOKENIZER])
    cached = Path(cache_dir) / f"{path.name}.{hashlib.sha1(key.encode()).hexdigest()[:16]}.npz"
    if cached.exists():
        corpus, extra = load_corpus(cached)
        return LinkedCorpus(corpus, list(extra["titles"]), extra["edges"], json.loads(str(extra["statistics"])))
    linked = parse_dump(path, max_articles=max_articles)
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(".partial.npz")
    save_corpus(
        partial,
        linked.corpus,
        titles=np.asarray(linked.titles, dtype=object),
        edges=linked.edges,
        statistics=np.asarray(json.dumps(linked.statistics)),
    )
    partial.rename(cached)  # atomic: a killed run leaves no half-written cache
    return linked


def split_graph(n_docs: int, edges: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded train/validation assignment ``is_val [D]`` and the edges kept (both ends on one side)."""
    is_val = np.zeros(n_docs, dtype=bool)
    n_val = round(val_fraction * n_docs)
    is_val[np.random.default_rng(seed).permutation(n_docs)[:n_val]] = True
    kept = edges[is_val[edges[:, 0]] == is_val[edges[:, 1]]]
    return is_val, kept


def adjacency(n_docs: int, edges: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR neighbour lists of the undirected graph: ``offsets [D + 1]``, ``neighbours`` (sorted per doc)."""
    both = np.concatenate([edges, edges[:, ::-1]]) if len(edges) else np.zeros((0, 2), np.int64)
    order = np.lexsort((both[:, 1], both[:, 0]))
    both = both[order]
    offsets = np.concatenate([[0], np.cumsum(np.bincount(both[:, 0], minlength=n_docs))])
    return torch.from_numpy(offsets.astype(np.int64)), torch.from_numpy(np.ascontiguousarray(both[:, 1]))


def linked_matrix(
    offsets: torch.Tensor, neighbours: torch.Tensor, queries: torch.Tensor, candidates: torch.Tensor
) -> torch.Tensor:
    """``[Q, C]`` bool: whether ``candidates[c]`` is in L(``queries[q]``), on the queries' device.

    ``offsets``/``neighbours`` are the CSR link graph (``adjacency``); no loop over queries.
    """
    column = torch.full((len(offsets) - 1,), -1, dtype=torch.long, device=queries.device)
    column[candidates] = torch.arange(len(candidates), device=queries.device)
    owner, index = entry_index(offsets, queries)
    hit = column[neighbours[index]]
    keep = hit >= 0
    out = torch.zeros(len(queries), len(candidates), dtype=torch.bool, device=queries.device)
    out[owner[keep], hit[keep]] = True
    return out


class TripleBatches:
    """Fresh (d, l+, l-) triples every time it is iterated (once per epoch), in batches ``[B, 3]``.

    One triple per anchor document with links, anchors in a new random order each epoch; l+ uniform
    over L(d); l- uniform over the other documents of the same side not in L(d) (rejection sampling).
    """

    def __init__(
        self, docs: torch.Tensor, offsets: torch.Tensor, neighbours: torch.Tensor, *, batch_size: int, seed: int
    ):
        self.docs, self.offsets, self.neighbours = docs, offsets, neighbours
        degree = (offsets[1:] - offsets[:-1])[docs]
        # a document linked to every other one has no l- to rank below its links: it cannot anchor
        self.anchors = docs[(degree > 0) & (degree < len(docs) - 1)]
        self.saturated = int((degree >= len(docs) - 1).sum())
        self.batch_size, self.seed, self.epoch = batch_size, seed, 0
        # rows ascending, neighbours sorted within a row: source * D + neighbour is sorted as a whole
        self.n_docs = len(offsets) - 1
        sources = torch.repeat_interleave(torch.arange(self.n_docs), offsets.diff())
        self.edge_keys = sources * self.n_docs + neighbours

    def __len__(self) -> int:
        return -(-len(self.anchors) // self.batch_size)

    def sample(self, generator: torch.Generator) -> torch.Tensor:
        anchors = self.anchors[torch.randperm(len(self.anchors), generator=generator)]
        start, degree = self.offsets[anchors], self.offsets[anchors + 1] - self.offsets[anchors]
        pick = (torch.rand(len(anchors), generator=generator) * degree).long()
        positives = self.neighbours[start + pick]
        negatives = self.docs[torch.randint(len(self.docs), (len(anchors),), generator=generator)]
        for _ in range(100):
            bad = (negatives == anchors) | self.linked(anchors, negatives)
            if not bad.any():
                break
            negatives[bad] = self.docs[torch.randint(len(self.docs), (int(bad.sum()),), generator=generator)]
        else:
            raise RuntimeError("could not sample negatives: every document is linked to almost every other")
        return torch.stack([anchors, positives, negatives], 1)

    def linked(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Whether ``b[i]`` is in ``L(a[i])``: one binary search of ``a * D + b`` in the edge keys."""
        if len(self.edge_keys) == 0:
            return torch.zeros(len(a), dtype=torch.bool)
        keys = a * self.n_docs + b
        position = torch.searchsorted(self.edge_keys, keys).clamp_max(len(self.edge_keys) - 1)
        return self.edge_keys[position] == keys

    def __iter__(self) -> Iterator[torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 100003 + self.epoch)
        self.epoch += 1
        yield from self.sample(generator).split(self.batch_size)


class WikipediaDataModule(pl.LightningDataModule):
    """Training triples and the validation retrieval task of Grangier & Bengio, section 4.

    Args:
        path: ``pages-articles.xml`` or ``.xml.bz2``.
        cache_dir: where the parsed corpus is cached (None: parse every time).
        max_articles: keep the first N articles (the paper used 2 x 150,000).
        val_fraction: share of articles in D_valid.
        batch_size: triples per SGD step.
        max_val_queries: validation documents used as queries (all validation documents are ranked).
        adhoc_dir: an ad-hoc collection (``docs.tsv``, ``queries.tsv``, ``qrels.txt``) to evaluate on.
        bm25_k1, bm25_b: the Okapi BM25 baseline's parameters on that collection.
    """

    has_test = False  # the held-out evaluation is the ad-hoc collection

    def __init__(
        self,
        path: str,
        *,
        cache_dir: str | None = None,
        max_articles: int | None = None,
        val_fraction: float = 0.5,
        batch_size: int = 32,
        max_val_queries: int = 500,
        adhoc_dir: str | None = None,
        bm25_k1: float = 1.2,
        bm25_b: float = 0.75,
        data_seed: int = 0,
    ) -> None:
        super().__init__()
        self.path, self.cache_dir, self.max_articles = path, cache_dir, max_articles
        self.val_fraction, self.batch_size, self.max_val_queries = val_fraction, batch_size, max_val_queries
        self.adhoc_dir, self.data_seed = adhoc_dir, data_seed
        self.bm25_k1, self.bm25_b = bm25_k1, bm25_b
        self.linked: LinkedCorpus | None = None
        self.statistics: dict[str, object] = {}

    def model_inputs(self) -> dict:
        """Nothing: the model reads the corpus from the datamodule when it attaches to a trainer."""
        return {}

    @property
    def corpus(self) -> Corpus:
        assert self.linked is not None, "call setup() first"
        return self.linked.corpus

    def setup(self, stage: str | None = None) -> None:
        if self.linked is not None:
            return
        self.linked = load_or_parse(self.path, self.cache_dir, max_articles=self.max_articles)
        n_docs = self.linked.corpus.n_docs
        self.is_val, kept = split_graph(n_docs, self.linked.edges, self.val_fraction, self.data_seed)
        self.offsets, self.neighbours = adjacency(n_docs, kept)
        degree = (self.offsets[1:] - self.offsets[:-1]).numpy()
        self.train_docs = torch.from_numpy(np.flatnonzero(~self.is_val))
        self.val_docs = torch.from_numpy(np.flatnonzero(self.is_val))
        val_with_links = self.val_docs[torch.from_numpy(degree[self.is_val] > 0)]
        generator = torch.Generator().manual_seed(self.data_seed)
        self.val_queries = (
            val_with_links[torch.randperm(len(val_with_links), generator=generator)][: self.max_val_queries]
            .sort()
            .values
        )
        self.statistics = {
            **self.linked.statistics,
            "vocabulary": len(self.linked.corpus.vocabulary),
            "train_docs": len(self.train_docs),
            "val_docs": len(self.val_docs),
            "edges_kept": len(kept),
            "edges_crossing_split_removed": len(self.linked.edges) - len(kept),
            "mean_links_train": float(degree[~self.is_val].mean()) if (~self.is_val).any() else 0.0,
            "mean_links_val": float(degree[self.is_val].mean()) if self.is_val.any() else 0.0,
            "train_docs_without_links": int((degree[~self.is_val] == 0).sum()),
            "val_queries": len(self.val_queries),
        }
        if len(self.val_queries) == 0 or not (degree[~self.is_val] > 0).any():
            raise WikipediaFormatError(
                f"{self.path}: after the split no {'validation' if len(self.val_queries) == 0 else 'training'} "
                f"article has a link; use more articles or another val_fraction ({self.statistics})"
            )
        log.info("wikipedia: %s", self.statistics)

    def train_dataloader(self) -> TripleBatches:
        return TripleBatches(
            self.train_docs, self.offsets, self.neighbours, batch_size=self.batch_size, seed=self.data_seed
        )

    def val_dataloader(self) -> DataLoader:
        # batches of query document ids; the module ranks every validation document for each
        return DataLoader(self.val_queries, batch_size=64, shuffle=False)

    def relevant(self, queries: torch.Tensor) -> torch.Tensor:
        """``[Q, D]`` bool: ``relevant[q, d]`` iff d is in L(queries[q])."""
        return linked_matrix(self.offsets, self.neighbours, queries, torch.arange(self.corpus.n_docs))


def write_synthetic_dump(
    path: str | Path, *, n_articles: int = 300, n_topics: int = 30, links_per_article: int = 5, seed: int = 0
) -> Path:
    """A small MediaWiki dump with a known link structure, for tests, benchmarks and smoke runs.

    Each article belongs to a topic: its text mixes topic words (``t{topic}w{j}``) with frequent
    common words (Zipf-distributed, like stop words), and it links mostly to articles of its topic
    (some links through a redirect, one to a missing article), so links follow content. The markup
    carries what a real dump has: templates, references, a table, a file, a category, an
    interlanguage link and a comment. Written as ``.xml.bz2`` when ``path`` ends so.
    """
    rng = np.random.default_rng(seed)
    topic_of = rng.integers(0, n_topics, n_articles)
    members = {t: np.flatnonzero(topic_of == t) for t in range(n_topics)}
    pages = []
    for i in range(n_articles):
        length = int(rng.integers(40, 300))
        words = synthetic_words(rng, length, topic=f"t{topic_of[i]}", topic_share=0.3)
        same = members[topic_of[i]]
        targets = [int(j) for j in rng.choice(same, min(links_per_article, len(same)), replace=False) if j != i]
        links = " ".join(
            f"[[Redirect to {j}|see {j}]]" if k % 3 == 2 else f"[[Article {j}]]" for k, j in enumerate(targets)
        )
        body = (
            "{{Infobox thing|name=x|nested={{small|y}}}}<!-- hidden comment -->\n"
            f"'''Article {i}''' {' '.join(words[: length // 2])}<ref name=a>cite web reference</ref> {links}\n"
            f"== Section ==\n{' '.join(words[length // 2 :])} [[Missing page {i}]]\n"
            '{| class="wikitable"\n| tablecell || tablecell\n|}\n'
            f"[[File:Picture.jpg|thumb|a caption with [[Article {same[0]}]]]] [[Category:Things]] [[fr:Chose]]"
        )
        pages.append((f"Article {i}", 0, None, body))
        if i % 3 == 0:
            pages.append((f"Redirect to {i}", 0, f"Article {i}", f"#REDIRECT [[Article {i}]]"))
    pages.append(("Talk:Article 0", 1, None, "talk page text [[Article 1]]"))
    return write_dump(path, pages)


def write_dump(path: str | Path, pages: list[tuple[str, int, str | None, str]]) -> Path:
    """Write ``(title, namespace, redirect target or None, wikitext)`` pages as a MediaWiki XML dump."""
    from xml.sax.saxutils import escape, quoteattr

    lines = [
        '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">',
        "  <siteinfo>\n    <sitename>Test</sitename>\n    <namespaces>",
        '      <namespace key="0" case="first-letter" />',
        '      <namespace key="1" case="first-letter">Talk</namespace>',
        '      <namespace key="6" case="first-letter">File</namespace>',
        '      <namespace key="14" case="first-letter">Category</namespace>',
        "    </namespaces>\n  </siteinfo>",
    ]
    for number, (title, namespace, redirect, text) in enumerate(pages, 1):
        lines.append(f"  <page>\n    <title>{escape(title)}</title>\n    <ns>{namespace}</ns>\n    <id>{number}</id>")
        if redirect is not None:
            lines.append(f"    <redirect title={quoteattr(redirect)} />")
        lines.append(f'    <revision>\n      <id>{number}</id>\n      <text xml:space="preserve">{escape(text)}</text>')
        lines.append("    </revision>\n  </page>")
    lines.append("</mediawiki>\n")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "\n".join(lines).encode()
    path.write_bytes(bz2.compress(data) if path.suffix == ".bz2" else data)
    return path
