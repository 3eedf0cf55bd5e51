"""The experiments' one writer: ``results.json`` and the figures of a run, into its directory."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rankers import outputs


def write_results(
    out_dir: str | Path | None, results: Mapping[str, Any], figures: Mapping[str, Callable[[Path], None]] | None = None
) -> Path | None:
    """Write ``results`` as ``out_dir/results.json`` and draw each figure ``name -> draw(path)`` to
    ``out_dir/name`` (each draw writes atomically: rankers.outputs.save_figure); nothing when
    ``out_dir`` is None (a call from Python). Returns the JSON's path."""
    if out_dir is None:
        return None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # atomic, and a value that is not finite is null with its reason (rankers.outputs), as every results.json
    path = outputs.write_results(out / "results.json", dict(results))
    for name, draw in (figures or {}).items():
        draw(out / name)
    return path
