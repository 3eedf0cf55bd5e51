"""The parsed form of a dump or a linked-corpus folder, cached: ``load_or_parse`` reads either once and
keeps a binary copy keyed by the path, its size and mtime, the parse options and the tokenizer."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from datamodules.atomic import atomic_path
from datamodules.wikipedia.corpus import CACHE_VERSION, LinkedCorpus, parse_dump
from datamodules.wikipedia.dump import WikipediaFormatError
from datamodules.wikipedia.folder import folder_key, read_linked_folder
from retrieval.terms import TOKENIZER, Corpus, load_corpus, save_corpus

log = logging.getLogger(__name__)


def load_or_parse(
    path: str | Path, cache_dir: str | Path | None, *, max_articles: int | None = None, max_tokens: int | None = None
) -> LinkedCorpus:
    """A dump (``parse_dump``) or a linked-corpus folder (``folder.read_linked_folder``), with a cache
    keyed by the path, the size and mtime of the file (of every file of the folder), the parse options
    and the tokenizer."""
    path = Path(path)
    is_folder = path.is_dir()
    if cache_dir is None:
        return (
            read_linked_folder(path, max_articles=max_articles, max_tokens=max_tokens)
            if is_folder
            else parse_dump(path, max_articles=max_articles, max_tokens=max_tokens)
        )
    if is_folder:
        identity = folder_key(path)
    elif path.is_file():
        stat = path.stat()
        identity = [str(path.resolve()), stat.st_size, stat.st_mtime_ns]
    else:
        raise WikipediaFormatError(f"{path}: no such file or folder")
    key = json.dumps([identity, max_articles, max_tokens, CACHE_VERSION, TOKENIZER])
    cached = Path(cache_dir) / f"{path.name}.{hashlib.sha1(key.encode()).hexdigest()[:16]}.npz"
    if cached.exists():
        return _load(cached)
    linked = (
        read_linked_folder(path, max_articles=max_articles, max_tokens=max_tokens)
        if is_folder
        else parse_dump(path, max_articles=max_articles, max_tokens=max_tokens)
    )
    extra = {"edges": linked.edges, "statistics": np.frombuffer(json.dumps(linked.statistics).encode(), np.uint8)}
    extra["names"] = np.frombuffer("\n".join(linked.names).encode(), np.uint8)
    extra["sentence_owner"] = linked.sentence_owner
    for name, queries in (("titles", linked.titles), ("leads", linked.leads), ("sentences", linked.sentences)):
        extra.update({f"{name}_offsets": queries.offsets, f"{name}_term_ids": queries.term_ids})
        extra.update({f"{name}_tfs": queries.tfs, f"{name}_lengths": queries.lengths})
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(cached) as partial:  # a killed run or a second process sees no half-written cache
            save_corpus(partial, linked.corpus, **extra)
    except OSError as error:  # a full disk or read-only cache costs the next run a parse, not this run
        log.warning("cannot write the corpus cache %s: %s; continuing without it", cached, error.strerror or error)
    return linked


def _load(cached: Path) -> LinkedCorpus:
    corpus, extra = load_corpus(cached)
    queries = {
        name: Corpus(
            extra[f"{name}_offsets"],
            extra[f"{name}_term_ids"],
            extra[f"{name}_tfs"],
            extra[f"{name}_lengths"],
            corpus.vocabulary,
        )
        for name in ("titles", "leads", "sentences")
    }
    return LinkedCorpus(
        corpus,
        queries["titles"],
        queries["leads"],
        extra["names"].tobytes().decode().split("\n"),
        extra["edges"],
        json.loads(extra["statistics"].tobytes().decode()),
        queries["sentences"],
        extra["sentence_owner"],
    )


__all__ = ["load_or_parse"]
