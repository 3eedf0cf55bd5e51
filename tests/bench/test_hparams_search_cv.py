"""bench/hparams_search_cv.py: the queries its folds are made of."""

from __future__ import annotations

import importlib.util

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("hparams_search_cv", ROOT / "bench/hparams_search_cv.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_queries_come_from_qid_or_from_lightgbm_group_sizes(tmp_path):
    plain = tmp_path / "rank.train"
    plain.write_text("1 1:0.5 2:1\n0 1:0.1\n2 2:3\n\n")
    sizes = tmp_path / "rank.train.query"
    sizes.write_text("2\n1\n")
    assert bench.read_queries(plain, sizes) == [["1 qid:1 1:0.5 2:1", "0 qid:1 1:0.1"], ["2 qid:2 2:3"]]
    with_qid = tmp_path / "train.txt"
    with_qid.write_text("1 qid:7 1:1\n0 qid:3 1:2\n2 qid:7 1:3\n")
    assert bench.read_queries(with_qid, None) == [["1 qid:7 1:1", "2 qid:7 1:3"], ["0 qid:3 1:2"]]
