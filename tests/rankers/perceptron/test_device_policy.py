"""Where each perceptron family's hot loop runs on a GPU machine (the measured policies; no GPU needed)."""

from __future__ import annotations

import pytest
import torch

from rankers.pairwise_perceptron.module import PairwisePerceptronModule
from rankers.perceptron.ensemble import TRITON_MIN_PERCEPTRONS, stream_device
from rankers.perceptron.module import OnlineOrdinalModule

CUDA, CPU = torch.device("cuda"), torch.device("cpu")


@pytest.mark.parametrize(
    ("runs", "perceptrons", "history", "expected"),
    [
        (60, 100, False, "cuda"),  # Table 1's OAP tensor: the Triton kernel, 10x the C++ one on the H200
        (20, 100, False, "cuda"),  # exactly the threshold
        (1, 100, False, "cpu"),  # one OAP run: not measured faster on CUDA
        (20, 1, True, "cpu"),  # PRank / PRank-VP: CUDA's tensor path took 18.5 s on the H200
        (60, 100, True, "cpu"),  # a voted history needs the tensor path on CUDA
    ],
)
def test_streams_go_to_cuda_only_for_many_perceptrons_without_history(runs, perceptrons, history, expected):
    assert stream_device(CUDA, n_runs=runs, n_perceptrons=perceptrons, keep_history=history).type == expected
    assert stream_device(CPU, n_runs=runs, n_perceptrons=perceptrons, keep_history=history).type == "cpu"
    assert (runs * perceptrons >= TRITON_MIN_PERCEPTRONS and not history) == (expected == "cuda")


@pytest.mark.parametrize("algorithm", ["prank", "prank_vp", "oap_bpm", "widrow_hoff"])
def test_one_online_run_streams_on_the_cpu(algorithm):
    module = OnlineOrdinalModule(n_features=4, n_ranks=5, algorithm=algorithm, n_perceptrons=100)
    assert module.device_policy(CUDA) == CPU


def test_the_pairwise_perceptrons_train_on_the_cpu():
    module = PairwisePerceptronModule(n_features=4, variant="committee", n_runs=16)
    assert module.device_policy(CUDA) == CPU
