"""The RankLib runner of the benchmarks: a clear exit without java or the jar, and its model reader."""

from __future__ import annotations

import pytest

from bench import ranklib


def test_without_java_or_the_jar_it_exits_saying_what_is_missing(monkeypatch, tmp_path):
    jar = tmp_path / "RankLib.jar"
    jar.write_bytes(b"")
    monkeypatch.setattr(ranklib.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match="java runtime and its jar"):
        ranklib.java_or_exit(str(jar))
    monkeypatch.setattr(ranklib.shutil, "which", lambda name: "/usr/bin/java")
    with pytest.raises(SystemExit, match="java runtime and its jar"):
        ranklib.java_or_exit(str(tmp_path / "missing.jar"))
    assert ranklib.java_or_exit(str(jar)) == "/usr/bin/java"


def test_a_saved_rankboost_model_reads_as_zero_based_rounds():
    model = "## RankBoost\n## Iteration = 2\n37:0.5000000000000001:0.156 152:0.8:0.1425\n"
    assert ranklib.rankboost_ensemble(model) == [(36, 0.5000000000000001, 0.156), (151, 0.8, 0.1425)]
