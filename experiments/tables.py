"""A reproduced table: per-trial values summarized as ``mean ± 95% Student-t interval``, their
Markdown, and its files (the tables of experiments.harrington2003, harrington2003_cf, crammer_singer2001_cf)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from experiments.results import write_results
from metrics.intervals import student_t_interval
from rankers.outputs import write_text
from rankers.plots import paper_table_plot

# results.json's reason for a cell's ci95 of null
NO_INTERVAL = "ci95: one trial, an interval needs at least two"


def interval_row(values: torch.Tensor, **extra: Any) -> dict[str, Any]:
    """A table row of per-trial values ``[R]``: ``{"mean", "ci95", "per_trial", **extra}``, and
    ``"absent"`` saying why ``ci95`` is None (one trial)."""
    values = values.detach().cpu()
    mean, half = student_t_interval(values)
    row = {"mean": mean, "ci95": half, "per_trial": values.tolist(), **extra}
    return row | ({"absent": NO_INTERVAL} if half is None else {})


def mean_and_interval(row: dict[str, Any]) -> str:
    """``"0.312 ± 0.020"``, or ``"0.312 (one trial)"`` when there is no interval."""
    return f"{row['mean']:.3f} ± {row['ci95']:.3f}" if row.get("ci95") is not None else f"{row['mean']:.3f} (one trial)"


def write_table(
    out_dir: str | Path | None, results: dict[str, Any], stem: str, markdown: str, table: dict[str, Any], title: str
) -> None:
    """A reproduced table's files in ``out_dir`` (nothing when None): ``results.json``, the Markdown
    as ``<stem>.md`` and ``table``'s rows beside the paper's as ``<stem>.png`` (rankers.plots)."""
    files = {
        f"{stem}.md": lambda path: write_text(path, markdown, "table"),
        f"{stem}.png": lambda path: paper_table_plot(table, path, title=title),
    }
    write_results(out_dir, results, files)
