"""Hyperlinked corpora whose links are not inline: a folder of texts and a ``source<TAB>target`` link list.

Two layouts, recognised by their files:

- **Wikispeedia** (the SNAP distribution of the 2007 Wikipedia Selection for Schools): ``articles.tsv``
  (one URL-encoded article name a line), ``links.tsv`` (``source<TAB>target``, URL-encoded names) and
  ``plaintext_articles/<URL-encoded name>.txt``. Each text opens with a ``#copyright`` line, the
  title and a "2007 Schools Wikipedia Selection. Related subjects: ..." paragraph and closes with a
  "Retrieved from ..." licence paragraph: these are cut (counted), the title line is the article's
  title, the rest its text.
- **Generic** (citation graphs, crawls): ``docs.tsv`` (``id<TAB>text``, the text is the rest of the
  line) and ``links.tsv`` (``source<TAB>target`` ids). Articles have no title.

In every ``.tsv`` a line that starts with ``#`` is a comment and blank lines are skipped; a UTF-8
byte-order mark is skipped and ``\\r\\n`` line ends are accepted in every file. Links are undirected
edges between articles (L(d) holds the articles d links to and those linking to d, as in the paper).

What cannot be used is refused with ``LinkedCorpusFormatError`` naming the file and line: bytes that
are not UTF-8, a NUL byte, a line of ``links.tsv`` without exactly two fields, a line of ``docs.tsv``
without a tab or with an empty id, an article listed twice, a name that is not valid URL-encoding.
What is skipped is counted in ``LinkedCorpus.statistics`` and logged with the first lines concerned:
links naming an unknown article, self-links and repeated links, articles whose text file is missing
or whose text is empty (their links with them), text files no article lists.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from urllib.parse import unquote

import numpy as np

from datamodules.wikipedia.corpus import LEAD_TOKENS, LinkedCorpus, sentences
from datamodules.wikipedia.dump import WikipediaFormatError
from retrieval.terms import CorpusBuilder, tokenize
from retrieval.trec import BOM, quote, text_lines

log = logging.getLogger(__name__)

WIKISPEEDIA, GENERIC = "wikispeedia", "generic"
SCHOOLS_LINE = re.compile(r"^\s*\d{4} Schools Wikipedia Selection\b")
FOOTER_LINE = re.compile(r"^\s*Retrieved from\b")
SHOWN_LINES = 5  # line numbers quoted per kind of skipped input


class LinkedCorpusFormatError(WikipediaFormatError):
    """A linked-corpus folder that cannot be read; the message names the file and line."""


def layout(folder: str | Path) -> str:
    """``"wikispeedia"`` or ``"generic"`` by the files ``folder`` holds; anything else is an error."""
    folder = Path(folder)
    if not folder.is_dir():
        raise LinkedCorpusFormatError(f"{folder}: not a folder")
    if (folder / "articles.tsv").is_file() or (folder / "plaintext_articles").is_dir():
        found = WIKISPEEDIA
        needed = ("articles.tsv", "links.tsv", "plaintext_articles")
    elif (folder / "docs.tsv").is_file():
        found, needed = GENERIC, ("docs.tsv", "links.tsv")
    else:
        raise LinkedCorpusFormatError(
            f"{folder}: neither a Wikispeedia folder (articles.tsv, links.tsv, plaintext_articles/) nor a "
            "generic linked corpus (docs.tsv with id<TAB>text lines, links.tsv with source<TAB>target lines)"
        )
    missing = [name for name in needed if not (folder / name).exists()]
    if missing:
        raise LinkedCorpusFormatError(f"{folder}: a {found} linked corpus needs {', '.join(missing)}")
    return found


class Skips:
    """Counts of skipped input by kind, with the first few places each happened, for the report."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.places: dict[str, list[str]] = {}

    def add(self, kind: str, place: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        shown = self.places.setdefault(kind, [])
        if len(shown) < SHOWN_LINES:
            shown.append(place)

    def report(self, folder: Path) -> None:
        for kind, count in self.counts.items():
            shown = "; ".join(self.places[kind])
            log.warning("%s: %d %s skipped (first: %s)", folder, count, SKIP_LABELS.get(kind, kind), shown)


def decode_text(path: Path, raw: bytes) -> str:
    """UTF-8 text of a file's bytes, BOM skipped, ``\\r\\n`` -> ``\\n``; a bad byte names file and line."""
    if raw.startswith(BOM):
        raw = raw[len(BOM) :]
    if b"\0" in raw:
        line = raw[: raw.index(b"\0")].count(b"\n") + 1
        raise LinkedCorpusFormatError(f"{path}:{line}: a NUL byte: this is a binary file, not text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as problem:
        line = raw[: problem.start].count(b"\n") + 1
        column = problem.start - (raw.rfind(b"\n", 0, problem.start) + 1) + 1
        raise LinkedCorpusFormatError(
            f"{path}:{line}: byte {raw[problem.start]:#04x} at column {column} is not UTF-8; save the file as UTF-8"
        ) from None
    return text.replace("\r\n", "\n")


def data_lines(path: Path):
    """``(line number, text)`` of the lines of a ``.tsv`` that are neither blank nor ``#`` comments."""
    for number, line in text_lines(path, LinkedCorpusFormatError):
        if line.strip() and not line.startswith("#"):
            yield number, line


def decode_name(raw: str, path: Path, number: int) -> str:
    """A URL-encoded article name decoded (``%C3%81ed%C3%A1n`` -> ``Áedán``); invalid encodings are errors.

    Example:
        >>> decode_name("%C3%81ed%C3%A1n_mac_Gabr%C3%A1in", Path("articles.tsv"), 1)
        'Áedán_mac_Gabráin'
    """
    if "%" not in raw:
        return raw
    try:
        return unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise LinkedCorpusFormatError(
            f"{path}:{number}: article name {quote(raw)} is not valid URL-encoded UTF-8"
        ) from None


def split_wikispeedia_text(text: str) -> tuple[str, str, int]:
    """``(title, body, boilerplate lines cut)`` of a Wikispeedia plain text.

    Cut: leading ``#`` lines (``#copyright``), the "Schools Wikipedia Selection. Related subjects"
    paragraph (it may wrap) and everything from the "Retrieved from" line on (the licence). The
    first non-blank line before the Selection paragraph is the title. A text without this header is
    taken whole, without title.
    """
    lines = text.split("\n")
    at = 0
    while at < len(lines) and (not lines[at].strip() or lines[at].lstrip().startswith("#")):
        at += 1
    cut, title = at, ""
    header_end = next((i for i in range(at, min(at + 6, len(lines))) if SCHOOLS_LINE.match(lines[i])), None)
    if header_end is not None:
        title = " ".join(line.strip() for line in lines[at:header_end] if line.strip())
        end = header_end
        while end < len(lines) and lines[end].strip():  # the subjects may wrap onto more lines
            end += 1
        cut, at = end, end
    footer = next((i for i in range(len(lines) - 1, at - 1, -1) if FOOTER_LINE.match(lines[i])), len(lines))
    body = "\n".join(lines[at:footer])
    return title, body, cut + len(lines) - footer


FUNCTION_WORDS = frozenset(
    [
        "the",
        "of",
        "and",
        "a",
        "an",
        "in",
        "is",
        "was",
        "are",
        "were",
        "to",
        "for",
        "with",
        "by",
        "as",
        "on",
        "that",
        "from",
    ]
)


def _prose(paragraph: str) -> bool:
    """A paragraph of running text, not an infobox, a caption, a heading or a list of names: 12+ tokens
    of which 3+ are English function words, and a sentence end."""
    tokens = tokenize(paragraph)
    return len(tokens) >= 12 and sum(token in FUNCTION_WORDS for token in tokens) >= 3 and "." in paragraph


def lead_of(body: str) -> str:
    """The first sentence of the first paragraph of running text (infobox lines and captions skipped)."""
    paragraphs = [" ".join(block.split()) for block in re.split(r"\n\s*\n", body)]
    first = next((p for p in paragraphs if _prose(p)), next((p for p in paragraphs if p), ""))
    end = re.search(r"[.!?](?:\s|$)", first)
    return first[: end.end()] if end else first


class Articles:
    """Articles kept so far: bags of words of text, title, lead and sentences over one vocabulary."""

    def __init__(self, max_tokens: int | None = None) -> None:
        self.max_tokens = max_tokens
        self.texts = CorpusBuilder()
        self.titles, self.leads, self.pieces = CorpusBuilder(), CorpusBuilder(), CorpusBuilder()
        self.titles.vocabulary = self.leads.vocabulary = self.pieces.vocabulary = self.texts.vocabulary
        self.names: list[str] = []
        self.owners: list[int] = []

    def add(self, name: str, title: str, body: str, tokens: list[str]) -> None:
        """Add an article: ``tokens`` are ``tokenize(body)``."""
        self.names.append(name)
        self.texts.add(tokens[: self.max_tokens])
        self.titles.add(tokenize(title))
        self.leads.add(tokenize(lead_of(body))[:LEAD_TOKENS])
        for tokens in sentences(body):
            self.pieces.add(tokens)
            self.owners.append(len(self.names) - 1)

    def build(self, edges: np.ndarray, statistics: dict[str, int]) -> LinkedCorpus:
        size = len(self.texts.vocabulary)
        statistics["sentences"] = len(self.owners)
        return LinkedCorpus(
            self.texts.build(),
            self.titles.build(size),
            self.leads.build(size),
            self.names,
            edges,
            statistics,
            self.pieces.build(size),
            np.asarray(self.owners, dtype=np.int64),
        )


def read_linked_folder(
    folder: str | Path, *, max_articles: int | None = None, max_tokens: int | None = None
) -> LinkedCorpus:
    """A Wikispeedia or generic linked-corpus folder as a ``LinkedCorpus`` (see the module docstring).

    Articles keep the order of ``articles.tsv`` / ``docs.tsv``; ``max_articles`` keeps the first N
    (links to the others are counted); ``max_tokens`` keeps each article's first N tokens as its text
    (an abstract-length document; title, lead and sentences are unchanged). Raises
    ``LinkedCorpusFormatError`` (file and line) for what
    cannot be read and when no link joins two kept articles.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = (folder / "docs.tsv").write_text("a\\tcats purr\\nb\\tcats and dogs\\nc\\tdogs bark\\n")
        >>> _ = (folder / "links.tsv").write_text("a\\tb\\nb\\tc\\nc\\tb\\nc\\tzebra\\n")
        >>> linked = read_linked_folder(folder)
        >>> linked.names, linked.edges.tolist()
        (['a', 'b', 'c'], [[0, 1], [1, 2]])
        >>> {k: linked.statistics[k] for k in ("links", "links_unknown_article", "edges")}
        {'links': 4, 'links_unknown_article': 1, 'edges': 2}
    """
    folder = Path(folder)
    kind = layout(folder)
    skips = Skips()
    statistics = {"articles_listed": 0, "articles_beyond_max": 0, "boilerplate_lines": 0}
    if kind == WIKISPEEDIA:
        articles, names = _wikispeedia_articles(folder, Articles(max_tokens), max_articles, skips, statistics)
    else:
        articles, names = _generic_articles(folder, Articles(max_tokens), max_articles, skips, statistics)
    statistics["articles"] = len(articles.names)
    if not articles.names:
        skips.report(folder)
        raise LinkedCorpusFormatError(f"{folder}: no article with text ({statistics} {skips.counts})")
    edges, link_counts = _read_links(folder / "links.tsv", names, kind, skips)
    statistics.update(link_counts)
    statistics.update({key: skips.counts.get(key, 0) for key in SKIP_KINDS})
    skips.report(folder)
    if len(edges) == 0:
        raise LinkedCorpusFormatError(
            f"{folder / 'links.tsv'}: no link joins two of the {len(articles.names)} articles ({statistics})"
        )
    return articles.build(edges, statistics)


SKIP_LABELS = {
    "links_unknown_article": "links to unknown articles",
    "links_of_dropped_articles": "links of articles without text",
    "self_links": "self-links",
    "duplicate_links": "repeated links",
    "articles_without_text_file": "articles without a text file",
    "articles_with_empty_text": "articles with an empty text",
    "text_files_not_listed": "text files no article lists",
}
SKIP_KINDS = (
    "links_unknown_article",
    "links_of_dropped_articles",
    "self_links",
    "duplicate_links",
    "articles_without_text_file",
    "articles_with_empty_text",
    "text_files_not_listed",
)


def _wikispeedia_articles(
    folder: Path, articles: Articles, max_articles: int | None, skips: Skips, statistics: dict[str, int]
) -> tuple[Articles, dict[str, int | None]]:
    """Read ``articles.tsv`` and each listed text; ``names``: decoded name -> article index (None: dropped)."""
    listing, texts = folder / "articles.tsv", folder / "plaintext_articles"
    names, first_line = {}, {}
    listed_files = set()
    for number, line in data_lines(listing):
        raw = line.strip()
        if "\t" in raw or " " in raw:
            raise LinkedCorpusFormatError(
                f"{listing}:{number}: expected one URL-encoded article name a line, got {quote(line)}"
            )
        name = decode_name(raw, listing, number)
        if name in first_line:
            raise LinkedCorpusFormatError(
                f"{listing}:{number}: article {name!r} listed twice (first on line {first_line[name]})"
            )
        first_line[name] = number
        statistics["articles_listed"] += 1
        listed_files.add(raw + ".txt")
        if max_articles is not None and len(articles.names) >= max_articles:
            statistics["articles_beyond_max"] += 1
            names[name] = None
            continue
        path = texts / (raw + ".txt")
        if not path.is_file():
            skips.add("articles_without_text_file", f"{listing}:{number} ({path.name})")
            names[name] = None
            continue
        title, body, cut = split_wikispeedia_text(decode_text(path, path.read_bytes()))
        statistics["boilerplate_lines"] += cut
        tokens = tokenize(body)
        if not tokens:
            skips.add("articles_with_empty_text", str(path))
            names[name] = None
            continue
        names[name] = len(articles.names)
        articles.add(name, title or name.replace("_", " "), body, tokens)
    for path in texts.glob("*.txt"):
        if path.name not in listed_files:
            skips.add("text_files_not_listed", str(path))
    if not first_line:
        raise LinkedCorpusFormatError(f"{listing}: lists no article")
    return articles, names


def _generic_articles(
    folder: Path, articles: Articles, max_articles: int | None, skips: Skips, statistics: dict[str, int]
) -> tuple[Articles, dict[str, int | None]]:
    """Read ``docs.tsv``; ``names``: id -> article index (None: dropped)."""
    path = folder / "docs.tsv"
    names, first_line = {}, {}
    for number, line in data_lines(path):
        if "\t" not in line:
            raise LinkedCorpusFormatError(f"{path}:{number}: expected 'id<TAB>text', got {quote(line)}")
        key, text = line.split("\t", 1)
        key = key.strip()
        if not key:
            raise LinkedCorpusFormatError(f"{path}:{number}: empty id")
        if key in first_line:
            raise LinkedCorpusFormatError(f"{path}:{number}: duplicate id {key!r} (first on line {first_line[key]})")
        first_line[key] = number
        statistics["articles_listed"] += 1
        if max_articles is not None and len(articles.names) >= max_articles:
            statistics["articles_beyond_max"] += 1
            names[key] = None
            continue
        tokens = tokenize(text)
        if not tokens:
            skips.add("articles_with_empty_text", f"{path}:{number}")
            names[key] = None
        else:
            names[key] = len(articles.names)
            articles.add(key, "", text, tokens)
    if not first_line:
        raise LinkedCorpusFormatError(f"{path}: empty")
    return articles, names


def _read_links(path: Path, names: dict[str, int | None], kind: str, skips: Skips) -> tuple[np.ndarray, dict[str, int]]:
    """Undirected edges ``[E, 2]`` (i < j, sorted) of ``links.tsv``; what is skipped goes to ``skips``."""
    pairs: set[tuple[int, int]] = set()
    seen: set[tuple[int, int]] = set()
    counts = {"links": 0}
    for number, line in data_lines(path):
        fields = line.split("\t")
        if len(fields) != 2 or not all(field.strip() for field in fields):
            raise LinkedCorpusFormatError(f"{path}:{number}: expected 'source<TAB>target', got {quote(line)}")
        counts["links"] += 1
        source, target = (field.strip() for field in fields)
        if kind == WIKISPEEDIA:
            source, target = decode_name(source, path, number), decode_name(target, path, number)
        if source not in names or target not in names:
            unknown = source if source not in names else target
            skips.add("links_unknown_article", f"{path}:{number} ({quote(unknown)})")
            continue
        a, b = names[source], names[target]
        if a is None or b is None:
            skips.add("links_of_dropped_articles", f"{path}:{number}")
        elif a == b:
            skips.add("self_links", f"{path}:{number}")
        elif (a, b) in seen:
            skips.add("duplicate_links", f"{path}:{number}")
        else:
            seen.add((a, b))
            pairs.add((min(a, b), max(a, b)))
    edges = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)
    counts["edges"] = len(edges)
    return edges, counts


def folder_key(folder: str | Path) -> str:
    """A digest of every file of a linked-corpus folder (name, size, mtime): the parse cache's key."""
    folder = Path(folder)
    stats = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = path.stat()
        stats.append((str(path.relative_to(folder)), stat.st_size, stat.st_mtime_ns))
    return hashlib.sha1(json.dumps([str(folder.resolve()), stats]).encode()).hexdigest()


__all__ = [
    "GENERIC",
    "WIKISPEEDIA",
    "LinkedCorpusFormatError",
    "decode_text",
    "folder_key",
    "layout",
    "lead_of",
    "read_linked_folder",
    "split_wikispeedia_text",
]
