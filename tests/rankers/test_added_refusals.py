"""Each option refusal added with the learner harness, LambdaMART and the click family, fed its bad input."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from datamodules.clicks.simulate import parse_sessions
from rankers import harness
from rankers.clicks.module import UnbiasedModule
from rankers.lambdamart.learner import LambdaMART
from rankers.pairwise_perceptron.module import PairwisePerceptronModule
from rankers.scorers import MLPScorer


@pytest.mark.parametrize("text", ["0", "5-2", "0-3"])
def test_a_session_count_outside_one_to_many_is_refused(text):
    with pytest.raises(ValueError, match="sessions must be N or LOW-HIGH"):
        parse_sessions(text)
    assert parse_sessions("100-200") == (100, 200)


def test_an_unknown_click_loss_is_refused():
    with pytest.raises(ValueError, match=r"model\.click_loss must be one of"):
        UnbiasedModule(partial(MLPScorer, hidden=[4]), partial(torch.optim.Adam), click_loss="pointwise", n_features=3)


def test_lambdamart_refuses_a_gain_the_engines_do_not_have():
    with pytest.raises(ValueError, match=r"model\.gain must be exp2 or linear"):
        LambdaMART(n_features=3, gain="cubic")


def test_the_pairwise_perceptron_refuses_a_monitor_it_does_not_compute():
    with pytest.raises(ValueError, match=r"monitor must be val/<one of"):
        PairwisePerceptronModule(n_features=3, monitor="val/auc")


def test_a_loader_that_mixes_query_batches_and_stream_slices_is_refused():
    queries = {
        "features": torch.zeros(1, 2, 3),
        "labels": torch.zeros(1, 2),
        "mask": torch.ones(1, 2, dtype=torch.bool),
    }
    stream = {"features": torch.zeros(2, 3), "labels": torch.zeros(2)}
    with pytest.raises(ValueError, match=r"a loader mixes batch kinds \['queries', 'stream'\]"):
        harness.collect_split([queries, stream])
