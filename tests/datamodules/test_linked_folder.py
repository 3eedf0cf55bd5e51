"""Linked-corpus folders (Wikispeedia's layout and docs.tsv + links.tsv): values, skips, refusals, properties."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datamodules.wikipedia import LinkedCorpusFormatError, load_or_parse, read_linked_folder
from datamodules.wikipedia.folder import lead_of, split_wikispeedia_text
from retrieval.terms import tokenize
from tests.conftest import SHARED

WIKISPEEDIA = SHARED / "data" / "wikispeedia"
HEADER = "   #copyright\n\n{title}\n\n2007 Schools Wikipedia Selection. Related subjects: {subjects}\n\n"
FOOTER = '\n   Retrieved from " http://en.wikipedia.org/wiki/{name}"\n   This reference article is mainly selected.\n'
COMMENTS = "# The list of all articles.\n# FORMAT:   article\n#\n\n"


def write_wikispeedia(folder: Path, articles: dict[str, str], links: list[tuple[str, str]], **options) -> Path:
    """A Wikispeedia-layout folder: ``articles`` {name: body}, names URL-encoded, header and footer added."""
    texts = folder / "plaintext_articles"
    texts.mkdir(parents=True, exist_ok=True)
    listing = COMMENTS + "".join(quote(name) + "\n" for name in articles)
    (folder / "articles.tsv").write_text(listing)
    (folder / "links.tsv").write_text(COMMENTS + "".join(f"{quote(a)}\t{quote(b)}\n" for a, b in links))
    for name, body in articles.items():
        title = name.replace("_", " ")
        text = HEADER.format(title=title, subjects="Physics;\nChemistry") + body + FOOTER.format(name=name)
        (texts / f"{quote(name)}.txt").write_text(text)
    return folder


def write_generic(folder: Path, docs: dict[str, str], links: list[tuple[str, str]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "docs.tsv").write_text("".join(f"{key}\t{text}\n" for key, text in docs.items()))
    (folder / "links.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in links))
    return folder


ARTICLES = {
    "Áedán_mac_Gabráin": "   Caption line\n\n   Áedán was a king of Dál Riata in the sixth century and he fought at\n"
    "   the battle of the Picts. He is a figure of legend.\n\nHistory\n\n   More text here.\n",
    "Zulu": "   The Zulu are an African ethnic group of the province of Natal. They speak Zulu.\n",
    "€2_coins": "   The coins of two euro are a currency of the euro area and are in use in many states.\n",
}


def bag(linked, row: int, corpus: str = "corpus") -> Counter:
    c = getattr(linked, corpus)
    terms = c.term_ids[c.offsets[row] : c.offsets[row + 1]]
    tfs = c.tfs[c.offsets[row] : c.offsets[row + 1]]
    return Counter({c.vocabulary[t]: int(n) for t, n in zip(terms, tfs)})


def names_of_edges(linked) -> set[tuple[str, str]]:
    return {tuple(sorted((linked.names[i], linked.names[j]))) for i, j in linked.edges}


def test_wikispeedia_layout_decodes_names_cuts_boilerplate_and_keeps_title_and_lead(tmp_path):
    links = [("Áedán_mac_Gabráin", "Zulu"), ("Zulu", "Áedán_mac_Gabráin"), ("Zulu", "€2_coins"), ("Zulu", "Zulu")]
    linked = read_linked_folder(write_wikispeedia(tmp_path, ARTICLES, links))
    assert linked.names == list(ARTICLES)
    assert names_of_edges(linked) == {("Zulu", "Áedán_mac_Gabráin"), ("Zulu", "€2_coins")}
    for row, body in enumerate(ARTICLES.values()):
        assert bag(linked, row) == Counter(tokenize(body))  # no copyright, subjects or licence words
    assert bag(linked, 0, "titles") == Counter(["áedán", "mac", "gabráin"])
    # the lead is the first sentence of running text, not the caption
    assert bag(linked, 0, "leads") == Counter(
        tokenize("Áedán was a king of Dál Riata in the sixth century and he fought at the battle of the Picts.")
    )
    stats = linked.statistics
    assert stats["links"] == 4 and stats["self_links"] == 1 and stats["edges"] == 2
    assert stats["articles"] == 3 and stats["boilerplate_lines"] > 0


def test_split_wikispeedia_text_keeps_a_text_without_header_whole():
    title, body, cut = split_wikispeedia_text("Just text. No header at all.\n")
    assert (title, body.strip(), cut) == ("", "Just text. No header at all.", 0)
    assert lead_of(
        "   Kingdom Animalia\n   Phylum Chordata\n\n"
        "   The owl is a bird of the night and of the woods, found in the north.\n"
    ) == ("The owl is a bird of the night and of the woods, found in the north.")


def test_generic_layout_and_max_tokens(tmp_path):
    docs = {"p1": "graphs and links of papers", "p2": "citation graphs of papers", "p3": "papers about cats"}
    linked = read_linked_folder(write_generic(tmp_path, docs, [("p1", "p2"), ("p3", "p1")]))
    assert linked.names == ["p1", "p2", "p3"] and names_of_edges(linked) == {("p1", "p2"), ("p1", "p3")}
    assert [bag(linked, i) for i in range(3)] == [Counter(tokenize(t)) for t in docs.values()]
    assert linked.titles.lengths.tolist() == [0, 0, 0]  # generic articles have no title
    short = read_linked_folder(tmp_path, max_tokens=2)
    assert [bag(short, i) for i in range(3)] == [Counter(tokenize(t)[:2]) for t in docs.values()]


def test_bom_and_crlf_read_like_plain_files(tmp_path):
    docs = {"a": "alpha beta", "b": "beta gamma", "c": "gamma delta"}
    links = [("a", "b"), ("b", "c")]
    plain = read_linked_folder(write_generic(tmp_path / "plain", docs, links))
    odd = write_generic(tmp_path / "odd", docs, links)
    for name in ("docs.tsv", "links.tsv"):
        text = (odd / name).read_text()
        (odd / name).write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    windows = read_linked_folder(odd)
    assert windows.names == plain.names and windows.edges.tolist() == plain.edges.tolist()
    assert [bag(windows, i) for i in range(3)] == [bag(plain, i) for i in range(3)]
    # the same in a Wikispeedia text file
    folder = write_wikispeedia(tmp_path / "w", ARTICLES, [("Zulu", "€2_coins")])
    path = folder / "plaintext_articles" / f"{quote('Zulu')}.txt"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_text().replace("\n", "\r\n").encode())
    linked = read_linked_folder(folder)
    assert bag(linked, 1) == Counter(tokenize(ARTICLES["Zulu"])) and bag(linked, 1, "titles") == Counter(["zulu"])


def test_unknown_articles_missing_and_empty_texts_are_counted_and_logged(tmp_path, caplog):
    articles = dict(ARTICLES, Empty="   \n\n")
    links = [("Zulu", "Nowhere"), ("Zulu", "€2_coins"), ("Empty", "Zulu"), ("Áedán_mac_Gabráin", "€2_coins")]
    folder = write_wikispeedia(tmp_path, articles, links)
    (folder / "plaintext_articles" / f"{quote('Áedán_mac_Gabráin')}.txt").unlink()
    (folder / "plaintext_articles" / "Stray.txt").write_text("not listed")
    with caplog.at_level(logging.WARNING):
        linked = read_linked_folder(folder)
    assert linked.names == ["Zulu", "€2_coins"] and names_of_edges(linked) == {("Zulu", "€2_coins")}
    stats = linked.statistics
    assert stats["links_unknown_article"] == 1 and stats["links_of_dropped_articles"] == 2
    assert stats["articles_without_text_file"] == 1 and stats["articles_with_empty_text"] == 1
    assert stats["text_files_not_listed"] == 1 and stats["articles_listed"] == 4
    assert "links.tsv:5" in caplog.text and "1 links to unknown articles skipped" in caplog.text  # file and line
    assert "Stray.txt" in caplog.text and "articles.tsv:5" in caplog.text


@pytest.mark.parametrize(
    ("layout", "file", "content", "message"),
    [
        ("generic", "docs.tsv", "a\talpha\nb\tbeta\na\tgamma\n", r"docs.tsv:3: duplicate id 'a' \(first on line 1\)"),
        ("generic", "docs.tsv", "a\talpha\nno tab here\n", r"docs.tsv:2: expected 'id<TAB>text'"),
        ("generic", "docs.tsv", "a\talpha\n\tbeta\n", r"docs.tsv:2: empty id"),
        ("generic", "docs.tsv", b"a\talpha\nb\tbad \xff byte\n", r"docs.tsv:2: byte 0xff at column 7 is not UTF-8"),
        ("generic", "docs.tsv", "", r"docs.tsv: empty"),
        ("generic", "links.tsv", "a\tb\na\n", r"links.tsv:2: expected 'source<TAB>target'"),
        ("generic", "links.tsv", "a\tb\tc\n", r"links.tsv:1: expected 'source<TAB>target'"),
        ("generic", "links.tsv", b"a\tb\n\xc3\x28\tb\n", r"links.tsv:2: byte 0xc3"),
        ("generic", "links.tsv", "a\tnowhere\n", r"links.tsv: no link joins two of the 2 articles"),
        ("wikispeedia", "articles.tsv", "Zulu\nZulu\n", r"articles.tsv:2: article 'Zulu' listed twice"),
        ("wikispeedia", "articles.tsv", "Zulu\tExtra\n", r"articles.tsv:1: expected one URL-encoded article name"),
        ("wikispeedia", "articles.tsv", "%C3%28\n", r"articles.tsv:1: article name '%C3%28' is not valid URL-encoded"),
        ("wikispeedia", "articles.tsv", "# only comments\n", r"articles.tsv: lists no article"),
        ("wikispeedia", "plaintext_articles/Zulu.txt", b"ok\n\nbad \xfe\n", r"Zulu.txt:3: byte 0xfe"),
        ("wikispeedia", "plaintext_articles/Zulu.txt", b"text\0binary", r"Zulu.txt:1: a NUL byte"),
    ],
)
def test_bad_input_is_refused_naming_file_and_line(tmp_path, layout, file, content, message):
    if layout == "generic":
        folder = write_generic(tmp_path, {"a": "alpha", "b": "beta"}, [("a", "b")])
    else:
        folder = write_wikispeedia(
            tmp_path, {"Zulu": "   Zulu text.\n", "Xhosa": "   Xhosa text.\n"}, [("Zulu", "Xhosa")]
        )
    path = folder / file
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(LinkedCorpusFormatError, match=message):
        read_linked_folder(folder)


def test_a_folder_of_neither_layout_is_refused(tmp_path):
    with pytest.raises(LinkedCorpusFormatError, match="neither a Wikispeedia folder"):
        read_linked_folder(tmp_path)
    (tmp_path / "docs.tsv").write_text("a\tb\n")
    with pytest.raises(LinkedCorpusFormatError, match=r"needs links\.tsv"):
        read_linked_folder(tmp_path)


def test_folder_cache_is_keyed_by_its_files(tmp_path):
    folder = write_generic(tmp_path / "c", {"a": "alpha beta", "b": "beta", "c": "gamma"}, [("a", "b")])
    first = load_or_parse(folder, tmp_path / "cache")
    assert load_or_parse(folder, tmp_path / "cache").edges.tolist() == first.edges.tolist() == [[0, 1]]
    (folder / "links.tsv").write_text("a\tb\nb\tc\n")  # a changed file is parsed again, not read from the cache
    assert load_or_parse(folder, tmp_path / "cache").edges.tolist() == [[0, 1], [1, 2]]
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 2


# -- property: random small corpora and corruptions parse to exactly what was written, or are refused
WORDS = st.sampled_from(["alpha", "beta", "gamma", "delta", "épée", "naïve", "x1", "42"])
IDS = st.text(alphabet="abcdefgh", min_size=1, max_size=3)
CORRUPTIONS = ["none", "bom_crlf", "unknown_link", "empty_text", "duplicate_id", "bad_byte", "no_tab", "three_fields"]


@st.composite
def corpora(draw):
    ids = draw(st.lists(IDS, min_size=2, max_size=6, unique=True))
    docs = {key: " ".join(draw(st.lists(WORDS, min_size=1, max_size=8))) for key in ids}
    pairs = st.tuples(st.sampled_from(ids), st.sampled_from(ids))
    links = draw(st.lists(pairs, min_size=1, max_size=10))
    return docs, links, draw(st.sampled_from(CORRUPTIONS)), draw(st.integers(0, 100))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(corpora())
def test_random_corpora_parse_exactly_or_raise_naming_the_file(tmp_path_factory, case):
    docs, links, corruption, pick = case
    folder = tmp_path_factory.mktemp("corpus")
    docs_lines = [f"{key}\t{text}" for key, text in docs.items()]
    links_lines = [f"{a}\t{b}" for a, b in links]
    expected_docs, expected_links = dict(docs), list(links)
    refused = None
    if corruption == "unknown_link":
        links_lines.insert(pick % (len(links_lines) + 1), "zzzz\tmissing")
    elif corruption == "empty_text":
        victim = list(docs)[pick % len(docs)]
        docs_lines = [f"{victim}\t  " if line.startswith(victim + "\t") else line for line in docs_lines]
        expected_docs.pop(victim)
        expected_links = [(a, b) for a, b in links if victim not in (a, b)]
    elif corruption == "duplicate_id":
        docs_lines.append(docs_lines[pick % len(docs_lines)])
        refused = "docs.tsv"
    elif corruption == "bad_byte":
        refused = "links.tsv"
    elif corruption == "no_tab":
        docs_lines.insert(pick % (len(docs_lines) + 1), "lonely")
        refused = "docs.tsv"
    elif corruption == "three_fields":
        links_lines.append("a\tb\tc")
        refused = "links.tsv"
    ending = "\r\n" if corruption == "bom_crlf" else "\n"
    bom = b"\xef\xbb\xbf" if corruption == "bom_crlf" else b""
    (folder / "docs.tsv").write_bytes(bom + "".join(line + ending for line in docs_lines).encode())
    links_bytes = bom + "".join(line + ending for line in links_lines).encode()
    if corruption == "bad_byte":
        links_bytes += b"\xff\t\xfe\n"
    (folder / "links.tsv").write_bytes(links_bytes)
    names = list(expected_docs)
    edges = {tuple(sorted((names.index(a), names.index(b)))) for a, b in expected_links if a != b}
    if refused is None and not edges:
        refused = "links.tsv"  # nothing to learn from: refused, naming the link file
    if refused is not None:
        with pytest.raises(LinkedCorpusFormatError, match=refused):
            read_linked_folder(folder)
        return
    linked = read_linked_folder(folder)
    assert linked.names == names
    assert [bag(linked, i) for i in range(len(names))] == [Counter(tokenize(expected_docs[n])) for n in names]
    assert {tuple(edge) for edge in linked.edges.tolist()} == edges
    stats = linked.statistics
    kept = [(a, b) for a, b in expected_links if a != b]
    assert stats["links"] == len(links_lines)
    assert stats["links_unknown_article"] == (corruption == "unknown_link")
    assert stats["self_links"] == sum(a == b for a, b in expected_links)
    assert stats["duplicate_links"] == len(kept) - len(set(kept))
    assert stats["links_of_dropped_articles"] == len(links) - len(expected_links)


@pytest.mark.slow
@pytest.mark.skipif(not WIKISPEEDIA.is_dir(), reason="../shared/data/wikispeedia is absent")
def test_the_shared_wikispeedia_folder_reads_whole():
    linked = read_linked_folder(WIKISPEEDIA)
    stats = linked.statistics
    assert stats["articles"] == 4598 and stats["links"] == 119879
    # every link resolves; 110 are self-links; A->B and B->A are one undirected edge
    assert stats["links_unknown_article"] == 0 and stats["self_links"] == 110 and stats["edges"] == 106534
    assert np.all(linked.edges[:, 0] < linked.edges[:, 1])
    zulu = linked.names.index("Zulu")
    assert bag(linked, zulu, "titles") == Counter(["zulu"])
    assert "retrieved" not in bag(linked, zulu) and "copyright" not in bag(linked, zulu)
