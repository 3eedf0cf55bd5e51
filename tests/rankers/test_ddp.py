"""DDP: every rank runs the same number of batches, and evaluation counts each query exactly once."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from hydra.utils import instantiate

from datamodules import batching
from datamodules.batching import PADDING_QUERY, DeviceBatches, QueryBatchSampler, QueryDataset, make_collate
from rankers.pipeline import compose_config
from tests.conftest import ROOT


def rank_batches(monkeypatch, world: int, **options) -> list[list[np.ndarray]]:
    """The batches each of ``world`` ranks would run."""
    per_rank = []
    for rank in range(world):
        monkeypatch.setattr(batching, "_rank_and_world", lambda rank=rank: (rank, world))
        sampler = QueryBatchSampler(np.arange(1, 80) % 7 + 1, 4, **options)
        batches = sampler.batches()
        assert len(batches) == len(sampler)
        per_rank.append(batches)
    return per_rank


@pytest.mark.parametrize("world", [2, 3, 7])
def test_evaluation_batches_are_even_and_count_each_query_once(monkeypatch, world):
    per_rank = rank_batches(monkeypatch, world, shuffle=False, bucket=True)
    assert len({len(batches) for batches in per_rank}) == 1  # 20 batches of 79 queries over `world` ranks
    indices = np.concatenate([b for batches in per_rank for b in batches])
    real = indices[indices != PADDING_QUERY]
    assert sorted(real.tolist()) == list(range(79))
    assert all(len(b) == 1 for batches in per_rank for b in batches if PADDING_QUERY in b)


@pytest.mark.parametrize("world", [2, 3])
def test_training_batches_are_even_and_cover_every_query(monkeypatch, world):
    per_rank = rank_batches(monkeypatch, world, shuffle=True, bucket=True, seed=3)
    assert len({len(batches) for batches in per_rank}) == 1
    indices = np.concatenate([b for batches in per_rank for b in batches])
    assert PADDING_QUERY not in indices and set(indices.tolist()) == set(range(79))


def test_padding_batches_are_empty_in_both_batch_paths(monkeypatch):
    monkeypatch.setattr(batching, "_rank_and_world", lambda: (1, 2))
    features = torch.randn(30, 3)
    labels = torch.randint(0, 3, (30,)).float()
    offsets = torch.tensor([0, 10, 20, 30])
    lengths = np.diff(offsets.numpy())
    sampler = QueryBatchSampler(lengths, 1, shuffle=False)  # 3 batches: rank 1 gets #1 and a padding batch
    collate = make_collate(None)
    dataset = QueryDataset(features, labels, offsets)
    loaded = [collate([dataset[int(i)] for i in batch]) for batch in sampler]
    resident = list(DeviceBatches(features, labels, offsets, sampler, None, lambda: 0))
    for batches in (loaded, resident):
        assert len(batches) == 2
        assert batches[0]["mask"].all() and batches[0]["query_index"].tolist() == [1]
        assert not batches[1]["mask"].any() and batches[1]["query_index"].tolist() == [PADDING_QUERY]


@pytest.mark.slow
def test_ddp_on_two_cpu_processes_finishes_with_the_single_process_metrics(tmp_path, data_dir):
    overrides = [
        "trainer=ddp",
        "trainer.devices=2",
        "trainer.accelerator=cpu",
        "trainer.max_epochs=1",
        "data.n_train_queries=150",  # 10 training batches of 16 -> 5 per rank
        "data.n_val_queries=45",  # 3 evaluation batches of 16 -> one rank gets a padding batch
        "data.n_test_queries=45",
        "data.eval_batch_size=16",
        "data.batch_size=16",
        "data.mean_docs=10",
        "data.num_features=6",
        "model.scorer.hidden=[8]",
        "callbacks.progress_bar.refresh_rate=0",
        f"paths.data_dir={data_dir}",
    ]
    done = subprocess.run(
        [sys.executable, "train.py", *overrides, f"hydra.run.dir={tmp_path / 'ddp'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=480,  # a deadlock fails here instead of hanging CI
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "ddp" / "results.json").read_text())

    # the same checkpoint evaluated in one process
    cfg = compose_config(overrides[4:], output_dir=tmp_path / "single", data_dir=data_dir)
    datamodule = instantiate(cfg.data)
    datamodule.setup()
    model = instantiate(cfg.model, **datamodule.model_inputs())
    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    single = trainer.test(model, datamodule=datamodule, ckpt_path=results["best_checkpoint"], verbose=False)[0]
    for name, value in results["test"].items():
        assert value == pytest.approx(single[f"test/{name}"], abs=1e-6), name


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _torchrun_node(rank: int, port: int, overrides: list[str], out, log) -> subprocess.Popen:
    """One 'node' of a two-node launch on localhost, as a cluster's two machines would run it."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
        "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port),
        "train.py", "trainer=ddp", "trainer.num_nodes=2", "trainer.devices=1", "trainer.accelerator=cpu",
        *overrides, f"hydra.run.dir={out}",
    ]  # fmt: skip
    return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


TWO_NODE_DATA = [
    "trainer.max_epochs=1",
    "data.n_train_queries=64",
    "data.n_val_queries=16",
    "data.n_test_queries=16",
    "data.mean_docs=8",
    "data.num_features=6",
    "model.scorer.hidden=[8]",
    "callbacks.progress_bar.refresh_rate=0",
]


@pytest.mark.slow
def test_two_nodes_sharing_one_data_directory_run_as_one_world(tmp_path):
    # issue 33: both nodes prepared the same synthetic files at once and one died (FileNotFoundError)
    shared, port = tmp_path / "shared-data", _free_port()
    overrides = [*TWO_NODE_DATA, f"paths.data_dir={shared}"]
    outs = [tmp_path / f"node{rank}" for rank in range(2)]
    logs = [open(tmp_path / f"node{rank}.log", "w") for rank in range(2)]  # noqa: SIM115
    nodes = [_torchrun_node(rank, port, overrides, outs[rank], logs[rank]) for rank in range(2)]
    codes = [node.wait(timeout=480) for node in nodes]
    text = [(tmp_path / f"node{rank}.log").read_text() for rank in range(2)]
    assert codes == [0, 0], text[0][-2000:] + text[1][-2000:]
    results = json.loads((outs[0] / "results.json").read_text())
    assert results["world_size"] == 2 and results["num_nodes"] == 2
    # written once, by the global rank 0: node 1 leaves its log only
    assert not (outs[1] / "results.json").exists() and not (outs[1] / "export").exists()
    assert sorted(p.name for p in (outs[0] / "export").iterdir()) == ["meta.json", "scorer.onnx", "scorer.pt"]
    assert not [p for p in shared.rglob("*") if ".partial" in p.name]


@pytest.mark.slow
def test_a_node_that_fails_at_start_up_ends_the_other_within_the_timeout(tmp_path):
    # issue 33: node 0 waited for node 1 for Lightning's 30 minutes; now trainer.strategy.timeout
    port, started = _free_port(), time.monotonic()
    good = ["data.n_train_queries=32", f"paths.data_dir={tmp_path / 'data'}", "trainer.strategy.timeout.seconds=20"]
    logs = [open(tmp_path / f"node{rank}.log", "w") for rank in range(2)]  # noqa: SIM115
    node0 = _torchrun_node(0, port, good, tmp_path / "node0", logs[0])
    node1 = _torchrun_node(
        1, port, ["data=letor", f"data.train={tmp_path / 'missing.txt'}"], tmp_path / "node1", logs[1]
    )
    assert node1.wait(timeout=240) != 0
    assert node0.wait(timeout=240) != 0  # ended by the process-group timeout, not left hanging
    assert time.monotonic() - started < 200
    assert "missing.txt" in (tmp_path / "node1.log").read_text()
