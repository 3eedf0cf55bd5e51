"""bench/linklearn_curve.py's ablations: refused when they cannot run, and what they change."""

from __future__ import annotations

import types

import pytest
import torch

from bench.linklearn_curve import main, relative_idf_corrections
from rankers.linklearn.module import TermWeight


def test_title_examples_without_cloze_are_refused_before_any_data_is_read(capsys):
    with pytest.raises(SystemExit):
        main(["--dump", "no-such-dump.xml.bz2", "--title-examples", "only"])
    assert "--title-examples needs --cloze" in capsys.readouterr().err


def test_relative_idf_feeds_the_idf_factor_idf_over_the_largest_idf():
    torch.manual_seed(0)
    weight = TermWeight(4)
    with torch.no_grad():
        weight.idf_mlp.layers[2].weight.normal_()  # a non-zero correction, so the input matters
    corpus = {
        "tf_values": torch.tensor([1.0, 2.0]),
        "idf_values": torch.tensor([0.5, 2.0, 4.0]),
        "length_values": torch.tensor([0.8, 1.2]),
        "idf": torch.tensor([4.0, 2.0, 0.5, 2.0]),
    }
    _, raw_idf, _ = weight.log_corrections(corpus)
    weight.log_corrections = types.MethodType(relative_idf_corrections, weight)
    tf, idf, _ = weight.log_corrections(corpus)
    torch.testing.assert_close(idf, weight.idf_mlp.on_values(corpus["idf_values"] / 4.0))
    assert not torch.allclose(idf, raw_idf)
    torch.testing.assert_close(tf, weight.tf_mlp.on_values(torch.log1p(corpus["tf_values"])))


def test_several_collections_after_one_flag_are_accepted(capsys):
    # the docs write `--collection DIR/{a,b}`: the shell makes that one flag with several paths
    with pytest.raises(SystemExit):
        main(["--dump", "no-such-dump", "--collection", "a", "b", "--collection", "c", "--title-examples", "only"])
    err = capsys.readouterr().err
    assert "unrecognized arguments" not in err and "--title-examples needs --cloze" in err


def test_hard_negatives_reach_the_datamodule(monkeypatch):
    # the flag must configure the same data.hard_negatives the module trains with, not a copy of it
    import bench.linklearn_curve as curve

    seen = {}

    class Stop(Exception):
        pass

    def capture(paths, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(curve, "WikipediaDataModule", capture)
    with pytest.raises(Stop):
        main(["--dump", "d", "--negatives", "4", "--hard-negatives", "2", "--cloze", "1"])
    assert (seen["negatives"], seen["hard_negatives"], seen["cloze"]) == (4, 2, 1)
