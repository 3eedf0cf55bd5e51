"""Synthetic hyperlinked dumps and ad-hoc collections for tests, benchmarks and smoke runs.

Text is drawn from topics: a document mixes its topic's words (``t{topic}w{j}``) with frequent
Zipf-distributed common words (stop-word-like); links and relevance follow topics. A collection is
drawn over *other* topic words than a dump (``u{topic}w{j}``), so a model trained on the dump meets
an unseen vocabulary, as a Wikipedia-trained model meets a test collection.
"""

from __future__ import annotations

import bz2
from pathlib import Path

import numpy as np

COMMON_WORDS = [f"common{j}" for j in range(200)]
_ZIPF = 1.0 / np.arange(1, len(COMMON_WORDS) + 1)
_ZIPF /= _ZIPF.sum()


def synthetic_words(
    rng: np.random.Generator,
    length: int,
    *,
    topic: str,
    topic_share: float,
    mixed_in: str | None = None,
    mixed_share: float = 0.0,
) -> list[str]:
    """A shuffled bag of about ``length`` tokens: a Binomial(``topic_share``) share of the topic's
    words ``{topic}w{j}`` (j < 25), ``mixed_share`` times as many words of topic ``mixed_in``, and
    Zipf-distributed common words (stop-word-like) for the rest."""
    n_topic = rng.binomial(length, topic_share)
    words = [f"{topic}w{j}" for j in rng.integers(0, 25, n_topic)]
    if mixed_in is not None:
        words += [f"{mixed_in}w{j}" for j in rng.integers(0, 25, int(n_topic * mixed_share))]
    words += [COMMON_WORDS[j] for j in rng.choice(len(COMMON_WORDS), length - n_topic, p=_ZIPF)]
    rng.shuffle(words)
    return words


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


def write_synthetic_linked_folder(
    folder: str | Path, *, n_articles: int = 300, n_topics: int = 30, links_per_article: int = 5, seed: int = 0
) -> Path:
    """A generic linked-corpus folder (``docs.tsv`` ``id<TAB>text``, ``links.tsv`` ``source<TAB>target``)
    drawn like ``write_synthetic_dump``: topic words and common words, links mostly within a topic."""
    rng = np.random.default_rng(seed)
    topic_of = rng.integers(0, n_topics, n_articles)
    members = {t: np.flatnonzero(topic_of == t) for t in range(n_topics)}
    docs, links = [], []
    for i in range(n_articles):
        words = synthetic_words(rng, int(rng.integers(40, 300)), topic=f"t{topic_of[i]}", topic_share=0.3)
        docs.append(f"a{i}\t{' '.join(words)}. {' '.join(words[:12])}.")
        same = members[topic_of[i]]
        links += [f"a{i}\ta{j}" for j in rng.choice(same, min(links_per_article, len(same)), replace=False) if j != i]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "docs.tsv").write_text("\n".join(docs) + "\n")
    (folder / "links.tsv").write_text("\n".join(links) + "\n")
    return folder


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


def write_synthetic_collection(
    folder: str | Path,
    *,
    n_docs: int = 400,
    n_topics: int = 20,
    n_queries: int = 20,
    topic_share: float = 0.3,
    lengths: tuple[int, int] = (40, 300),
    neighbour_share: float = 0.0,
    query_words: tuple[int, int] = (3, 1),
    seed: int = 0,
) -> Path:
    """A small ad-hoc collection drawn like ``wikipedia.write_synthetic_dump`` but over *other* topic
    words (``u{topic}w{j}``), so a model trained on the dump meets an unseen vocabulary.

    A document of ``lengths`` tokens has a ``topic_share`` of its topic's words, ``neighbour_share``
    times as many of the next topic's words (confusable documents), the rest Zipf-distributed common
    words. A query is ``query_words[0]`` words of one topic and ``query_words[1]`` frequent common
    words; the documents of that topic are relevant (rel 1).
    """
    rng = np.random.default_rng(seed)
    topic_of = rng.integers(0, n_topics, n_docs)
    docs = []
    for i in range(n_docs):
        length = int(rng.integers(*lengths))
        neighbour = f"u{(topic_of[i] + 1) % n_topics}"
        words = synthetic_words(
            rng,
            length,
            topic=f"u{topic_of[i]}",
            topic_share=topic_share,
            mixed_in=neighbour,
            mixed_share=neighbour_share,
        )
        docs.append(f"doc{i}\t{' '.join(words)}")
    queries, qrels = [], []
    for q in range(n_queries):
        topic = q % n_topics
        words = [f"u{topic}w{j}" for j in rng.integers(0, 25, query_words[0])]
        words += [COMMON_WORDS[int(j)] for j in rng.integers(0, 20, query_words[1])]
        queries.append(f"query{q}\t{' '.join(words)}")
        qrels += [f"query{q} 0 doc{i} 1" for i in np.flatnonzero(topic_of == topic)]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "docs.tsv").write_text("\n".join(docs) + "\n")
    (folder / "queries.tsv").write_text("\n".join(queries) + "\n")
    (folder / "qrels.txt").write_text("\n".join(qrels) + "\n")
    return folder
