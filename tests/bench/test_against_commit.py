"""bench/against_commit.py: the same commit on both sides gives the same figures (a paired difference
of exactly zero), through a real worktree, real fits and both exported scorers."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from bench.against_commit import TODAY, check_imported, fit, main, paired
from datamodules.synthetic import generate_letor


def test_the_paired_difference_is_the_mean_and_standard_error_of_the_differences():
    today, then = [0.5, 0.7, 0.4], [0.4, 0.6, 0.6]
    diff = np.array(today) - np.array(then)
    expected = f"{diff.mean():+.4f} ± {diff.std(ddof=1) / np.sqrt(3):.4f} (2/3)"
    assert paired(today, then) == expected


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None or not (TODAY / ".git").exists(), reason="needs a git checkout")
def test_head_against_itself_differs_by_nothing(tmp_path, capsys):
    train = generate_letor(tmp_path, n_queries={"train": 12, "val": 2, "test": 2}, num_features=5, mean_docs=6)["train"]
    workdir, runs = tmp_path / "work", tmp_path / "runs.json"
    head = subprocess.run(["git", "-C", str(TODAY), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    made = []
    try:
        main(
            ["--commit", head, "--train", train, "--models", "listnet", "--folds", "3", "--seeds", "3",
             "--override", "trainer.max_epochs=2", "--workdir", str(workdir), "--json", str(runs)]
        )  # fmt: skip
    finally:
        made = sorted(tree.name for tree in workdir.glob("checkout-*"))
        for tree in workdir.glob("checkout-*"):
            subprocess.run(["git", "-C", str(TODAY), "worktree", "remove", "--force", str(tree)])
    figures = json.loads(runs.read_text())
    assert len(figures) == 6 and {r["version"] for r in figures} == {head, "today"}
    for then, now in zip(figures[0::2], figures[1::2], strict=True):
        assert then["fold"] == now["fold"] and then["ndcg@10"] == now["ndcg@10"]
    assert "| listnet | ndcg@10 |" in capsys.readouterr().out
    assert made == [f"checkout-{head[:12]}"]  # the worktree is named by the sha, not the revision's name


def test_fewer_than_three_folds_are_refused(tmp_path):
    with pytest.raises(SystemExit):
        main(["--commit", "HEAD", "--train", str(tmp_path / "none.txt"), "--folds", "2"])


@pytest.mark.parametrize("stdout", ["", "CODE /elsewhere\n", "CODE {repo}\nCODE /elsewhere\n"])
def test_a_fit_that_imported_other_code_is_refused(tmp_path, stdout):
    with pytest.raises(RuntimeError, match=r"not .* code"):
        check_imported(stdout.format(repo=tmp_path.resolve()), tmp_path)
    check_imported(f"Seed set\nCODE {tmp_path.resolve()}\n", tmp_path)  # its own checkout: accepted


def test_a_fit_that_fails_says_which_model_and_shows_its_error(tmp_path):
    train = generate_letor(tmp_path, n_queries={"train": 12, "val": 2, "test": 2}, num_features=5, mean_docs=6)["train"]
    files = {"train": train, "test": train}
    with pytest.raises(RuntimeError, match=r"(?s)no_such_model in .* failed:.*no_such_model"):
        fit(TODAY, "no_such_model", files, 0, tmp_path / "out", [])
