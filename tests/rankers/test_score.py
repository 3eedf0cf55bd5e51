"""Scoring a LETOR file with an exported scorer into a TREC run file that trec_eval reads."""

from __future__ import annotations

import pytest
import torch

from datamodules.letor_io import read_doc_ids, read_letor
from datamodules.normalization import FeatureNormalizer
from rankers.export import export_scorer
from rankers.score import main as score_main
from rankers.scorers import LinearScorer

pytrec_eval = pytest.importorskip("pytrec_eval")


def test_run_file_ranks_by_exported_scores(tmp_path):
    letor = tmp_path / "test.txt"
    letor.write_text(
        "2 qid:1 1:3 # docid = a\n0 qid:1 1:1 # docid = b\n1 qid:1 1:2 # docid = c\n"
        "0 qid:2 1:5 # docid = d\n1 qid:2 1:-1 # docid = e\n"
    )
    scorer = LinearScorer(1)
    with torch.no_grad():
        scorer.linear.weight.fill_(1.0)
        scorer.linear.bias.zero_()
    export = export_scorer(FeatureNormalizer("none", num_features=1), scorer, tmp_path / "export", 1)
    run = tmp_path / "run.txt"
    score_main(["--scorer", export["torchscript"], "--input", str(letor), "--output", str(run), "--tag", "t"])
    lines = run.read_text().split("\n")
    assert lines[0] == "1 Q0 a 1 3.000000 t" and lines[2] == "1 Q0 b 3 1.000000 t"
    data, ids = read_letor(letor), read_doc_ids(letor)
    qrels = {}
    for qid, doc, label in zip(data.qids, ids, data.labels, strict=True):
        qrels.setdefault(str(qid), {})[doc] = int(label)
    parsed = {}
    for line in filter(None, lines):
        qid, _, doc, _, score, _ = line.split()
        parsed.setdefault(qid, {})[doc] = float(score)
    result = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(parsed)
    assert result["1"]["recip_rank"] == 1.0 and result["2"]["recip_rank"] == 0.5
