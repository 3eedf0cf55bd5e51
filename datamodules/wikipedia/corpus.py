"""A dump as a hyperlinked corpus: term statistics, pseudo-queries, the link graph, and a parse cache.

One streaming pass keeps, per main-namespace article, its bag of words, two short pseudo-queries
(its title and its lead sentence, over the same vocabulary), the bags of up to ``SENTENCES`` of its
sentences (self-supervised "inverse cloze" queries) and its link targets; never its text.
Links are resolved through redirects (up to 5 hops) into an undirected graph between articles.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datamodules.wikipedia.dump import WikipediaFormatError, iter_pages
from datamodules.wikipedia.markup import MarkupStripper, normalize_title
from retrieval.terms import Corpus, CorpusBuilder, tokenize

CACHE_VERSION = 4
SENTENCE_END = re.compile(r"[.!?](?:\s|$)")
LEAD_TOKENS = 40  # a lead sentence longer than this is cut: a pseudo-query stays short
SENTENCES = 8  # sentences kept per article as inverse-cloze queries (the first ones of MIN_TOKENS or more)
MIN_TOKENS = 5  # shorter pieces are headings, list items or abbreviations' fragments, not sentences


@dataclass
class LinkedCorpus:
    """Articles as term statistics, their pseudo-queries and the undirected link graph ``edges [E, 2]`` (i < j).

    ``titles`` and ``leads`` are corpora over ``corpus.vocabulary`` with one row per article;
    ``sentences`` one row per kept sentence (at most ``LEAD_TOKENS`` tokens each, every one a
    sub-multiset of its article's tokens), ``sentence_owner [S]`` its article, ascending.
    """

    corpus: Corpus
    titles: Corpus
    leads: Corpus
    names: list[str]
    edges: np.ndarray
    statistics: dict[str, int]
    sentences: Corpus
    sentence_owner: np.ndarray


def lead_sentence(text: str) -> str:
    """The first sentence of stripped article text (at most ``LEAD_TOKENS`` tokens are used)."""
    text = text.strip()
    end = SENTENCE_END.search(text)
    return text[: end.end()] if end else text


def sentences(text: str, *, limit: int = SENTENCES, min_tokens: int = MIN_TOKENS) -> list[list[str]]:
    """Tokens of the first ``limit`` sentences of ``text`` with at least ``min_tokens`` tokens, each cut
    to ``LEAD_TOKENS``: ``[[token, ...], ...]``. Splits at ``.!?`` followed by white space, as
    ``lead_sentence``; a token never spans two sentences, so every list is part of ``tokenize(text)``."""
    out, begin = [], 0
    ends = itertools.chain((m.end() for m in SENTENCE_END.finditer(text)), [len(text)])  # lazy: stop at limit
    for end in ends:
        tokens = tokenize(text[begin:end])
        begin = end
        if len(tokens) >= min_tokens:
            out.append(tokens[:LEAD_TOKENS])
            if len(out) == limit:
                break
    return out


def parse_dump(path: str | Path, *, max_articles: int | None = None, max_tokens: int | None = None) -> LinkedCorpus:
    """Stream the dump once: tokens, title and lead sentence per article, link targets, redirects;
    then resolve the links. Counts of what was kept and skipped are in ``statistics``.
    ``max_tokens`` keeps each article's first N tokens as its text (an abstract-length document)."""
    builder, titles, leads, pieces = CorpusBuilder(), CorpusBuilder(), CorpusBuilder(), CorpusBuilder()
    titles.vocabulary = leads.vocabulary = pieces.vocabulary = builder.vocabulary  # one growing vocabulary
    owners: list[int] = []
    names: list[str] = []
    targets: list[list[str]] = []
    redirects: dict[str, str] = {}
    stripper = MarkupStripper(set())
    counts = {"pages": 0, "other_namespaces": 0, "redirects": 0, "articles": 0, "articles_beyond_max": 0}
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
        elif max_articles is not None and len(names) >= max_articles:
            counts["articles_beyond_max"] += 1
        else:
            names.append(normalize_title(item.title))
            targets.append(stripper.links(item.text))
            text = stripper.strip(item.text)
            builder.add(tokenize(text)[:max_tokens])
            titles.add(tokenize(item.title))
            leads.add(tokenize(lead_sentence(text))[:LEAD_TOKENS])
            for tokens in sentences(text):
                pieces.add(tokens)
                owners.append(len(names) - 1)
    counts["articles"] = len(names)
    if not names:
        raise WikipediaFormatError(f"{path}: no main-namespace articles")
    edges, link_counts = resolve_links(names, targets, redirects)
    counts.update(link_counts)
    if len(edges) == 0:
        raise WikipediaFormatError(f"{path}: no links between its {len(names)} articles")
    size = len(builder.vocabulary)
    counts["sentences"] = len(owners)
    return LinkedCorpus(
        builder.build(),
        titles.build(size),
        leads.build(size),
        names,
        edges,
        counts,
        pieces.build(size),
        np.asarray(owners, dtype=np.int64),
    )


def resolve_links(
    titles: list[str], targets: list[list[str]], redirects: dict[str, str]
) -> tuple[np.ndarray, dict[str, int]]:
    """Undirected edges ``[E, 2]`` (i < j, sorted) between articles, following redirect chains (up to 5 hops)."""
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


__all__ = ["LinkedCorpus", "lead_sentence", "parse_dump", "resolve_links", "sentences"]
