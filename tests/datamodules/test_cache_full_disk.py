"""A parse cache that cannot be written (full disk, read-only cache folder) costs the next run a
parse, never this run, and leaves nothing a later run would load (issue 41, sweep)."""

from __future__ import annotations

import logging

import numpy as np

import datamodules.letor_io
from datamodules.letor_io import read_letor
from datamodules.synthetic_text import write_synthetic_dump
from datamodules.wikipedia import cache as corpus

ENOSPC = OSError(28, "No space left on device")


def _half_then_full(path, *args, **kwargs):
    with open(path, "wb") as out:
        out.write(b"\x93NUMPY half")
    raise ENOSPC


def test_a_letor_cache_on_a_full_disk_is_skipped_with_a_warning(tmp_path, monkeypatch, caplog):
    letor = tmp_path / "train.txt"
    letor.write_text("2 qid:1 1:3\n0 qid:1 1:1\n1 qid:2 1:2 2:1\n")
    monkeypatch.setattr(datamodules.letor_io.np, "save", _half_then_full)
    with caplog.at_level(logging.WARNING):
        data = read_letor(letor, cache_dir=tmp_path / "cache")
    assert data.num_queries == 2 and np.array_equal(data.labels, [2, 0, 1])
    assert "cannot write the parse cache" in caplog.text and "No space left on device" in caplog.text
    assert list((tmp_path / "cache").iterdir()) == []  # nothing half-written to load next time


def test_a_corpus_cache_on_a_full_disk_is_skipped_with_a_warning(tmp_path, monkeypatch, caplog):
    dump = write_synthetic_dump(tmp_path / "s.xml", n_articles=20, n_topics=2)
    monkeypatch.setattr(corpus, "save_corpus", lambda path, *a, **k: _half_then_full(path))
    with caplog.at_level(logging.WARNING):
        linked = corpus.load_or_parse(dump, tmp_path / "cache")
    assert len(linked.names) > 0 and "cannot write the corpus cache" in caplog.text
    assert list((tmp_path / "cache").iterdir()) == []
