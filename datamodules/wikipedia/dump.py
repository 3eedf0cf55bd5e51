"""Streaming reader of MediaWiki XML dumps (``pages-articles.xml`` or ``.xml.bz2``) with bounded memory."""

from __future__ import annotations

import bz2
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from datamodules.errors import DataError


class WikipediaFormatError(DataError):
    """A dump that cannot be used; the message names the file (and line where known)."""


@dataclass
class Page:
    title: str
    namespace: int
    redirect: str | None
    text: str


def _open(path: Path):
    return bz2.open(path, "rb") if path.suffix == ".bz2" else open(path, "rb")


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def iter_pages(path: str | Path) -> Iterator[Page | set[str]]:
    """Yield the namespace names (once, from ``siteinfo``) and then every ``Page``, streaming.

    Anything that is not a readable MediaWiki dump (another XML root, truncated compression,
    malformed XML, random bytes) raises ``WikipediaFormatError`` naming the file (and line).
    """
    path = Path(path)
    if not path.is_file():
        raise WikipediaFormatError(f"{path}: no such file")
    try:
        with _open(path) as handle:
            events = ET.iterparse(handle, events=("start", "end"))
            _, root = next(events)
            if _local(root.tag) != "mediawiki":
                raise WikipediaFormatError(f"{path}: not a MediaWiki XML dump (root element <{_local(root.tag)[:40]}>)")
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
                    yield _page(path, element)
                    root.clear()  # bounded memory: drop the finished page
    except ET.ParseError as error:
        line = error.position[0] if error.position else "?"
        raise WikipediaFormatError(f"{path}:{line}: truncated or malformed XML ({str(error)[:200]})") from None
    except (EOFError, OSError, ValueError) as error:
        if isinstance(error, WikipediaFormatError):
            raise
        raise WikipediaFormatError(f"{path}: truncated or unreadable ({str(error)[:200]})") from None
    except StopIteration:
        raise WikipediaFormatError(f"{path}: empty file") from None


def _page(path: Path, element: ET.Element) -> Page:
    fields = {_local(child.tag): child for child in element.iter()}
    redirect, text, namespace = fields.get("redirect"), fields.get("text"), fields.get("ns")
    try:
        number = int(namespace.text) if namespace is not None and namespace.text else 0
    except ValueError:
        raise WikipediaFormatError(f"{path}: page namespace {namespace.text[:40]!r} is not a number") from None
    return Page(
        title=(fields["title"].text or "") if "title" in fields else "",
        namespace=number,
        redirect=redirect.get("title") if redirect is not None else None,
        text=(text.text or "") if text is not None else "",
    )


__all__ = ["Page", "WikipediaFormatError", "iter_pages"]
