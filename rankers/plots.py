"""PNG figures for experiment tables and benchmarks (matplotlib, Agg backend: no display needed).

Four shapes, each a pure function of plain Python data that writes one PNG and returns its path
(None when matplotlib is missing: a figure never fails a run or a benchmark that measured):

- :func:`paper_table_plot`: a paper's table reproduced, ours with its 95% interval beside the
  paper's figure (``"0.37 ± 0.07"`` strings, parsed; rows without one show ours alone);
- :func:`spread_bar_plot`: one bar per model, its mean over folds or runs, every run as a dot and
  the standard deviation as an error bar (``bench/letor_peers.py --plot``);
- :func:`speed_plot`: milliseconds against list length, one line per implementation, log-log
  (``bench/losses.py --plot``);
- :func:`curve_plot`: a measure against a log x (a learning curve), one line per series, with
  reference levels as dashed horizontal lines (``bench/linklearn_curve_plot.py``).

Styling follows ``rankers/report.py``: default colours, 90 dpi, titles that say what and where.
"""

from __future__ import annotations

import logging
import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rankers.outputs import save_figure

log = logging.getLogger(__name__)

_PLUS_MINUS = re.compile(r"^\s*([-+0-9.eE]+)\s*(?:±\s*([-+0-9.eE]+))?\s*$")


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        log.info("no plot: matplotlib is not installed")
        return None
    return plt


def parse_plus_minus(text: str | None) -> tuple[float, float] | None:
    """``"0.37 ± 0.07"`` -> ``(0.37, 0.07)``; ``"0.30"`` -> ``(0.30, 0.0)``; anything else -> None.

    Example:
        >>> parse_plus_minus("0.37 ± 0.07")
        (0.37, 0.07)
        >>> parse_plus_minus("-") is None
        True
    """
    match = _PLUS_MINUS.match(text or "")
    if not match:
        return None
    try:
        return float(match.group(1)), float(match.group(2) or 0.0)
    except ValueError:
        return None


def paper_table_plot(
    table: Mapping[str, Mapping[str, Any]], path: str | Path, *, title: str, xlabel: str = "test rank loss"
) -> Path | None:
    """Draw a reproduced table: per row, ours (``mean`` ± ``ci95``) and the paper's (``paper``).

    Args:
        table: ``{row: {"mean": float, "ci95": float, "paper": "m ± h" | None}}`` in display order
            (``results.json["table1"]`` of ``experiment=harrington2003``, ``["table"]`` of Table 2).
        path: the PNG to write (its folder is created).
        title: the figure's title (say the data and the number of trials).
        xlabel: the measure.

    Returns:
        ``path``, or None without matplotlib or rows.
    """
    plt = _pyplot()
    rows = list(table)
    if plt is None or not rows:
        return None
    figure, axes = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.4))
    positions = list(range(len(rows)))[::-1]  # first row on top
    ours = [float(table[r]["mean"]) for r in rows]
    half = [float(table[r].get("ci95") or 0.0) for r in rows]
    axes.errorbar(ours, positions, xerr=half, fmt="o", capsize=3, label="ours (95% interval)")
    paper = [parse_plus_minus(table[r].get("paper")) for r in rows]
    shown = [(p, y) for p, y in zip(paper, positions, strict=True) if p is not None]
    if shown:
        axes.errorbar(
            [p[0] for p, _ in shown],
            [y - 0.25 for _, y in shown],
            xerr=[p[1] for p, _ in shown],
            fmt="s",
            capsize=3,
            color="tab:orange",
            label="paper",
        )
    axes.set_yticks(positions, rows, fontsize=8)
    axes.set_xlabel(xlabel)
    axes.grid(axis="x", alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    _title(axes, title)
    return _save(figure, plt, path)


def spread_bar_plot(
    runs: Mapping[str, Sequence[float]], path: str | Path, *, title: str, ylabel: str = "ndcg@10"
) -> Path | None:
    """One bar per row (the mean of its runs), every run as a dot, ± one standard deviation.

    Args:
        runs: ``{row: [figure of each fold or run]}`` in display order; rows without runs are skipped.
        path: the PNG to write (its folder is created).
        title: the figure's title (say the data, the folds and the seeds).
        ylabel: the measure.

    Returns:
        ``path``, or None without matplotlib or runs.
    """
    plt = _pyplot()
    rows = [name for name, values in runs.items() if len(values)]
    if plt is None or not rows:
        return None
    figure, axes = plt.subplots(figsize=(max(5.0, 0.8 * len(rows) + 2), 4))
    means = [sum(runs[r]) / len(runs[r]) for r in rows]
    spread = [_std(runs[r]) for r in rows]
    bars = axes.bar(range(len(rows)), means, yerr=spread, capsize=4, alpha=0.6)
    axes.bar_label(bars, fmt="%.3f", fontsize=7, label_type="center")
    for i, row in enumerate(rows):
        values = list(runs[row])
        offsets = [(j - (len(values) - 1) / 2) * 0.08 for j in range(len(values))]
        axes.plot([i + o for o in offsets], values, "k.", markersize=4)
    low = min(min(runs[r]) for r in rows)
    high = max(max(runs[r]) for r in rows)
    margin = max(0.01, (high - low) * 0.3)
    axes.set_ylim(low - margin, high + margin)
    axes.set_xticks(range(len(rows)), rows, rotation=30, ha="right", fontsize=8)
    axes.set_ylabel(ylabel)
    axes.grid(axis="y", alpha=0.3)
    _title(axes, title)
    return _save(figure, plt, path)


def speed_plot(
    series: Mapping[str, Mapping[int, float]],
    path: str | Path,
    *,
    title: str,
    xlabel: str = "list length L",
    ylabel: str = "forward + backward ms",
) -> Path | None:
    """Log-log lines: ``{name: {x: milliseconds}}``, one line per implementation.

    Returns:
        ``path``, or None without matplotlib or points.
    """
    plt, lines = _pyplot(), _sorted_lines(series)
    if plt is None or not lines:
        return None
    figure, axes = plt.subplots(figsize=(7, 4))
    for name, points in lines.items():
        axes.plot(list(points), list(points.values()), marker="o", label=name)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    _label_axes(axes, xlabel, ylabel)
    axes.legend(fontsize=8)
    _title(axes, title)
    return _save(figure, plt, path)


def curve_plot(
    series: Mapping[str, Mapping[float, float]],
    path: str | Path,
    *,
    title: str,
    levels: Mapping[str, float] | None = None,
    marks: Mapping[str, Mapping[float, float]] | None = None,
    bands: Mapping[str, Mapping[float, tuple[float, float]]] | None = None,
    xlabel: str = "training examples",
    ylabel: str = "measure",
) -> Path | None:
    """Lines against a log x: ``{name: {x: y}}`` (x > 0); ``levels`` ``{name: y}`` as dashed
    horizontal lines (an untrained start, a baseline), ``marks`` ``{name: {x: y}}`` as unconnected
    points (single runs, points measured another way: squares, then diamonds for a second set of as
    many as there are lines, ...), ``bands`` ``{name: {x: (low, high)}}`` as shaded ranges (the spread
    over seeds). The i-th level, mark or band takes the colour of line ``i mod len(series)``, so every
    line is read against its own reference and its own noise.

    Returns:
        ``path``, or None without matplotlib or points.
    """
    plt, lines = _pyplot(), _sorted_lines(series)
    if plt is None or not lines:
        return None
    figure, axes = plt.subplots(figsize=(10, 4))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    def colour(i: int) -> str:  # the i-th line's colour, and the i-th reference's: line i mod the lines
        return colours[i % len(lines) % len(colours)]

    for i, (name, points) in enumerate(lines.items()):
        axes.plot(list(points), list(points.values()), marker="o", color=colour(i), label=name)
    for i, (name, level) in enumerate((levels or {}).items()):
        axes.axhline(level, linestyle="--", linewidth=1, color=colour(i), label=name)
    for i, (name, ranges) in enumerate((bands or {}).items()):
        ranges = dict(sorted(ranges.items()))
        if not ranges:
            continue
        low, high = zip(*ranges.values())
        axes.fill_between(list(ranges), low, high, alpha=0.15, color=colour(i), label=name)
    for i, (name, points) in enumerate((marks or {}).items()):
        marker = "sD^v"[i // len(lines) % 4]  # a new marker for each further set of points
        axes.plot(list(points), list(points.values()), marker, fillstyle="none", color=colour(i), label=name)
    axes.set_xscale("log")
    _label_axes(axes, xlabel, ylabel)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside: bands fill the axes
    _title(axes, title, width=80)
    return _save(figure, plt, path)


def _sorted_lines(series: Mapping[str, Mapping[float, float]]) -> dict[str, dict[float, float]]:
    """Each non-empty series with its points in x order."""
    return {name: dict(sorted(points.items())) for name, points in series.items() if points}


def _label_axes(axes, xlabel: str, ylabel: str) -> None:
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(alpha=0.3, which="both")


def _std(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _title(axes, title: str, width: int = 90) -> None:
    """A long title (commands, machine) wrapped instead of cut at the figure's edge."""
    axes.set_title("\n".join(textwrap.fill(line, width) for line in title.splitlines()), fontsize=9)


def _save(figure, plt, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    save_figure(figure, path, "plot", dpi=90)
    plt.close(figure)
    return path
