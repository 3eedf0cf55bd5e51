"""The chu2005 experiments (experiments/chu2005.py) through train.py's config: a small Boston-like
table (generated here), the shared Boston file when present, refusals of missing or malformed tables,
and the spiral."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hydra.utils import get_method

from datamodules.errors import DataError
from datamodules.tabular import TableFormatError, read_numeric_table

ROOT = Path(__file__).resolve().parents[3]
BOSTON = ROOT / ".." / "shared" / "data" / "boston" / "boston_house_prices.csv"


def _table(path: Path, n: int = 60, seed: int = 0, constant: bool = True) -> Path:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4))
    if constant:
        x[:, 3] = 5.0  # a constant column: standardized to zeros, never NaN
    y = x[:, 0] - 0.5 * x[:, 1] ** 2 + 0.1 * rng.normal(size=n)
    lines = [f"{n},4,,,", "A,B,C,D,Y"] + [",".join(f"{v:.6f}" for v in (*row, t)) for row, t in zip(x, y)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(make_cfg, tmp_path, *overrides):
    cfg = make_cfg(*overrides, out=tmp_path / "run", tiny=False)
    return get_method(cfg.entry)(cfg), tmp_path / "run"


def test_boston_form_table_small_run(make_cfg, tmp_path):
    path = _table(tmp_path / "t.csv")
    _, out = _run(
        make_cfg,
        tmp_path,
        "experiment=chu2005_boston",
        f"data.path={path}",
        "chu2005_boston.trials=3",
        "chu2005_boston.queries=4",
        "chu2005_boston.pool=40",
        "chu2005_boston.strategies=[entropy,entropy_all,random]",
    )
    saved = json.loads((out / "results.json").read_text())
    assert set(saved["curve"]) == {"entropy", "entropy_all", "random"}
    assert all(len(c) == 4 and all(0 <= e <= 1 for e in c) for c in saved["curve"].values())
    assert set(saved["curves"]) == {"supervised", "semi_supervised"} and len(saved["curve_std"]["random"]) == 4
    assert (out / "boston.png").stat().st_size > 0
    assert saved["setting"]["evaluated_pairs"] == 60 * 59 // 2


def test_a_missing_table_is_refused_clearly(make_cfg, tmp_path):
    with pytest.raises(DataError, match=r"no such file.*data\.path"):
        _run(make_cfg, tmp_path, "experiment=chu2005_boston", f"data.path={tmp_path / 'absent.csv'}")


def test_a_malformed_table_is_a_data_error(make_cfg, tmp_path):
    """train.py ends a DataError with one log line and exit status 2."""
    bad = tmp_path / "bad.csv"
    bad.write_text("A,B,Y\n1,2,3\n1,x,3\n")
    with pytest.raises(DataError, match="line 3: not a number"):
        _run(make_cfg, tmp_path, "experiment=chu2005_boston", f"data.path={bad}")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("A,B,Y\n1,2\n3,4,5\n", "line 2: 2 cells"),
        ("A,B,Y\n1,2,nan\n3,4,5\n", "line 2: NaN"),
        ("3,2,,\nA,B,Y\n1,2,3\n3,4,5\n", "says 3 rows"),
    ],
)
def test_table_format_errors_name_the_line(tmp_path, text, message):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(TableFormatError, match=message):
        read_numeric_table(path)


@pytest.mark.skipif(not BOSTON.exists(), reason="../shared/data/boston is absent")
def test_the_shared_boston_file_reads_as_the_readme_says():
    features, target, names = read_numeric_table(BOSTON)
    assert features.shape == (506, 13) and names[-1] == "MEDV"
    assert target.min() == 5.0 and target.max() == 50.0


@pytest.mark.slow
@pytest.mark.skipif(not BOSTON.exists(), reason="../shared/data/boston is absent")
def test_entropy_beats_random_on_boston(make_cfg, tmp_path):
    """Figure 2's claim on the real data: the default 20 trials, 15 of the 50 queries (time)."""
    results, _ = _run(
        make_cfg,
        tmp_path,
        "experiment=chu2005_boston",
        "chu2005_boston.trials=20",
        "chu2005_boston.queries=15",
        "chu2005_boston.priors=[supervised]",
    )
    entropy, random = results["curve"]["entropy"], results["curve"]["random"]
    assert all(e < r for e, r in zip(entropy[10:], random[10:]))


def test_spiral_semi_supervised_follows_the_spiral(make_cfg, tmp_path):
    results, out = _run(make_cfg, tmp_path, "experiment=chu2005_spiral", "chu2005_spiral.grid=15")
    assert results["semi_supervised"]["spearman_along_spiral"] > 0.9
    assert results["semi_supervised"]["spearman_along_spiral"] > results["supervised"]["spearman_along_spiral"] + 0.2
    # the graph adds information: the posterior is tighter on the points
    assert results["semi_supervised"]["mean_std_points"] < results["supervised"]["mean_std_points"]
    assert (out / "spiral.png").stat().st_size > 0
