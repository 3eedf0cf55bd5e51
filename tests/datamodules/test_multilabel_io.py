"""Multilabel readers: MULAN ARFF + XML (dense, sparse, labels anywhere), SVMlight multilabel, top-label text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.datasets import load_svmlight_file

from datamodules.errors import DataError
from datamodules.multilabel import MultilabelDataModule, planted_label_ranking
from datamodules.multilabel_io import (
    MultilabelFormatError,
    read_arff,
    read_label_names,
    read_svmlight_multilabel,
    read_top_label,
    write_top_label,
)

MULAN = "http://mulan.sourceforge.net/labels"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "multilabel"

HEADER = """@relation r
% a comment
@attribute L1 {0,1}
@attribute x numeric
@attribute L2 {0,1}
@attribute colour {red,green,blue}
@attribute y real
@attribute L3 numeric
@data
"""
XML = """<?xml version="1.0" encoding="utf-8"?>
<labels xmlns="http://mulan.sourceforge.net/labels">
<label name="L3"></label>
<label name="L1">
<label name="L2"></label></label>
</labels>
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_labels_anywhere_dense_and_sparse_rows_nominal_one_hot(tmp_path):
    arff = write(tmp_path, "t.arff", HEADER + "1,0.5,0,green,2,1\n\n{1 1.5, 2 1, 3 blue}\n0,-1,1,red,0,0\n")
    xml = write(tmp_path, "t.xml", XML)  # L2 nested under L1: a hierarchy's inner nodes are labels too
    data = read_arff(arff, labels=xml)
    # labels in ARFF attribute order whatever the XML's order and nesting
    assert data.label_names == ["L1", "L2", "L3"]
    assert data.feature_names == ["x", "colour=red", "colour=green", "colour=blue", "y"]
    np.testing.assert_array_equal(data.labels, [[1, 0, 1], [0, 1, 0], [0, 1, 0]])
    # a sparse row's omitted nominal value is the first declared one (index 0), as liac-arff reads it
    np.testing.assert_array_equal(data.features, [[0.5, 0, 1, 0, 2], [1.5, 0, 0, 1, 0], [-1, 1, 0, 0, 0]])
    assert data.notes == {"nominal_attributes_one_hot": 1}
    assert read_label_names(xml) == ["L3", "L1", "L2"]


def test_the_last_k_attributes_without_xml(tmp_path):
    arff = write(
        tmp_path, "t.arff", "@relation r\n@attribute a numeric\n@attribute b {0,1}\n@attribute c {0,1}\n@data\n3,1,0\n"
    )
    data = read_arff(arff, n_labels=2)
    assert data.label_names == ["b", "c"] and data.features.tolist() == [[3.0]]
    with pytest.raises(MultilabelFormatError, match=r"data\.labels=X\.xml"):
        read_arff(arff)


@pytest.mark.parametrize(
    ("rows", "line", "problem"),
    [
        ("1,0.5,0,green,2,1\n0,0.5,0,green,2,2\n", 11, r"label 'L3' is 2.0, not 0 or 1"),
        ("1,0.5,0,green,2,1\n1,0.5,3,green,2,1\n", 11, "3 not found in nominal declaration"),
        ("1,0.5,0,green,2,1\n\n1,0.5,0,green,2\n", 12, "wrong number of values"),
        ("1,?,0,green,2,1\n", 10, r"feature 'x' is missing"),
    ],
)
def test_bad_rows_name_file_line_and_problem(tmp_path, rows, line, problem):
    arff = write(tmp_path, "bad.arff", HEADER + rows)
    with pytest.raises(MultilabelFormatError, match=rf"bad.arff:{line}: .*{problem}") as caught:
        read_arff(arff, labels=["L1", "L2", "L3"])
    assert isinstance(caught.value, DataError)


def test_an_xml_label_absent_from_the_arff_names_the_xml_line(tmp_path):
    arff = write(tmp_path, "t.arff", HEADER + "1,0.5,0,green,2,1\n")
    xml = write(tmp_path, "t.xml", XML.replace('name="L2"', 'name="L9"'))
    with pytest.raises(MultilabelFormatError, match=r"t.xml:5: label 'L9' is not an attribute of .*t.arff"):
        read_arff(arff, labels=xml)


def test_svmlight_multilabel_matches_sklearn(tmp_path):
    path = write(tmp_path, "t.svm", "0,3 1:0.5 4:1\n 2:2\n3 1:1 # comment\n7,0 3:-1\n")
    data, ids = read_svmlight_multilabel(path)
    x, y = load_svmlight_file(str(path), multilabel=True)
    assert ids == [0, 3, 7]
    np.testing.assert_array_equal(data.features, x.toarray())
    assert [tuple(float(ids[j]) for j in np.flatnonzero(row)) for row in data.labels] == [tuple(sorted(r)) for r in y]
    test = write(tmp_path, "test.svm", "5 1:1\n")
    with pytest.raises(MultilabelFormatError, match=r"test.svm:1: label 5 is not one of the training labels"):
        read_svmlight_multilabel(test, n_features=4, label_ids=ids)
    bad = write(tmp_path, "bad.svm", "0 1:1\n1 2:x\n")
    with pytest.raises(MultilabelFormatError, match=r"bad.svm:2: "):
        read_svmlight_multilabel(bad)


def test_top_label_text_round_trips_a_planted_model(tmp_path):
    x, y, _ = planted_label_ranking(50, 4, 5, generator=torch.Generator().manual_seed(1))
    write_top_label(tmp_path / "t.rank", x.numpy(), y.numpy())
    data = read_top_label(tmp_path / "t.rank")
    assert data.ranked and data.labels.shape == (50, 5)
    np.testing.assert_array_equal(data.labels, y.numpy())
    np.testing.assert_allclose(data.features, x.numpy(), rtol=1e-5, atol=1e-6)
    bad = write(tmp_path, "bad.rank", "1>2 1:1\n2>0>2 1:1\n")
    with pytest.raises(MultilabelFormatError, match=r"bad.rank:2: ranking '2>0>2' repeats a label"):
        read_top_label(bad)


def test_the_datamodule_reads_train_and_test_with_the_same_columns(tmp_path):
    train = write(tmp_path, "train.arff", HEADER + "1,0.5,0,green,2,1\n0,1.5,1,red,4,0\n")
    other = write(
        tmp_path, "other.arff", HEADER.replace("@attribute y real", "@attribute z real") + "1,0.5,0,green,2,1\n"
    )
    module = MultilabelDataModule(train=str(train), test=str(other), labels=None, n_labels=1)
    with pytest.raises(MultilabelFormatError, match="same header"):
        module.setup()
    module = MultilabelDataModule(train=str(train), test=str(train), n_labels=1, scaling="zscore")
    module.setup()
    assert module.statistics["train"]["instances"] == 2 and module.model_inputs()["n_labels"] == 1
    scaled = module.model_inputs()["scaler"](torch.from_numpy(module.arrays("train")[0]))
    np.testing.assert_allclose(scaled.std(0, unbiased=False).numpy()[[1, 6, 5]], [1.0, 1.0, 0.0], rtol=1e-5)


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/multilabel is absent")
@pytest.mark.parametrize(("name", "shape"), [("emotions", (391, 72, 6)), ("yeast", (1500, 103, 14))])
def test_the_shared_mulan_sets_read_whole(name, shape):
    data = read_arff(SHARED / name / f"{name}-train.arff", labels=SHARED / name / f"{name}.xml")
    assert (*data.features.shape, data.n_labels) == shape
    assert set(np.unique(data.labels)) == {0.0, 1.0} and np.isfinite(data.features).all()


def test_an_escaped_quote_in_an_arff_name_matches_the_xml(tmp_path):
    """MULAN's birds: ``@attribute 'Swainson\\'s Thrush' {0,1}`` in the ARFF, ``Swainson's Thrush`` in the XML."""
    header = "@relation r\n@attribute x numeric\n@attribute 'Swainson\\'s Thrush' {0,1}\n@data\n1,1\n"
    arff = write(tmp_path, "b.arff", header)
    xml = write(tmp_path, "b.xml", f"<labels xmlns='{MULAN}'><label name=\"Swainson's Thrush\"/></labels>")
    assert read_arff(arff, labels=xml).label_names == ["Swainson's Thrush"]
