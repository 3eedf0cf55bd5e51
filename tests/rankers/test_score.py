"""Scoring a LETOR file with an exported scorer into a TREC run file that trec_eval reads."""

from __future__ import annotations

import pytest
import torch

from datamodules.letor_io import read_doc_ids, read_letor
from datamodules.normalization import FeatureNormalizer
from rankers.export import export_scorer
from rankers.score import ScorerFormatError, load_scorer, score_file
from rankers.score import main as score_main
from rankers.scorers import LinearScorer

pytrec_eval = pytest.importorskip("pytrec_eval")


@pytest.mark.parametrize("scorer_format", ["torchscript", "onnx"])
def test_run_file_ranks_by_exported_scores(tmp_path, scorer_format):
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
    score_main(["--scorer", export[scorer_format], "--input", str(letor), "--output", str(run), "--tag", "t"])
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


def linear_export(tmp_path, n_features: int) -> dict[str, str]:
    scorer = LinearScorer(n_features)
    with torch.no_grad():
        scorer.linear.weight.copy_(torch.arange(1.0, n_features + 1)[None])
        scorer.linear.bias.zero_()
    return export_scorer(FeatureNormalizer("none", num_features=n_features), scorer, tmp_path / "export", n_features)


def test_a_file_with_fewer_features_than_the_scorer_is_read_as_zeros_and_says_so(tmp_path, caplog):
    export = linear_export(tmp_path, 4)
    letor = tmp_path / "narrow.txt"
    letor.write_text("1 qid:1 1:1 2:1\n0 qid:1 1:2\n")
    for path in (export["torchscript"], export["onnx"]):
        with caplog.at_level("WARNING"):
            scores, _ = score_file(path, letor)
        assert scores.tolist() == [3.0, 2.0]
        assert "largest feature index is 2 but the scorer takes 4 features; features 3..4 are read as 0" in caplog.text


def test_a_file_with_more_features_than_the_scorer_is_an_error(tmp_path):
    export = linear_export(tmp_path, 2)
    letor = tmp_path / "wide.txt"
    letor.write_text("1 qid:1 1:1 5:1\n")
    with pytest.raises(ValueError, match="feature index 5, above num_features=2"):
        score_file(export["onnx"], letor)


def test_a_scorer_in_neither_format_is_named(tmp_path):
    bogus = tmp_path / "scorer.bin"
    bogus.write_bytes(b"not a model at all")
    with pytest.raises(ScorerFormatError, match=r"neither a TorchScript scorer .* nor an ONNX scorer"):
        load_scorer(bogus)
