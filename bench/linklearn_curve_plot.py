"""Draw LinkLearn's held-out learning curve from the table docs/linklearn.md reports it in.

    python -m bench.linklearn_curve_plot [--doc docs/linklearn.md] [--png docs/img/linklearn_curve.png]

Reads the table whose header starts ``| training links | anchors |`` (the rows ``bench/linklearn_curve.py
... --val-fraction 0.2 --max-train-links N`` measured) and draws the classic-like mean and the mean
of six held-out MAP / BM25 against the number of training links (log x), the untrained start (the
``0`` row) as a dashed line of the same colour, and rows measured with another split (a row whose
first cell names a split, e.g. ``17,306 (50/50 split, all)``) as unconnected squares. Rows without
figures (``not measured``) are left out and counted. If the page also has the table whose header
starts ``| training links (seeds`` (the same points with other seeds: each cell ``a; b; c``, one
value per seed; the first number in the first cell is the seed-0 row's links; the start's row is
left out), the lines are the mean over the seeds, the range over them is shaded and the seed-0 rows
are drawn as points. The page's tables are the one
source: the figure cannot disagree with them.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from rankers.plots import curve_plot

HEADER = "| training links | anchors |"
SEEDS_HEADER = "| training links (seeds"
MEASURES = ("classic-like mean", "mean of six")


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def table(markdown: str, header: str) -> tuple[list[str], list[list[str]]] | None:
    """The column names and the body rows' cells of the first table whose header starts ``header``."""
    lines = markdown.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(header)), None)
    if start is None:
        return None
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(cells(line))
    return cells(lines[start]), rows


def column(names: list[str], measure: str, header: str, *, seeds: bool = False) -> int:
    """Where ``measure``'s column is (its per-seed column with ``seeds``), or a ValueError naming the table."""
    for i, name in enumerate(names):
        if (name.startswith(measure) and "seeds" in name) if seeds else name == measure:
            return i
    raise ValueError(f"the table headed {header!r} has no {measure!r} column{' (seeds ...)' if seeds else ''}")


def curve_rows(markdown: str) -> tuple[list[tuple[int, str, dict[str, float]]], int]:
    """The table's measured rows ``(training links, note, {measure: MAP / BM25})`` and the number of
    rows left out for want of figures.

    Example:
        >>> table = '''text
        ... | training links | anchors | classic-like mean | mean of six |
        ... |---:|---:|---:|---:|
        ... | 0 (the start) | | 1.08 | 1.07 |
        ... | 1,000 | 1,153 | 1.09 | 1.08 |
        ... | 30,000 | | not measured | |
        ...
        ... after'''
        >>> rows, skipped = curve_rows(table)
        >>> rows[0]
        (0, 'the start', {'classic-like mean': 1.08, 'mean of six': 1.07})
        >>> [links for links, _, _ in rows], skipped
        ([0, 1000], 1)
    """
    found = table(markdown, HEADER)
    if found is None:
        raise ValueError(f"no table with a header starting {HEADER!r}")
    names, body = found
    columns = [column(names, measure, HEADER) for measure in MEASURES]
    rows, skipped = [], 0
    for row in body:
        match = re.match(r"([\d,]+)\s*(?:\((.*)\))?$", row[0])
        try:
            values = {measure: float(row[column]) for measure, column in zip(MEASURES, columns)}
        except (ValueError, IndexError):
            values = None
        if match is None or values is None:
            skipped += 1
            continue
        rows.append((int(match.group(1).replace(",", "")), match.group(2) or "", values))
    return rows, skipped


def seed_values(markdown: str) -> dict[str, dict[int, list[float]]]:
    """``{measure: {training links: [value per seed]}}`` from the seeds table ({} without one); the
    start's row (0 links, the same for every seed) is left out.

    Example:
        >>> table = '''
        ... | training links (seeds 0; 1) | classic-like mean (seeds 0; 1) | mean | mean of six (seeds 0; 1) |
        ... |---|---|---|---|
        ... | 1,000 | 1.0942; 1.0858 | 1.0900 | 1.0843; 1.0758 |
        ... | 0 (the start) | 1.0817 | 1.0817 | 1.0753 |
        ... | all: 41,805; 41,890 | 1.0969; 1.0881 | 1.0925 | 1.0836; 1.0790 |'''
        >>> seed_values(table)["classic-like mean"]
        {1000: [1.0942, 1.0858], 41805: [1.0969, 1.0881]}
    """
    found = table(markdown, SEEDS_HEADER)
    if found is None:
        return {}
    names, body = found
    columns = {m: column(names, m, SEEDS_HEADER, seeds=True) for m in MEASURES}
    values: dict[str, dict[int, list[float]]] = {m: {} for m in MEASURES}
    for row in body:
        number = re.search(r"\d[\d,]*", row[0])
        if number is None:
            raise ValueError(f"the table headed {SEEDS_HEADER!r}: row {row[0]!r} names no number of training links")
        links = int(number.group(0).replace(",", ""))
        if links == 0:  # the start: one value, drawn as its level
            continue
        for measure, at in columns.items():
            try:
                values[measure][links] = [float(value) for value in row[at].split(";")]
            except (ValueError, IndexError):
                cell = row[at] if at < len(row) else ""
                raise ValueError(
                    f"the table headed {SEEDS_HEADER!r}: row {row[0]!r} has {cell!r} for {measure!r}, not a; b; ..."
                ) from None
    return values


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parents[1]
    parser.add_argument("--doc", type=Path, default=root / "docs" / "linklearn.md")
    parser.add_argument("--png", type=Path, default=root / "docs" / "img" / "linklearn_curve.png")
    args = parser.parse_args(argv)
    page = args.doc.read_text()
    rows, skipped = curve_rows(page)
    starts = [values for links, _, values in rows if links == 0]
    curve = [(links, values) for links, note, values in rows if links > 0 and "split" not in note]
    other = [(links, note, values) for links, note, values in rows if links > 0 and "split" in note]
    seed_0 = {f"{m} (80/20 split, seed 0)": {links: values[m] for links, values in curve} for m in MEASURES}
    levels = {f"{m}, untrained start": starts[0][m] for m in MEASURES} if starts else None
    split_note = ", ".join(note for _, note, _ in other)
    marks = {f"{m} ({split_note})": {links: values[m] for links, _, values in other} for m in MEASURES} if other else {}
    seeds = seed_values(page)
    if seeds and any(seeds[MEASURES[0]].values()):  # the mean over the seeds is the line, seed 0 points beside it
        n_seeds = len(next(iter(seeds[MEASURES[0]].values())))
        series = {f"{m}, mean of {n_seeds} seeds": {x: sum(v) / len(v) for x, v in seeds[m].items()} for m in MEASURES}
        marks = {**seed_0, **marks}
        bands = {f"{m}, range over seeds": {x: (min(v), max(v)) for x, v in seeds[m].items()} for m in MEASURES}
    else:
        series, bands, marks = seed_0, None, marks or None
    title = (
        "LinkLearn on wikispeedia_train: held-out MAP / BM25 after two epochs\n"
        "(means over the self-made held-out sets, docs/linklearn.md)"
    )
    path = curve_plot(
        series,
        args.png,
        title=title,
        levels=levels,
        marks=marks,
        bands=bands,
        xlabel="training links (log scale)",
        ylabel="held-out MAP / BM25",
    )
    print(f"{len(rows)} rows ({skipped} without figures left out); plot: {path}")


if __name__ == "__main__":
    main()
