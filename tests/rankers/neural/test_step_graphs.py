"""The step runner behind ``model.step_graphs``: the steps it takes are Lightning's steps (CPU, eagerly),
and on CUDA a replayed graph takes the same step as the eager code."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

from datamodules.batching import DeviceBatches, QueryBatchSampler
from losses import lambdarank_loss
from rankers.neural.step_graphs import StepRunner, make_capturable
from rankers.scorers import MLPScorer
from tests.conftest import cuda_only


def batches(count: int, shape=(4, 16, 5), device="cpu", seed=0):
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        features = torch.randn(*shape, generator=generator)
        labels = torch.randint(0, 4, shape[:2], generator=generator).float()
        lengths = torch.randint(1, shape[1] + 1, (shape[0],), generator=generator)
        mask = torch.arange(shape[1]) < lengths[:, None]
        out.append(tuple(t.to(device) for t in (features, labels, mask)))
    return out


def loss_of(scorer):
    def loss_fn(features, labels, mask):
        return lambdarank_loss(scorer(features), labels, mask, k=10)

    return loss_fn


def scorer_and_loss(seed=0, device="cpu"):
    torch.manual_seed(seed)
    scorer = MLPScorer(n_features=5, hidden=(16, 8), dropout=0.0, norm="none").to(device)
    return scorer, loss_of(scorer)


def runner_for(scorer, loss_fn, graphs: bool, device: str, **options) -> StepRunner:
    optimizer = torch.optim.Adam(scorer.parameters(), lr=0.01, fused=device == "cuda")
    if device == "cuda":
        make_capturable(optimizer)
    return StepRunner(loss_fn, optimizer, list(scorer.parameters()), graphs=graphs, **options)


def test_eager_steps_are_a_plain_training_loop():
    scorer, loss_fn = scorer_and_loss()
    reference = copy.deepcopy(scorer)
    runner = runner_for(scorer, loss_fn, graphs=True, device="cpu")  # graphs need CUDA: eager here
    optimizer = torch.optim.Adam(reference.parameters(), lr=0.01)
    for features, labels, mask in batches(4):
        loss = runner.step(features, labels, mask)
        optimizer.zero_grad()
        expected = lambdarank_loss(reference(features), labels, mask, k=10)
        expected.backward()
        optimizer.step()
        assert torch.equal(loss, expected.detach()) and not loss.requires_grad
    for ours, theirs in zip(scorer.parameters(), reference.parameters(), strict=True):
        assert torch.equal(ours, theirs)
    assert runner.captures == 0


def test_make_capturable_sets_the_option_or_refuses():
    params = [torch.nn.Parameter(torch.zeros(2))]
    adam = torch.optim.Adam(params)
    make_capturable(adam)
    assert adam.param_groups[0]["capturable"] and adam.defaults["capturable"]
    make_capturable(torch.optim.SGD(params, lr=0.1))  # no step counter: captured as it is
    with pytest.raises(ValueError, match="Adagrad"):
        make_capturable(torch.optim.Adagrad(params))


@pytest.mark.parametrize("group", [1, 3, 4])
def test_device_batches_in_lists_are_the_same_batches_in_the_same_order(group):
    lengths = np.array([5, 3, 8, 2, 7, 6, 4, 1, 9, 3])
    offsets = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]))
    features = torch.randn(int(lengths.sum()), 3)
    labels = torch.randint(0, 3, (int(lengths.sum()),)).float()

    def loader(steps):
        sampler = QueryBatchSampler(lengths, 2, shuffle=True, bucket=True, seed=1, with_seeds=True)
        return DeviceBatches(features, labels, offsets, sampler, None, lambda: 0, 1, steps_per_batch=steps)

    plain = list(loader(1))
    grouped = loader(group)
    items = list(grouped)
    assert len(grouped) == len(items) == -(-len(plain) // group)
    flat = items if group == 1 else [batch for item in items for batch in item]
    assert group == 1 or all(isinstance(item, list) and len(item) <= group for item in items)
    assert len(flat) == len(plain)
    for ours, theirs in zip(flat, plain, strict=True):
        for key in ("features", "labels", "mask", "query_index"):
            assert torch.equal(ours[key], theirs[key])


@cuda_only
@pytest.mark.parametrize("autocast", [False, True])
def test_replayed_graphs_take_the_eager_steps(autocast):
    scorer, loss_fn = scorer_and_loss(device="cuda")
    twin = copy.deepcopy(scorer)
    graphed = runner_for(scorer, loss_fn, graphs=True, device="cuda")
    eager = runner_for(twin, loss_of(twin), graphs=False, device="cuda")
    data = batches(7, device="cuda") + batches(3, shape=(2, 32, 5), device="cuda", seed=1)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        for features, labels, mask in data:
            ours, theirs = graphed.step(features, labels, mask), eager.step(features, labels, mask)
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert graphed.captures == 2  # one graph per shape, after 2 warm-up steps each
    assert graphed.replays == (7 - 2) + (3 - 2)
    for ours, theirs in zip(scorer.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


@cuda_only
def test_a_new_learning_rate_is_captured_again():
    scorer, loss_fn = scorer_and_loss(device="cuda")
    runner = runner_for(scorer, loss_fn, graphs=True, device="cuda")
    data = batches(6, device="cuda")
    for features, labels, mask in data[:4]:
        runner.step(features, labels, mask)
    runner.optimizer.param_groups[0]["lr"] = 0.001
    for features, labels, mask in data[4:]:
        runner.step(features, labels, mask)
    assert runner.captures == 2


@cuda_only
def test_a_step_that_reads_from_the_device_runs_eagerly_without_a_capture():
    scorer, loss_fn = scorer_and_loss(device="cuda")
    twin = copy.deepcopy(scorer)

    def reading_loss(features, labels, mask):  # a host read: not allowed while capturing, found by the probe
        value = loss_fn(features, labels, mask)
        return value if float(value) >= 0 else -value

    runner = runner_for(scorer, reading_loss, graphs=True, device="cuda")
    eager = runner_for(twin, loss_of(twin), graphs=False, device="cuda")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for features, labels, mask in batches(5, device="cuda"):
            torch.testing.assert_close(runner.step(features, labels, mask), eager.step(features, labels, mask))
    assert runner.captures == 0 and any("runs eagerly" in str(w.message) for w in caught)
    for ours, theirs in zip(scorer.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs)
