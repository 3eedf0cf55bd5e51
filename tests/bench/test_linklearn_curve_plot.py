"""bench/linklearn_curve_plot.py: the learning-curve figure reads the page's table and draws what it holds."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

import bench.linklearn_curve_plot as curve_plot_module
from bench.linklearn_curve_plot import curve_rows, main, seed_values

PNG = b"\x89PNG"
TABLE = """## Curve

| training links | anchors | wsp_links | classic-like mean | mean of six | $MLP_2$(idf 8) |
|---:|---:|---:|---:|---:|---:|
| 0 (the start) | | 1.07 | 1.0817 | 1.0753 | 1 |
| 10,000 | 2,707 | 1.08 | 1.0944 | 1.0811 | 1.59 |
| 1,000 | 1,153 | 1.08 | 1.0942 | 1.0843 | 1.31 |
| 17,306 (50/50 split, all) | 1,811 | 1.08 | 1.0950 | 1.0828 | 1.39 |
| 30,000 | | not measured | | | |

| other | table |
"""


def test_the_docstring_example_runs():
    result = doctest.testmod(curve_plot_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_rows_are_read_by_column_name_and_rows_without_figures_are_counted():
    rows, skipped = curve_rows(TABLE)
    assert skipped == 1
    assert [(links, note) for links, note, _ in rows] == [
        (0, "the start"),
        (10000, ""),
        (1000, ""),
        (17306, "50/50 split, all"),
    ]
    assert rows[1][2] == {"classic-like mean": 1.0944, "mean of six": 1.0811}


def test_a_page_without_the_table_is_refused():
    with pytest.raises(ValueError, match="training links"):
        curve_rows("| a | b |\n|---|---|\n| 1 | 2 |\n")


def test_the_figure_is_drawn_from_a_page(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text(TABLE)
    main(["--doc", str(page), "--png", str(tmp_path / "img" / "curve.png")])
    assert (tmp_path / "img" / "curve.png").read_bytes().startswith(PNG)
    assert "4 rows (1 without figures left out)" in capsys.readouterr().out


def test_the_pages_table_has_the_start_and_a_curve():
    page = Path(__file__).resolve().parents[2] / "docs" / "linklearn.md"
    rows, _ = curve_rows(page.read_text())
    links = [n for n, note, _ in rows if "split" not in note]
    assert links[0] == 0 and len(links) >= 3


SEEDS = """
| training links (seeds 0; 1; 2) | anchors | classic-like mean (seeds 0; 1; 2) | mean | mean of six (seeds 0; 1; 2) |
|---|---|---|---|---|
| 1,000 | 1,153; 1,127; 1,141 | 1.0942; 1.0858; 1.0900 | 1.0900 | 1.0843; 1.0758; 1.0797 |
| 0 (the start, every seed) | | 1.0817 | 1.0817 | 1.0753 |
| all: 41,805; 41,890; 41,700 | 2,929; 2,928; 2,930 | 1.0969; 1.0881; 1.0990 | 1.0947 | 1.0836; 1.0790; 1.0801 |
"""


def test_the_seed_values_are_read_per_row_at_the_seed_0_links_without_the_start():
    values = seed_values(TABLE + SEEDS)
    assert values["classic-like mean"] == {1000: [1.0942, 1.0858, 1.0900], 41805: [1.0969, 1.0881, 1.0990]}
    assert values["mean of six"][41805] == [1.0836, 1.0790, 1.0801]
    assert seed_values(TABLE) == {}


def test_the_figure_with_seed_ranges_is_drawn(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(TABLE + SEEDS)
    main(["--doc", str(page), "--png", str(tmp_path / "curve.png")])
    assert (tmp_path / "curve.png").read_bytes().startswith(PNG)


@pytest.mark.parametrize(
    ("page", "message"),
    [
        (TABLE.replace("| mean of six |", "| mean of 6 |"), "has no 'mean of six' column"),
        (TABLE + SEEDS.replace("classic-like mean (seeds", "classic (seeds"), "no 'classic-like mean' column"),
        (TABLE + SEEDS.replace("| 1,000 | 1,153;", "| all | 1,153;"), "row 'all' names no number"),
        (TABLE + SEEDS.replace("1.0942; 1.0858; 1.0900", ""), "has '' for 'classic-like mean'"),
    ],
)
def test_a_table_missing_a_column_or_a_figure_is_refused_by_name(page, message):
    with pytest.raises(ValueError, match=message):
        curve_rows(page)
        seed_values(page)


def test_a_page_without_the_curve_table_is_refused_by_name():
    with pytest.raises(ValueError, match="no table with a header starting"):
        curve_rows("## Curve\n\n| other | table |\n|---|---|\n| 1 | 2 |\n")


def test_a_seeds_table_holding_only_the_start_draws_the_seed_0_curve(tmp_path):
    header, rule, _, start, _ = SEEDS.strip().splitlines()
    start_only = "\n".join([header, rule, start])
    page = tmp_path / "page.md"
    page.write_text(TABLE + "\n" + start_only + "\n")
    main(["--doc", str(page), "--png", str(tmp_path / "curve.png")])
    assert (tmp_path / "curve.png").read_bytes().startswith(PNG)
