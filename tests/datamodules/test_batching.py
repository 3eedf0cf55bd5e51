"""Batching: padding, list sampling, batch sampler epochs, the device-resident path."""

from __future__ import annotations

import numpy as np
import torch
from lightning_fabric.utilities.data import _set_sampler_epoch
from torch.utils.data import DataLoader

from datamodules.batching import DeviceBatches, QueryBatchSampler, QueryDataset, make_collate, sample_lists
from datamodules.normalization import FeatureNormalizer


def flat_split(seed=0, n_queries=30, n_features=3):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 25, (n_queries,), generator=g)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    n = int(offsets[-1])
    labels = (torch.rand(n, generator=g) < 0.15).float() * torch.randint(1, 5, (n,), generator=g)
    return torch.randn(n, n_features, generator=g), labels, offsets


def test_sample_lists_keeps_a_relevant_document_and_list_order():
    features = torch.arange(2 * 40 * 1, dtype=torch.float32).reshape(2, 40, 1)
    labels = torch.zeros(2, 40)
    labels[0, 37] = 3.0  # a single relevant document, far down the list
    labels[1, 5] = 1.0
    mask = torch.ones(2, 40, dtype=torch.bool)
    mask[1, 30:] = False
    for seed in range(20):
        out = sample_lists(
            {"features": features, "labels": labels, "mask": mask}, 6, torch.Generator().manual_seed(seed)
        )
        assert out["features"].shape == (2, 6, 1)
        assert (out["labels"] > 0).any(1).all()  # at least one relevant kept
        positions = out["features"][..., 0] - torch.tensor([[0.0], [40.0]])
        assert (positions.diff(dim=1) > 0).all()  # original order
        assert out["mask"].all() and (positions[1] < 30).all()  # padding never chosen over real documents


def test_batch_sampler_covers_every_query_once_and_reshuffles_per_epoch():
    lengths = np.random.default_rng(0).integers(1, 50, size=103)
    sampler = QueryBatchSampler(lengths, 16, shuffle=True, bucket=True, seed=3, with_seeds=True)
    loader = DataLoader(QueryDataset(*flat_split(n_queries=103)), batch_sampler=sampler)
    orders = []
    for epoch in range(3):
        _set_sampler_epoch(loader, epoch)  # what Lightning calls each epoch
        batches = list(sampler)
        flat = [i for batch in batches for i, _ in batch]
        assert sorted(flat) == list(range(103)) and len(batches) == len(sampler)
        orders.append(flat)
    assert orders[0] != orders[1] != orders[2]
    _set_sampler_epoch(loader, 1)
    assert [i for batch in sampler for i, _ in batch] == orders[1]  # same epoch, same order


def test_bucketing_reduces_padding():
    lengths = np.random.default_rng(1).integers(1, 200, size=640)

    def padded(bucket):
        sampler = QueryBatchSampler(lengths, 32, shuffle=True, bucket=bucket, seed=0)
        return sum(len(b) * lengths[b].max() for b in sampler.batches())

    assert padded(True) < 0.7 * padded(False)


def test_device_batches_equal_dataloader_batches():
    features, labels, offsets = flat_split()
    lengths = (offsets[1:] - offsets[:-1]).numpy()

    def sampler():
        return QueryBatchSampler(lengths, 8, shuffle=True, bucket=True, seed=5, with_seeds=True)

    loader = DataLoader(QueryDataset(features, labels, offsets), batch_sampler=sampler(), collate_fn=make_collate(10))
    _set_sampler_epoch(loader, 2)
    device = DeviceBatches(features, labels, offsets, sampler(), 10, epoch_fn=lambda: 2)
    pairs = list(zip(loader, device, strict=True))
    assert len(pairs) == len(device)
    for a, b in pairs:
        for key in ("features", "labels", "mask", "query_index"):
            torch.testing.assert_close(a[key], b[key], msg=key)


def test_normalizers_against_numpy():
    rng = np.random.default_rng(0)
    train = rng.normal(3, 5, size=(200, 4)).astype(np.float32)
    train[:, 3] = 7.0  # a constant feature stays finite
    z = FeatureNormalizer.fit("zscore", train)
    x = torch.from_numpy(train[:10])[None]
    expected = (train[:10] - train.mean(0)) / np.where(train.std(0) > 0, train.std(0), 1)
    np.testing.assert_allclose(z(x)[0].numpy(), expected, atol=1e-5)
    q = FeatureNormalizer("query_zscore", num_features=4)
    mask = torch.tensor([[True] * 6 + [False] * 4])
    got = q(x, mask)[0, :6].numpy()
    real = train[:6]
    np.testing.assert_allclose(got[:, :3], (real[:, :3] - real[:, :3].mean(0)) / real[:, :3].std(0), atol=1e-4)
    assert np.all(got[:, 3] == 0)
    np.testing.assert_allclose(
        FeatureNormalizer("log1p")(x)[0].numpy(), np.sign(train[:10]) * np.log1p(np.abs(train[:10])), rtol=1e-6
    )
