"""The Wikipedia reader: markup, redirects, namespaces, link graph, split, triples, errors, cache."""

from __future__ import annotations

import bz2
import re

import numpy as np
import pytest
import torch

from datamodules.text import tokenize
from datamodules.wikipedia import (
    MarkupStripper,
    WikipediaDataModule,
    WikipediaFormatError,
    load_or_parse,
    parse_dump,
    split_graph,
    write_dump,
    write_synthetic_dump,
)
from tests.conftest import SHARED

REAL_DUMP = SHARED / "data" / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2"
MARKUP_WORDS = {"infobox", "nested", "small", "hidden", "cite", "web", "reference", "tablecell", "wikitable"}
MARKUP_WORDS |= {"picture", "jpg", "thumb", "caption", "things", "chose", "class"}

PAGES = [
    ("Alpha", 0, None, "Alpha text {{cite|x}} links [[beta]] and [[Gamma (band)|the band]] and [[Nowhere]]."),
    ("Beta", 0, None, "Beta text, see [[Alpha#History]] and [[Category:Letters]] [[de:Beta]] [[File:B.png|thumb]]."),
    ("Gamma (band)", 0, None, "Gamma plays. [[Old beta]] is a redirect to beta. Self [[Gamma (band)]]."),
    ("Old beta", 0, "Beta", "#REDIRECT [[Beta]]"),
    ("Talk:Alpha", 1, None, "[[Beta]] talk"),
    ("Delta", 0, None, "Delta has no links at all."),
]


def test_markup_is_stripped_and_link_labels_kept():
    stripper = MarkupStripper({"Category", "File"})
    text = (
        "{{Infobox|a={{nested|b}}}}<!-- c -->'''Bold''' ''it'' [[Target page|label words]] [[Plain]] "
        "<ref name=x>refword</ref><ref name=y/> {| class=t\n| cell\n|} [[File:F.jpg|thumb|cap [[Inner]]]] "
        "[[Category:Cat]] [[fr:Chose]] [http://example.org ext label] == Head ==\n<small>tagged</small>"
    )
    tokens = set(tokenize(stripper.strip(text)))
    assert {"bold", "it", "label", "words", "plain", "ext", "head", "tagged"} <= tokens
    assert not tokens & {"infobox", "nested", "refword", "cell", "thumb", "cap", "inner", "cat", "chose", "target"}
    assert stripper.links(text) == ["Target page", "Plain", "Inner"]


def test_links_resolve_through_redirects_within_the_main_namespace(tmp_path):
    linked = parse_dump(write_dump(tmp_path / "d.xml", PAGES))
    assert linked.titles == ["Alpha", "Beta", "Gamma (band)", "Delta"]
    pairs = {tuple(sorted((linked.titles[i], linked.titles[j]))) for i, j in linked.edges}
    # Alpha-Beta (both directions, one edge), Alpha-Gamma, Gamma-Beta via the redirect "Old beta"
    assert pairs == {("Alpha", "Beta"), ("Alpha", "Gamma (band)"), ("Beta", "Gamma (band)")}
    stats = linked.statistics
    assert stats["redirects"] == 1 and stats["other_namespaces"] == 1 and stats["articles"] == 4
    assert stats["links_via_redirect"] == 1 and stats["self_links"] == 1 and stats["links_outside_corpus"] == 1
    # Delta is kept though it has no link: it is a document (and a negative), just never an anchor
    assert linked.corpus.n_docs == 4


def test_synthetic_dump_text_has_no_markup_left(tmp_path):
    linked = parse_dump(write_synthetic_dump(tmp_path / "s.xml.bz2", n_articles=60, n_topics=6))
    assert not set(linked.corpus.vocabulary) & MARKUP_WORDS
    assert linked.statistics["links_via_redirect"] > 0 and linked.statistics["edges"] > 60


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"<html><body>not a dump</body></html>", "not a MediaWiki XML dump"),
        (b"", "empty file|malformed"),
        (b'<mediawiki xmlns="x">\n  <page>\n    <title>A</title>\n    <text>cut', r"d\.xml:4: truncated or malformed"),
    ],
)
def test_unusable_files_get_a_clear_error(tmp_path, content, message):
    path = tmp_path / "d.xml"
    path.write_bytes(content)
    with pytest.raises(WikipediaFormatError, match=message):
        parse_dump(path)


def test_truncated_bz2_and_dump_without_links(tmp_path):
    good = write_dump(tmp_path / "d.xml.bz2", PAGES)
    cut = tmp_path / "cut.xml.bz2"
    cut.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    with pytest.raises(WikipediaFormatError, match=r"cut\.xml\.bz2.*truncated"):
        parse_dump(cut)
    lonely = write_dump(tmp_path / "lonely.xml", [("A", 0, None, "no links"), ("B", 0, None, "[[Elsewhere]]")])
    with pytest.raises(WikipediaFormatError, match="no links between its 2 articles"):
        parse_dump(lonely)


def test_parsed_corpus_is_cached(tmp_path):
    dump = write_synthetic_dump(tmp_path / "s.xml", n_articles=40, n_topics=4)
    first = load_or_parse(dump, tmp_path / "cache")
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 1
    second = load_or_parse(dump, tmp_path / "cache")
    assert second.titles == first.titles and np.array_equal(second.edges, first.edges)
    assert np.array_equal(second.corpus.term_ids, first.corpus.term_ids)
    assert second.corpus.vocabulary == first.corpus.vocabulary and second.statistics == first.statistics


def test_split_removes_crossing_links():
    edges = np.array([[0, 1], [1, 2], [2, 3], [0, 3], [4, 5]])
    is_val, kept = split_graph(6, edges, 0.5, seed=3)
    assert is_val.sum() == 3
    assert all(is_val[i] == is_val[j] for i, j in kept)
    assert len(kept) == sum(is_val[i] == is_val[j] for i, j in edges)


def test_triples_are_linked_positives_and_unlinked_negatives_fresh_each_epoch(tmp_path):
    datamodule = WikipediaDataModule(str(write_synthetic_dump(tmp_path / "s.xml", n_articles=120)), batch_size=16)
    datamodule.setup()
    batches = datamodule.train_dataloader()
    first, second = torch.cat(list(batches)), torch.cat(list(batches))
    assert len(first) == len(batches.anchors) and not torch.equal(first, second)
    train = set(datamodule.train_docs.tolist())
    for d, positive, negative in first.tolist():
        neighbours = set(datamodule.neighbours[datamodule.offsets[d] : datamodule.offsets[d + 1]].tolist())
        assert positive in neighbours and negative not in neighbours and negative != d
        assert {d, positive, negative} <= train
    relevant = datamodule.relevant(datamodule.val_queries[:3])
    assert relevant.sum(1).min() >= 1
    assert datamodule.statistics["edges_crossing_split_removed"] > 0


@pytest.mark.skipif(not REAL_DUMP.exists(), reason="../shared/data/wikipedia not present")
def test_real_dump_fragment_against_mwparserfromhell():
    mwparserfromhell = pytest.importorskip("mwparserfromhell")
    linked = parse_dump(REAL_DUMP)
    assert linked.statistics["articles"] == 106 and linked.statistics["redirects"] == 99
    assert len(linked.edges) > 50
    # the words our regex stripping keeps are (nearly) all words mwparserfromhell's strip_code keeps;
    # strip_code keeps more: the text of references, which we remove as the issue asks
    stripper = MarkupStripper({"Category", "File", "Image", "Template", "Wikipedia", "Help", "Portal"})
    with bz2.open(REAL_DUMP, "rt") as handle:
        texts = re.split(r"<text[^>]*>", handle.read())[1:]
    checked = 0
    for raw in texts:
        raw = raw.split("</text>")[0].replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
        raw = raw.replace("&quot;", '"')
        if raw.startswith("#REDIRECT"):
            continue
        ours = set(tokenize(stripper.strip(raw)))
        theirs = set(tokenize(mwparserfromhell.parse(raw).strip_code()))
        assert len(ours - theirs) / len(ours) < 0.02, sorted(ours - theirs)[:20]
        checked += 1
    assert checked >= 100
