"""The experiments' one writer: ``results.json`` and the figures of a run, into its directory."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def write_results(
    out_dir: str | Path | None, results: Mapping[str, Any], figures: Mapping[str, Callable[[Path], None]] | None = None
) -> Path | None:
    """Write ``results`` as ``out_dir/results.json`` and draw each figure ``name -> draw(path)`` to
    ``out_dir/name``; nothing when ``out_dir`` is None (a call from Python). Returns the JSON's path."""
    if out_dir is None:
        return None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    path.write_text(json.dumps(results, indent=1))
    for name, draw in (figures or {}).items():
        draw(out / name)
    return path
