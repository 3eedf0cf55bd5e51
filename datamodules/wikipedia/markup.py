"""Wikitext -> plain text and article link targets, in time linear in the page's length on any input.

Removed: comments, references, non-prose blocks (``<math>``, ``<gallery>``, code...), templates,
tables, files, categories, interlanguage links, HTML tags, emphasis and heading marks; link labels
are kept. Regular expressions are not used for anything that nests or can be left unclosed: a
``.*?`` up to a closing tag rescans the rest of the page for every unclosed opener, which made a
400 KB page of unclosed ``<ref>`` tags take 48 s. Openers and closers are found in one scan each and
paired with a stack (brackets) or a binary search (tags): an unclosed ``<!--`` hides the rest of the
page (as MediaWiki renders it), an unclosed tag, template, table or link is kept as text.

We strip with this scanner rather than mwparserfromhell, which is an order of magnitude slower on
the real dump fragment in ../shared/data/wikipedia (``bench/linklearn.py`` prints both throughputs).
"""

from __future__ import annotations

import bisect
import html
import re

# namespaces a [[Prefix:...]] link may point to besides the ones the dump's siteinfo declares
NAMESPACE_ALIASES = {"image", "wp", "wt", "project", "cat", "w", "wiktionary", "wikt", "commons", "meta", "s", "q", "n"}
INTERLANGUAGE = re.compile(r"^[a-z]{2,3}(?:-[a-z]+)*$")
# tags whose content is not prose: references, formulas, galleries of file names, code, charts
BLOCK_TAGS = ("ref", "math", "gallery", "timeline", "chem", "score", "syntaxhighlight", "source", "graph")
BLOCK_TAGS += ("mapframe", "imagemap", "templatedata")
OPEN_TAG = re.compile(r"<(" + "|".join(BLOCK_TAGS) + r")\b[^<>]*?(/?)>", re.I)
CLOSE_TAG = re.compile(r"</(" + "|".join(BLOCK_TAGS) + r")\s*>", re.I)
# bracket tokens; a link's content cannot hold a bare "[" or "]" (as in MediaWiki), so its label is clean
BRACKETS = re.compile(r"\{\{|\}\}|\{\||\|\}|\[\[|\]\]")
LINK_BODY = re.compile(r"([^\[\]|]*)(?:\|(.*))?", re.S)
LINK = re.compile(r"\[\[([^\[\]|]*)(?:\|([^\[\]]*))?\]\]")
EXTERNAL = re.compile(r"\[(?:https?|ftp)://[^\s\]\[<>]+[ \t]*([^\]\[\n]*)\]")
TAG = re.compile(r"<[^<>]*>")
EMPHASIS = re.compile(r"'{2,}")
MAX_DEPTH = 40  # brackets nested deeper than this are text: keeps the link-label work linear


def normalize_title(title: str) -> str:
    """MediaWiki's canonical title: ``_`` as space, collapsed spaces, no ``#section``, first letter upper."""
    title = title.split("#", 1)[0].replace("_", " ")
    title = " ".join(title.split())
    return title[:1].upper() + title[1:]


def remove_comments(text: str) -> str:
    """Text without ``<!-- ... -->``; an unclosed comment runs to the end of the page."""
    pieces, position = [], 0
    while True:
        start = text.find("<!--", position)
        if start < 0:
            pieces.append(text[position:])
            return " ".join(pieces)
        pieces.append(text[position:start])
        end = text.find("-->", start + 4)
        if end < 0:
            return " ".join(pieces)
        position = end + 3


def remove_blocks(text: str) -> str:
    """Text without ``<ref>...</ref>``-like blocks (``BLOCK_TAGS``); self-closed tags removed; an
    opener with no closer of its name after it is removed alone, its content kept."""
    closers: dict[str, list[tuple[int, int]]] = {}
    for match in CLOSE_TAG.finditer(text):
        closers.setdefault(match.group(1).lower(), []).append((match.start(), match.end()))
    starts = {name: [s for s, _ in spans] for name, spans in closers.items()}
    pieces, position = [], 0
    for match in OPEN_TAG.finditer(text):
        if match.start() < position:
            continue  # inside a block already removed
        pieces.append(text[position : match.start()])
        position = match.end()
        if match.group(2):  # <ref name=x/>
            continue
        name = match.group(1).lower()
        found = bisect.bisect_left(starts.get(name, []), match.end())
        if found < len(starts.get(name, [])):
            position = closers[name][found][1]
    pieces.append(text[position:])
    return CLOSE_TAG.sub(" ", " ".join(pieces))  # stray closers


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
        """Article link targets of raw wikitext (comments removed first), normalized, in order."""
        text = remove_comments(text)
        return [normalize_title(m.group(1)) for m in LINK.finditer(text) if self.is_article_link(m.group(1))]

    def strip(self, text: str) -> str:
        """Plain text of raw wikitext (see the module docstring), linear in ``len(text)``."""
        text = html.unescape(remove_comments(text))  # &nbsp; and friends are not words
        text = self.resolve_brackets(remove_blocks(text))
        text = EXTERNAL.sub(r" \1 ", text)
        text = TAG.sub(" ", text)
        text = EMPHASIS.sub("", text)
        return "\n".join(_heading_text(line) for line in text.split("\n"))

    def _link_text(self, body: str) -> str:
        match = LINK_BODY.fullmatch(body)
        if match is None or "[" in match.group(1) or not self.is_article_link(match.group(1)):
            return " "  # files (with their captions), categories, interlanguage links
        label = match.group(2)
        # no spaces around: "[[amoeboid]]s" reads "amoeboids" (MediaWiki's link trail)
        return label if label is not None else match.group(1)

    def resolve_brackets(self, text: str) -> str:
        """Templates and tables removed, links replaced by their label, innermost first, one scan."""
        pieces: list[str] = []
        stack: list[tuple[str, int]] = []  # (opener, index into pieces where its content starts)
        position = scan = 0
        closer_of = {"{{": "}}", "{|": "|}", "[[": "]]"}
        while (match := BRACKETS.search(text, scan)) is not None:
            token, scan = match.group(), match.end()
            if token == "|}" and (not stack or stack[-1][0] != "{|"):
                scan = match.start() + 1  # "{{a|}}": the "|" ends a parameter, "}}" closes the template
                continue
            pieces.append(text[position : match.start()])
            position = match.end()
            if token in closer_of:
                if len(stack) >= MAX_DEPTH:
                    pieces.append(token)
                else:
                    stack.append((token, len(pieces)))
                continue
            depth = next((i for i in range(len(stack) - 1, -1, -1) if closer_of[stack[i][0]] == token), None)
            if depth is None:
                pieces.append(token)  # a closer with nothing open: text
                continue
            opener, first = stack[depth]
            del stack[depth:]  # openers left unclosed inside go with the construct
            body = "".join(pieces[first:]) if opener == "[[" else ""
            del pieces[first:]
            pieces.append(self._link_text(body) if opener == "[[" else " ")
        pieces.append(text[position:])
        if stack:  # unclosed openers: restore them as text
            for opener, first in reversed(stack):
                pieces.insert(first, opener)
        return "".join(pieces)


def _heading_text(line: str) -> str:
    """``== Title ==`` -> ``Title`` (other lines unchanged), without a backtracking regex."""
    stripped = line.strip()
    if len(stripped) >= 2 and stripped[0] == "=" and stripped[-1] == "=":
        return stripped.strip("=").strip()
    return line


__all__ = ["MarkupStripper", "normalize_title", "remove_blocks", "remove_comments"]
