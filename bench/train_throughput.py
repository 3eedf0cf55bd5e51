"""LambdaRank training throughput on MSLR-WEB30K-shaped data, each row against its device's compute floor.

    python bench/train_throughput.py --device cpu --batches 30   # or: python -m bench.train_throughput ...
    python bench/train_throughput.py --device cuda               # CUDA rows next to the CPU rows
    python bench/train_throughput.py --device cpu --profile      # where a batch's time goes, on CPU
    python bench/train_throughput.py --device cpu --profile --ops 12 --threads 1   # and by operator
    python bench/train_throughput.py --quality --epochs 4        # validation ndcg@10, standard vs fast path
    python bench/train_throughput.py --ablations                 # CPU: rows against changes, a process a run

Data: ~19k queries of 30-210 documents (2.27M documents, MSLR-WEB30K's size), 136 features,
labels 0-4, made in memory (no text round trip). Model: MLP 136-256-128-64-1 with LambdaRank@10 and
Adam, trained by the real Lightning Trainer (no validation). Rows per device:

* DataLoader + collate (the reference): per-query items collated on the host, batch 64 queries;
* device-resident gather: the split on the device, one gather per batch (``data.device_resident``);
* on CPU, the same with the MLP through the other backend: oneDNN (``rankers.neural.onednn_mlp``) where
  MKL runs its AVX-512 kernels (``kernels.mkl_vendor``, activated here as ``train.py`` does; the
  resident row then runs the MLP through MKL in reused buffers, ``rankers.neural.mkl_mlp``), else
  that MKL path (MKL's AVX2 kernels on AMD);
* the fast path (``trainer=cpu_fast`` / ``trainer=gpu_fast``): device-resident, 256-query batches with
  the learning rate scaled by (256 / 64) ** 1.5 on CPU, linearly on CUDA (``--lr-power``), fused Adam,
  several optimizer steps per Lightning step (``model.step_graphs``, ``data.steps_per_batch``: 4 on CPU,
  eager; 16 on CUDA); on CUDA also lists padded
  to 256 (float32, ``--fast-precision`` for bf16), each whole step (loss, backward, Adam) a replayed CUDA
  graph, and its whole second epoch is timed.

Other rows time ``--batches`` batches of 64 queries (the fast row: the same number of queries) after
``--warmup`` batches of their own and extrapolate to an epoch. **Compute floor**: the MLP's forward and backward FLOPs
over the epoch's real documents (forward ``2 sum(i o)``, weight gradients the same again, input
gradients of every layer but the first) divided by the device's peak, the best of ``torch.mm`` and
(CPU) oneDNN's linear on a large square matmul in the row's dtype, measured just before and just
after the row (the better of the two), so that load from other jobs hits both sides alike.
"""

# ruff: noqa: E402  (the MKL shim must be loaded before torch: the imports follow kernels.mkl_vendor.activate())
from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from unittest import mock

if __name__ == "__main__" and not __package__:
    # run as a file, Python looks in bench/ first for imports, where bench/losses.py would shadow the losses
    # package: run as the module from the repository root instead (the same process id, the same arguments)
    os.chdir(Path(__file__).resolve().parents[1])
    os.execv(sys.executable, [sys.executable, "-m", "bench.train_throughput", *sys.argv[1:]])

from kernels import mkl_vendor

mkl_vendor.activate()  # before torch is loaded, as train.py: MKL's AVX-512 kernels on AMD CPUs

import numpy as np
import pytorch_lightning as pl
import torch

from datamodules.letor import LetorDataModule
from datamodules.letor_io import LetorData
from kernels import mlp_cpu
from losses import lambdarank_loss
from rankers import MLPScorer, RankerModule
from rankers.neural import mkl_mlp, onednn_mlp

HIDDEN = (256, 128, 64)
BASE_LR, BASE_BATCH = 1e-3, 64
# the fast rows' rule, lr x (batch / base) ** power, as conf/trainer/cpu_fast.yaml and gpu_fast.yaml
# (rankers/resolvers.py's batch_scaled_lr): 1.5 on CPU (linear trailed the standard path, docs/benchmarks.md),
# linear on CUDA; --lr-power sets both
LR_POWER = {"cpu": 1.5, "cuda": 1.0}
STEPS_PER_BATCH = {"cpu": 4, "cuda": 16}  # trainer=cpu_fast's and trainer=gpu_fast's data.steps_per_batch


def sync(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def machine() -> str:
    text = f"{platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}"
    return text + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "")


def mslr_like(queries: int, features: int = 136, seed: int = 0, fractional: bool = False) -> LetorData:
    """MSLR-WEB30K-shaped split: lists of 30-210 documents, grades 0-4 from the first 5 features
    plus noise; ``fractional``: each grade the mean of three noisy assessors (thirds)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(30, 211, size=queries)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n = int(offsets[-1])
    x = rng.standard_normal((n, features), dtype=np.float32)
    grade = x[:, :5].sum(1) / 2 + rng.normal(size=n)
    if fractional:
        labels = np.clip(np.rint(grade[:, None] + rng.normal(scale=0.7, size=(n, 3))), 0, 4).mean(1)
    else:
        labels = np.clip(np.round(grade), 0, 4)
    qids = np.repeat(np.arange(queries), lengths)
    return LetorData(x, labels.astype(np.float32), qids, offsets, "<memory>")


def letor_like(queries: int, features: int = 46, seed: int = 0) -> LetorData:
    """LETOR-3/4-shaped split (letor_a is not on this machine): short lists of 5-30 documents, 46
    features, fractional grades 0-2 (the mean of three assessors) from a nonlinear function."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 31, size=queries)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n = int(offsets[-1])
    x = rng.random((n, features), dtype=np.float32)  # LETOR's query-normalized features lie in [0, 1]
    latent = 2 * x[:, 0] * x[:, 1] + np.sin(3 * x[:, 2]) + x[:, 3:8].sum(1) / 3 - 1.2
    labels = np.clip(np.rint(latent[:, None] + rng.normal(scale=0.5, size=(n, 3))), 0, 2).mean(1)
    return LetorData(x, labels.astype(np.float32), np.repeat(np.arange(queries), lengths), offsets, "<memory>")


def flops_per_document(features: int, hidden: tuple[int, ...] = HIDDEN) -> int:
    """Forward ``2 sum(i o)`` + weight gradients ``2 sum(i o)`` + input gradients of layers 2.. (``2 i o``)."""
    sizes = [features, *hidden, 1]
    products = [i * o for i, o in itertools.pairwise(sizes)]
    return 2 * sum(products) * 2 + 2 * sum(products[1:])


def peak_flops(device: str, dtype: torch.dtype, repeats: int = 3) -> float:
    """FLOP/s of the best of ``torch.mm`` and (CPU, float32) oneDNN's linear on an n x n matmul."""
    n = 2048 if device == "cpu" else 8192
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    candidates = [lambda: torch.mm(a, b)]
    if device == "cpu" and onednn_mlp.available():
        candidates.append(lambda: onednn_mlp.linear(a, b, None))
    best = math.inf
    for fn in candidates:
        fn()
        for _ in range(repeats):
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


class Throughput(pl.Callback):
    """Wall time and real documents of epoch ``epoch`` from its batch ``warmup`` on; documents are
    summed on the device (reading them per batch would be a sync) and read at the end."""

    def __init__(self, warmup: int, epoch: int = 0) -> None:
        self.warmup, self.epoch, self.start, self.seconds, self.batches = warmup, epoch, None, 0.0, 0
        self.docs: torch.Tensor | int = 0

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.current_epoch == self.epoch and batch_idx == self.warmup:
            sync(module.device)
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.current_epoch == self.epoch and batch_idx >= self.warmup:
            for one in batch if isinstance(batch, list) else [batch]:  # step graphs: a list of batches
                self.docs = self.docs + one["mask"].sum()
                self.batches += 1

    def on_train_epoch_end(self, trainer, module):
        if trainer.current_epoch == self.epoch:
            sync(module.device)
            self.seconds = time.perf_counter() - self.start
            self.docs = int(self.docs)


@dataclass
class Row:
    """One row's settings: ``mode`` loader / resident / fast; ``mlp``: the MLP's backend on CPU (``default``:
    as training picks it, ``onednn``: ``rankers.neural.onednn_mlp``, ``mkl``: ``rankers.neural.mkl_mlp``,
    ``generic``: ``nn.Linear`` and autograd, ``per-product``: ``mkl_mlp`` without ``kernels.mlp_cpu``);
    ``steps_per_batch``: optimizer steps a Lightning step through ``model.step_graphs`` (eager on CPU;
    None: the fast rows' config, ``STEPS_PER_BATCH``, else 1); ``step_log``: False drops the per-step loss
    logging."""

    mode: str
    mlp: str = "default"
    steps_per_batch: int | None = None
    step_log: bool = True
    every_step_log: bool = False  # the loss logged on every step, not only those Lightning writes
    fast_batch: int = 256
    lr_power: float = LR_POWER["cpu"]
    precision: str = "32-true"  # the fast rows' on CUDA (trainer=gpu_fast's; bf16-mixed lost quality)

    def steps(self, device: str) -> int:
        """Optimizer steps a Lightning step (a list of that many batches)."""
        if self.steps_per_batch is not None:
            return self.steps_per_batch
        return STEPS_PER_BATCH[device] if self.fast else 1

    @property
    def fast(self) -> bool:
        return self.mode == "fast"

    def batch_size(self, base: int) -> int:
        return self.fast_batch if self.fast else base

    def lr(self, base: int) -> float:
        """Adam's rate: the base rate at the base batch times (batch / base) ** lr_power (conf/trainer/*_fast.yaml)."""
        return BASE_LR * (self.batch_size(base) / BASE_BATCH) ** self.lr_power


@contextlib.contextmanager
def row_patches(path: Row) -> Iterator[None]:
    """The row's switches that are not options: the MLP's backend (``mkl``: the oneDNN MLP off, so
    ``rankers.neural.mkl_mlp`` runs the matmuls; ``onednn``: on; ``generic``: both off) and, without
    ``step_log``, no per-step loss logging; ``per-product``: the MKL path without its one-pass kernel
    (``kernels.mlp_cpu``), a product at a time."""
    with contextlib.ExitStack() as stack:
        if path.mlp != "default":
            stack.enter_context(mock.patch.object(onednn_mlp, "enabled", lambda: path.mlp == "onednn"))
        if path.mlp == "generic":
            stack.enter_context(mock.patch.object(mkl_mlp, "enabled", lambda: False))
        if path.mlp == "per-product":
            stack.enter_context(mock.patch.object(mlp_cpu, "available", lambda: False))
        if not path.step_log:
            stack.enter_context(mock.patch.object(RankerModule, "_log_train_loss", lambda *args: None))
        if path.every_step_log:
            stack.enter_context(mock.patch.object(RankerModule, "_logs_train_loss", lambda self: True))
        yield


def build(data: LetorData, val: LetorData, device: str, path: Row, batch: int, seed: int = 0):
    cuda = device == "cuda"
    datamodule = LetorDataModule(
        "<memory>",
        normalization="zscore",
        batch_size=path.batch_size(batch),
        max_list_length=None,
        device_resident=path.mode != "loader",
        pad_multiple=256 if path.fast and cuda else 1,
        steps_per_batch=path.steps(device),
        bucket_by_length=True,
        seed=seed,
    )
    datamodule.use_splits({"train": data, "val": val})
    model = RankerModule(
        partial(MLPScorer, hidden=HIDDEN),
        partial(lambdarank_loss, k=10),
        partial(torch.optim.Adam, lr=path.lr(batch), fused=path.fast),
        n_features=data.num_features,
        normalizer=datamodule.build_normalizer(),
        step_graphs=(path.fast and cuda) or path.steps(device) > 1,
        step_loss_in_progress_bar=False if path.fast else None,
    )
    return datamodule, model


def trainer_for(device: str, path: Row, **options) -> pl.Trainer:
    return pl.Trainer(
        accelerator="gpu" if device == "cuda" else "cpu",
        devices=1,
        precision=path.precision if path.fast and device == "cuda" else "32-true",
        log_every_n_steps=50,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **options,
    )


def run(data: LetorData, device: str, path: Row, batches: int, warmup: int, batch: int) -> tuple[float, int]:
    """Documents per second and timed batches of one row."""
    datamodule, model = build(data, data.subset(np.arange(2)), device, path, batch)
    # the fast and grouped rows time the same number of queries (a Lightning batch: several of 64)
    scale = batch / path.batch_size(batch) / path.steps(device)
    whole_epoch = path.fast and device == "cuda"  # compiling happens in epoch 0; epoch 1 is timed whole
    # every row warms up ``warmup`` of its own batches (a grouped row's Lightning batch holds 16: at least 2 of
    # those): the one-time costs, buffers grown to the largest batch so far, come per batch and not per query
    warm = warmup if path.steps(device) == 1 else max(2, math.ceil(warmup * scale))
    timed = max(1, math.ceil(batches * scale))
    meter = Throughput(0 if whole_epoch else warm, epoch=1 if whole_epoch else 0)
    trainer = trainer_for(
        device,
        path,
        max_epochs=2 if whole_epoch else 1,
        limit_train_batches=None if whole_epoch else timed + warm,
        limit_val_batches=0,
        callbacks=[meter],
    )
    with row_patches(path):
        trainer.fit(model, datamodule=datamodule)
    runner = model._runner
    if runner is not None and device == "cuda":  # whether the steps were graphs (a failed capture: eager)
        print(
            f"# step graphs: {runner.captures} captured, {runner.replays} replayed, eager shapes {runner.eager_shapes}"
        )
    return meter.docs / meter.seconds, meter.batches


def names(
    device: str, batch: int, fast_batch: int, lr_power: float | None = None, precision: str = "32-true"
) -> dict[str, str]:
    power = LR_POWER[device] if lr_power is None else lr_power
    fast = f"resident, {fast_batch}-query batches, lr x{(fast_batch / batch) ** power:g}, fused Adam"
    if device == "cuda":
        graphs = f"whole steps as CUDA graphs, {STEPS_PER_BATCH['cuda']} a Lightning step"
        fast = f"**`trainer=gpu_fast`**: {fast}, padded to 256, {graphs}, {precision}"
    else:
        fast = f"**`trainer=cpu_fast`**: {fast}, {STEPS_PER_BATCH['cpu']} steps a Lightning step"
    return {
        "loader": "DataLoader + collate (reference)",
        "resident": "device-resident gather",
        "mkl": "device-resident gather, MLP through MKL (`mkl_mlp`; AVX2 kernels on AMD)",
        "onednn": "device-resident gather, MLP through oneDNN (`onednn_mlp`)",
        "fast": fast,
    }


def throughput_table(args: argparse.Namespace) -> None:
    data = mslr_like(args.queries)
    devices = [] if args.skip_cpu else ["cpu"]
    if args.device != "cpu" and torch.cuda.is_available():
        devices.append("cuda")
    epoch_batches = -(-data.num_queries // args.batch_size)
    per_doc = flops_per_document(data.num_features)
    total_flops = per_doc * len(data.labels)
    print(f"# machine: {machine()}")
    print(
        f"# data: {data.num_queries} queries, {len(data.labels):,} documents, {data.num_features} features; "
        f"batch {args.batch_size} queries; {epoch_batches} batches an epoch"
    )
    print(f"# MKL: {'AVX-512 kernels (kernels.mkl_vendor)' if mkl_vendor.active() else 'its own dispatch'}")
    print(f"# compute floor: {per_doc:,} FLOP a document (MLP 136-256-128-64-1 forward + backward) / peak matmul")
    print(
        "| device | batches from | dtype | timed batches | documents/s | one epoch (s) | peak GFLOP/s | "
        "floor (s) | vs floor | vs reference |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for device in devices:
        label = f"cuda {torch.cuda.get_device_name()}" if device == "cuda" else "cpu"
        batches = min(args.batches or (100 if device == "cuda" else 40), epoch_batches - args.warmup)
        rows = [("loader", Row("loader")), ("resident", Row("resident"))]
        if device == "cpu" and onednn_mlp.available():
            other = "onednn" if mkl_vendor.active() else "mkl"  # the backend the resident row does not use
            rows.append((other, Row("resident", mlp=other)))
        rows += [("fast", path) for path in fast_rows(args, device)]
        reference = None
        for key, path in rows:
            dtype = torch.bfloat16 if path.fast and device == "cuda" and "bf16" in path.precision else torch.float32
            before = peak_flops(device, dtype)
            rate, timed = run(data, device, path, batches, args.warmup, args.batch_size)
            peak = max(before, peak_flops(device, dtype))
            reference = reference or rate
            epoch, floor = len(data.labels) / rate, total_flops / peak
            name = names(device, args.batch_size, path.fast_batch, path.lr_power, path.precision)[key]
            print(
                f"| {label} | {name} | "
                f"{str(dtype).removeprefix('torch.')} | {timed} | {rate:,.0f} | {epoch:.2f} | {peak / 1e9:,.0f} | "
                f"{floor:.3f} | {epoch / floor:.2f}x | {rate / reference:.2f}x |",
                flush=True,
            )


class Phases(pl.Callback):
    """Wall time of each phase of a training batch inside Lightning's loop, from batch ``skip`` on."""

    def __init__(self, skip: int) -> None:
        self.skip, self.times, self.mark, self.last_end = skip, {}, None, None

    def _split(self, name: str, batch_idx: int) -> None:
        now = time.perf_counter()
        if batch_idx >= self.skip and self.mark is not None:
            self.times.setdefault(name, []).append(now - self.mark)
        self.mark = now

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        now = time.perf_counter()
        if batch_idx > self.skip and self.last_end is not None:
            self.times.setdefault("fetch the batch (gather, Lightning's loop)", []).append(now - self.last_end)
        self.mark = now

    def on_before_backward(self, trainer, module, loss):
        self._split("forward: normalize, MLP, loss, logging", trainer.fit_loop.batch_idx)

    def on_after_backward(self, trainer, module):
        self._split("backward", trainer.fit_loop.batch_idx)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self._split("optimizer step, zero_grad, Lightning's bookkeeping", batch_idx)
        self.last_end = time.perf_counter()


def profile(args: argparse.Namespace) -> None:
    """Per batch on CPU: the phases inside Lightning's loop, then the pieces of a step timed alone."""
    data = mslr_like(args.queries)
    batches = args.batches or 30
    power = lr_power(args, "cpu")
    row_names = names("cpu", args.batch_size, args.fast_batch_size, power)
    # the fast row a step a Lightning step: Lightning's phases (forward, backward, optimizer) of each step
    fast = Row("fast", fast_batch=args.fast_batch_size, lr_power=power, steps_per_batch=1)
    for path in (Row("resident"), fast):
        datamodule, model = build(data, data.subset(np.arange(2)), "cpu", path, args.batch_size)
        phases = Phases(skip=args.warmup)
        trainer = trainer_for(
            "cpu",
            path,
            max_epochs=1,
            limit_train_batches=batches + args.warmup,
            limit_val_batches=0,
            callbacks=[phases],
        )
        trainer.fit(model, datamodule=datamodule)
        inside = {name: statistics.median(values) for name, values in phases.times.items()}
        alone = _pieces(datamodule, model, path, args.warmup, batches, CLOCKS[args.clock])
        docs = alone.pop("documents")
        steps = " (here one step a Lightning step)" if path.fast else ""
        print(
            f"\n## {row_names[path.mode]}{steps}: median ms per batch "
            f"({docs:,.0f} documents a batch, {torch.get_num_threads()} threads)\n"
        )
        print("| inside Lightning's loop | ms |\n|---|---:|")
        for name, seconds in inside.items():
            print(f"| {name} | {seconds * 1e3:.1f} |")
        print(f"| **whole batch** | **{sum(inside.values()) * 1e3:.1f}** |")
        print(f"\n| the same pieces alone ({args.clock} clock) | ms |\n|---|---:|")
        for name, seconds in alone.items():
            print(f"| {name} | {seconds * 1e3:.1f} |")
        print(f"| **sum** | **{sum(alone.values()) * 1e3:.1f}** |")
        floor = docs * flops_per_document(data.num_features) / peak_flops("cpu", torch.float32)
        print(f"| compute floor of the batch (MLP FLOPs / peak matmul) | {floor * 1e3:.1f} |", flush=True)
        if args.ops:
            op_table(datamodule, model, path, args.warmup, batches, args.ops)


def op_table(datamodule: LetorDataModule, model: RankerModule, path: Row, warmup: int, batches: int, top: int) -> None:
    """torch.profiler's operators over the same steps as ``_pieces``: self CPU ms and calls per batch."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        _pieces(datamodule, model, path, 0, warmup + batches)
    events = sorted(profiler.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    steps = warmup + batches
    print(f"\n| operator (torch.profiler, {steps} steps) | self ms per batch | calls per batch |\n|---|---:|---:|")
    for event in events:
        print(f"| `{event.key}` | {event.self_cpu_time_total / 1e3 / steps:.2f} | {event.count / steps:g} |")


# --clock: wall time, or the calling thread's CPU time (with --threads 1: the work itself, what an idle core
# would take, even on a machine that other jobs share)
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}


def _pieces(
    datamodule: LetorDataModule, model: RankerModule, path: Row, warmup: int, batches: int, clock=time.perf_counter
) -> dict:
    """Median seconds of each piece of a training step on the datamodule's first batches, outside Lightning."""
    datamodule.setup("fit")
    loader = datamodule.train_dataloader()
    optimizer = torch.optim.Adam(model.parameters(), lr=path.lr(datamodule.batch_size), fused=path.fast)
    times: dict[str, list[float]] = {}
    documents = []
    iterator = itertools.chain.from_iterable(itertools.repeat(loader))  # epoch after epoch

    def timed(name, fn):
        start = clock()
        out = fn()
        times.setdefault(name, []).append(clock() - start)
        return out

    for _ in range(warmup + batches):
        batch = timed("gather the batch (device-resident)", partial(next, iterator))
        members = partial(model._training_members, batch["features"], batch["mask"])
        scores = timed("normalize (z-score) and MLP forward", members)[..., 0]
        loss = timed(
            "LambdaRank@10 loss and lambdas (C++ kernel)",
            partial(lambdarank_loss, scores, batch["labels"], batch["mask"], k=10),
        )
        timed("backward (MLP)", loss.backward)
        timed("Adam step + zero_grad", partial(_adam_step, optimizer))
        documents.append(float(batch["mask"].sum()))
    result = {name: statistics.median(values[warmup:]) for name, values in times.items()}
    return {**result, "documents": statistics.median(documents[warmup:])}


def _adam_step(optimizer: torch.optim.Optimizer) -> None:
    optimizer.step()
    optimizer.zero_grad()


def lr_power(args: argparse.Namespace, device: str) -> float:
    """The fast rows' learning-rate power: ``--lr-power``, else the device's config's (``LR_POWER``)."""
    return LR_POWER[device] if args.lr_power is None else args.lr_power


def fast_rows(args: argparse.Namespace, device: str) -> list[Row]:
    """The fast path's rows: ``--fast-sizes`` (default: on CUDA the base batch and twice it, then
    ``--fast-batch-size``) x ``--fast-precision`` (CUDA; CPU trains in float32)."""
    default = [args.batch_size, 2 * args.batch_size] if device == "cuda" else []
    sizes = args.fast_sizes or list(dict.fromkeys([*default, args.fast_batch_size]))
    precisions = args.fast_precision if device == "cuda" else ["32-true"]
    return [
        Row("fast", fast_batch=size, lr_power=lr_power(args, device), precision=precision)
        for precision in precisions
        for size in sizes
    ]


def quality(args: argparse.Namespace) -> None:
    """Validation ndcg@10 after ``--epochs`` epochs, standard path vs the fast path(s), seeds 0..S-1."""
    device = "cuda" if args.device == "cuda" else "cpu"
    kinds = {
        "MSLR-like (136 features, 30-210 documents, grades 0-4)": partial(mslr_like),
        "MSLR-like, fractional grades (mean of 3 assessors)": partial(mslr_like, fractional=True),
        "LETOR-like (46 features, 5-30 documents, fractional grades 0-2)": partial(letor_like),
    }
    print(
        f"# machine: {machine()}; {device}; {args.epochs} epochs, seeds 0-{args.seeds - 1}, "
        f"{args.quality_queries} training queries, batch {args.batch_size} (fast: {args.fast_batch_size})"
    )
    paths = [("standard (resident data, float32)", Row("resident"))]
    for path in fast_rows(args, device):
        precision = f", {path.precision}" if device == "cuda" else ""
        paths.append((f"{device.replace('cuda', 'gpu')}_fast at {path.fast_batch} queries{precision}", path))
    print("| data | path | val ndcg@10 per seed | mean | std |\n|---|---|---|---:|---:|")
    for kind, make in kinds.items():
        train, val = make(args.quality_queries, seed=100), make(max(200, args.quality_queries // 4), seed=200)
        for name, path in paths:
            values = []
            for seed in range(args.seeds):
                pl.seed_everything(seed, verbose=False)
                datamodule, model = build(train, val, device, path, args.batch_size, seed=seed)
                trainer = trainer_for(device, path, max_epochs=args.epochs, num_sanity_val_steps=0)
                trainer.fit(model, datamodule=datamodule)
                values.append(float(trainer.callback_metrics["val/ndcg@10"]))
            print(
                f"| {kind} | {name} | {', '.join(f'{v:.4f}' for v in values)} | "
                f"{statistics.mean(values):.4f} | {statistics.pstdev(values):.4f} |",
                flush=True,
            )


ABLATIONS = {  # change: (what it is, the row it changes, the changed row)
    "no-step-log": ("no per-step loss logging", Row("resident"), Row("resident", step_log=False)),
    "every-step-log": (
        "the loss logged on every step, not only the steps Lightning writes",
        Row("resident"),
        Row("resident", every_step_log=True),
    ),
    "grouped-steps": (
        "16 optimizer steps a Lightning step (step_graphs, eager on CPU)",
        Row("resident"),
        Row("resident", steps_per_batch=16),
    ),
    "fast-single-steps": (
        f"trainer=cpu_fast with one optimizer step a Lightning step, not {STEPS_PER_BATCH['cpu']}",
        Row("fast"),
        Row("fast", steps_per_batch=1),
    ),
    "fast-16-steps": (
        f"trainer=cpu_fast with 16 optimizer steps a Lightning step, not {STEPS_PER_BATCH['cpu']}",
        Row("fast"),
        Row("fast", steps_per_batch=16),
    ),
    "no-buffers": (
        "the MLP through nn.Linear and autograd, no reused buffers (mkl_mlp off)",
        Row("resident"),
        Row("resident", mlp="generic"),
    ),
    "per-product-mlp": (
        "the MLP a product at a time in reused buffers, not the one-pass kernel (kernels.mlp_cpu off)",
        Row("resident"),
        Row("resident", mlp="per-product"),
    ),
}


def _faulting_run(data: LetorData, path: Row, args: argparse.Namespace) -> tuple[float, int]:
    """``run``'s documents/s and the process's minor page faults during it (the datamodule's setup included)."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    rate = run(data, "cpu", path, args.batches or 80, args.warmup, args.batch_size)[0]
    return rate, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def _isolated_run(key: str, side: str, args: argparse.Namespace) -> tuple[float, int]:
    """One run of an ablation (``side``: ``row`` or ``changed``) in a fresh process, so that nothing a run
    leaves behind (glibc's malloc settings, which stay set for the process; the heap; buffers) reaches the
    next: its documents/s and page faults."""
    options = ["--queries", str(args.queries), "--batch-size", str(args.batch_size), "--warmup", str(args.warmup)]
    options += ["--batches", str(args.batches or 80)] + (["--threads", str(args.threads)] if args.threads else [])
    command = [sys.executable, "-m", "bench.train_throughput", "--ablation-run", key, side, *options]
    done = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    result = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not result:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    rate, faults = result[-1].split()[1:]
    return float(rate), int(faults)


RESULT = "ablation-run:"


def ablation_run(args: argparse.Namespace) -> None:
    """``--ablation-run KEY SIDE``: one side of one change, its figures on a line that starts ``RESULT``."""
    key, side = args.ablation_run
    _, row, variant = ABLATIONS[key]
    rate, faults = _faulting_run(mslr_like(args.queries), row if side == "row" else variant, args)
    print(f"{RESULT} {rate} {faults}", flush=True)


def ablations(args: argparse.Namespace) -> None:
    """Rows against changes (``--changes``), in alternating pairs (the VM's neighbours move whole-table runs
    by more than these differences), each run in a fresh process, with the page faults of each run."""
    print(f"# machine: {machine()}; MKL: {'AVX-512 kernels' if mkl_vendor.active() else 'its own dispatch'}")
    print(
        "| change | pair | row (documents/s) | with the change | change | page faults (row / changed) |\n"
        "|---|---:|---:|---:|---:|---:|"
    )
    for key in args.changes:
        name = ABLATIONS[key][0]
        changes = []
        for pair in range(args.pairs):
            base, base_faults = _isolated_run(key, "row", args)
            changed, changed_faults = _isolated_run(key, "changed", args)
            changes.append(changed / base - 1)
            print(
                f"| {name} | {pair + 1} | {base:,.0f} | {changed:,.0f} | {changes[-1]:+.1%} | "
                f"{base_faults:,} / {changed_faults:,} |",
                flush=True,
            )
        if len(changes) > 1:
            error = statistics.stdev(changes) / math.sqrt(len(changes))
            print(f"| {name} | mean ± s.e. | | | {statistics.mean(changes):+.1%} ± {error:.1%} | |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all", help="cuda: CPU rows too")
    parser.add_argument("--queries", type=int, default=18919)
    parser.add_argument("--batch-size", type=int, default=BASE_BATCH)
    parser.add_argument("--fast-batch-size", type=int, default=256, help="the fast rows' batch (lr scaled with it)")
    parser.add_argument("--batches", type=int, default=None, help="timed batches (default: CUDA 100, CPU 40)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--skip-cpu", action="store_true", help="CUDA rows only")
    parser.add_argument("--profile", action="store_true", help="CPU: where a batch's time goes")
    parser.add_argument("--ops", type=int, default=0, help="--profile: also the N costliest operators (torch.profiler)")
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="--profile's pieces: wall or the thread's CPU time"
    )
    parser.add_argument("--quality", action="store_true", help="val ndcg@10, standard vs fast, on 3 data kinds")
    parser.add_argument("--epochs", type=int, default=4, help="--quality: epochs per run")
    parser.add_argument("--seeds", type=int, default=3, help="--quality: runs per path")
    parser.add_argument("--quality-queries", type=int, default=1500, help="--quality: training queries")
    parser.add_argument("--fast-sizes", type=int, nargs="+", default=None, help="fast rows' batches (queries)")
    parser.add_argument(
        "--fast-precision", nargs="+", default=["32-true"], help="CUDA fast rows: 32-true and/or bf16-mixed"
    )
    parser.add_argument(
        "--lr-power", type=float, default=None, help="fast rows: lr x (batch / 64) ** this (default: CPU 1.5, CUDA 1)"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--ablations", action="store_true", help="CPU: the resident row against changes")
    parser.add_argument("--pairs", type=int, default=3, help="--ablations: alternating pairs per change")
    parser.add_argument(
        "--changes", nargs="+", choices=sorted(ABLATIONS), default=list(ABLATIONS), help="--ablations: which changes"
    )
    parser.add_argument("--ablation-run", nargs=2, metavar=("CHANGE", "SIDE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    if args.ablation_run:
        ablation_run(args)
    elif args.profile:
        profile(args)
    elif args.ablations:
        ablations(args)
    elif args.quality:
        quality(args)
    else:
        throughput_table(args)


if __name__ == "__main__":
    main()
