"""Every option check added with RankBoost and the pairwise perceptrons, fed its bad input."""

from __future__ import annotations

import pytest
import torch

from rankers.boosting.module import RankBoostModule
from rankers.boosting.rankboost import RankBoostLearner, candidate_thresholds, prepare
from rankers.pairwise_perceptron.module import PairwisePerceptronModule
from rankers.pairwise_perceptron.perceptron import PairwisePerceptron


def _boost_data():
    features = torch.tensor([[0.1], [0.5], [0.9], [0.3]])
    return prepare(features, torch.tensor([0.0, 1.0, 2.0, 0.0]), torch.tensor([1, 1, 1, 1]))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: candidate_thresholds(torch.rand(4, 2), None, kind="median"), "threshold kind"),
        (lambda: prepare(torch.rand(2, 1), torch.ones(2), torch.zeros(2), pair_weight="docs"), "pair_weight"),
        (lambda: RankBoostLearner(_boost_data(), alpha="line"), "alpha must be"),
        (lambda: RankBoostLearner(_boost_data(), q_def=2), "q_def must be"),
        (lambda: RankBoostModule(n_features=3, threshold_kind="median"), "model.threshold_kind"),
        (lambda: RankBoostModule(n_features=3, pair_weight="docs"), "model.pair_weight"),
        (lambda: RankBoostModule(n_features=3, alpha="line"), "model.alpha"),
        (lambda: RankBoostModule(n_features=3, rounds=0), "must be >= 1"),
        (lambda: RankBoostModule(n_features=3, monitor="val/map"), "val/ndcg@k"),
    ],
)
def test_rankboost_names_the_bad_option(build, message):
    with pytest.raises(ValueError, match=message):
        build()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: PairwisePerceptron(3, fused="gpu"), "fused must be"),
        (lambda: PairwisePerceptron(3, committee_size=0), "committee_size"),
        (lambda: PairwisePerceptron(3, committee_size=[1, 2, 3], n_runs=2), "committee_size"),
        (lambda: PairwisePerceptron(3).partial_fit(torch.zeros(1, 4, 2), torch.ones(1, 4)), "expected differences"),
        (lambda: PairwisePerceptron(3).partial_fit(torch.zeros(1, 4, 3), torch.ones(1, 5)), "expected eta"),
        (lambda: PairwisePerceptron(3).linear_weights("vote"), "linear_weights combines"),
        (lambda: PairwisePerceptronModule("perfect", n_features=3), "variant must be"),
        (lambda: PairwisePerceptronModule(n_features=3, combine="sum"), "combine must be"),
        # refused even with feature_map=none, where it would otherwise go unread
        (lambda: PairwisePerceptronModule(n_features=3, raw_columns="ranks"), "raw_columns must be one of"),
        (lambda: PairwisePerceptronModule(n_features=3, epochs=0), "must be >= 1"),
        (lambda: PairwisePerceptronModule(n_features=3, monitor="val/auc"), "monitor must be"),
    ],
)
def test_pairwise_perceptron_names_the_bad_option(build, message):
    with pytest.raises(ValueError, match=message):
        build()
