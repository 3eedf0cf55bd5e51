"""No NaN in any results table (issue 41, case 4): a cell that cannot be computed is null with a reason."""

from __future__ import annotations

import json
import math

import torch

from datamodules.collaborative_ratings import build_collaborative_ratings
from experiments.yu2005 import errors, tables


def _one_rating_each(path, users=400, items=60):
    """Every user rated exactly one item (ratings 1..5): the task user's one rating is its only label."""
    rows = ["user_id:token\titem_id:token\trating:float"]
    rows += [f"u{u}\ti{u % items}\t{1 + (u * 7) % 5}" for u in range(users)]
    path.write_text("\n".join(rows) + "\n")
    return path


def _no_nan(value) -> bool:
    if isinstance(value, dict):
        return all(_no_nan(v) for v in value.values())
    if isinstance(value, list):
        return all(_no_nan(v) for v in value)
    return not (isinstance(value, float) and math.isnan(value))


def test_yu2005_cells_without_a_rated_test_item_are_absent_with_the_reason(tmp_path):
    data = build_collaborative_ratings(
        _one_rating_each(tmp_path / "r.inter"), n_tasks=1, min_item_ratings=1, min_user_ratings=1, min_items=1
    )
    results = tables(data, train_sizes=(10, 50), models=("GPR", "GPOR"), trials=2, out_dir=tmp_path / "out")
    on_disk = json.loads((tmp_path / "out" / "results.json").read_text())  # strict JSON
    text = (tmp_path / "out" / "table.md").read_text()
    assert _no_nan(results) and _no_nan(on_disk) and "nan" not in text.lower()
    cells = [cell for rows in on_disk["table"].values() for cell in rows.values()]
    absent = [cell for cell in cells if cell["mae"] is None]
    assert absent, "the data leaves no rated test item at 50 training items: the case must be exercised"
    for cell in absent:
        assert cell["zero_one"] is None and cell["trials_measured"] == 0
        assert cell["absent"] == "no task user rated a test item in any of the 2 trials"
    assert "n/a: no task user rated a test item in any of the 2 trials" in text


def test_errors_of_no_rated_item_are_none_not_nan():
    labels = torch.full((2, 3), -1)
    assert errors(torch.zeros(2, 3, dtype=torch.long), labels) is None
    labels[0, 1] = 2
    assert errors(torch.full((2, 3), 1), labels) == (1.0, 1.0)


def test_one_trial_gives_no_interval_rather_than_nan(tmp_path):
    from datamodules.ratings import CrammerSingerRatings, HarringtonRatings
    from experiments.crammer_singer2001_cf import OnlineOptions, online_table
    from experiments.harrington2003_cf import Table2Options, table2
    from experiments.tables import NO_INTERVAL
    from metrics.intervals import student_t_interval
    from tests.ratings_files import ratings_file

    assert student_t_interval(torch.tensor([0.5])) == (0.5, None)
    path = ratings_file(tmp_path, seed=0)
    table2(
        HarringtonRatings(path, trials=1),
        Table2Options(n_perceptrons=4, taus=(0.3,), etas=(0.05,)),
        out_dir=tmp_path / "h",
    )
    online = CrammerSingerRatings(path, min_ratings=160, n_rounds=50, n_test=5, trials=1)
    online_table(online, OnlineOptions(etas=(0.1,)), out_dir=tmp_path / "c")
    for out, name in ((tmp_path / "h", "table2.md"), (tmp_path / "c", "online.md")):
        written = json.loads((out / "results.json").read_text())
        assert _no_nan(written) and "nan" not in (out / name).read_text().lower()
        assert "(one trial)" in (out / name).read_text()
        assert all(row["ci95"] is None and row["absent"] == NO_INTERVAL for row in written["table"].values())
