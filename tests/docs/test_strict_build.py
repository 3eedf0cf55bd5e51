"""CI's docs build can fail: ``--strict`` without ``--quiet`` (which hides the warnings strict
counts), and links to anchors are validated."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_ci_builds_the_docs_strictly_and_shows_the_warnings():
    builds = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if "mkdocs build" in line]
    assert builds, ".ci/run does not build the docs"
    for line in builds:
        words = line.split()
        assert "--strict" in words and not {"--quiet", "-q"} & set(words), line


def test_the_site_validates_links_to_pages_and_anchors():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)  # !!python tags left unread
    assert config["strict"] == "true"
    assert config["validation"]["anchors"] == "warn" and config["validation"]["unrecognized_links"] == "warn"
