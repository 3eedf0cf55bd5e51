"""rankers.plots: the PNGs of experiment tables and benchmarks draw what they are given."""

from __future__ import annotations

import pytest

from rankers.plots import curve_plot, paper_table_plot, parse_plus_minus, speed_plot, spread_bar_plot

PNG = b"\x89PNG"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0.37 ± 0.07", (0.37, 0.07)), ("0.30", (0.30, 0.0)), ("2.19 ± 0.06", (2.19, 0.06)), ("-", None), (None, None)],
)
def test_the_papers_figures_are_parsed(text, expected):
    assert parse_plus_minus(text) == expected


def test_a_table_plot_draws_ours_and_the_papers_rows(tmp_path):
    table = {"PRank": {"mean": 0.24, "ci95": 0.03, "paper": "0.37 ± 0.07"}, "WH": {"mean": 0.3, "ci95": 0.01}}
    path = paper_table_plot(table, tmp_path / "sub" / "t.png", title="t")
    assert path == tmp_path / "sub" / "t.png" and path.read_bytes().startswith(PNG)


def test_a_spread_plot_skips_empty_rows_and_draws_single_runs(tmp_path):
    path = spread_bar_plot({"a": [0.8, 0.82, 0.79], "b": [0.7], "c": []}, tmp_path / "s.png", title="s")
    assert path.read_bytes().startswith(PNG)


def test_a_speed_plot_draws_lines(tmp_path):
    path = speed_plot({"ours": {512: 2.0, 64: 0.5}, "reference": {64: 1.0, 512: 30.0}}, tmp_path / "v.png", title="v")
    assert path.read_bytes().startswith(PNG)


def test_a_curve_plot_draws_lines_levels_and_marks(tmp_path):
    path = curve_plot(
        {"mean": {1000: 1.09, 10: 1.05}, "other": {}},
        tmp_path / "c.png",
        title="c",
        levels={"start": 1.08},
        marks={"another split": {500: 1.1}},
        bands={"seeds": {10: (1.04, 1.06), 1000: (1.08, 1.1)}},
    )
    assert path.read_bytes().startswith(PNG)


def test_nothing_to_draw_writes_nothing(tmp_path):
    assert paper_table_plot({}, tmp_path / "a.png", title="") is None
    assert spread_bar_plot({"a": []}, tmp_path / "b.png", title="") is None
    assert speed_plot({"a": {}}, tmp_path / "c.png", title="") is None
    assert curve_plot({"a": {}}, tmp_path / "d.png", title="", levels={"start": 1.0}) is None
    assert not list(tmp_path.iterdir())
