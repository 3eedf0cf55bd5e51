"""LambdaRank training throughput on MSLR-WEB30K-shaped data: DataLoader vs device-resident vs gpu_fast.

    python -m bench.train_throughput                      # CPU, and CUDA when present
    python -m bench.train_throughput --device cuda        # CUDA rows next to the CPU rows
    python -m bench.train_throughput --device cpu --batches 60 --queries 4000

Data: ~19k queries of 30-210 documents (2.27M documents, MSLR-WEB30K's size), 136 features,
labels 0-4, made in memory (no text round trip). Model: MLP 136-256-128-64-1 with LambdaRank@10 and
Adam, trained by the real Lightning Trainer (no validation). Rows per device:

* DataLoader + collate (the reference): per-query items collated on the host;
* device-resident gather: the split on the device, one gather per batch (``data.device_resident``);
* gpu_fast (``trainer=gpu_fast``): device-resident, lists padded to 256, the training loss compiled
  (``torch.compile`` mode reduce-overhead = CUDA graphs on a GPU), bf16 autocast and fused Adam on a
  GPU, no host read per step. Its CUDA row times the whole second epoch (the first compiles);
  on CPU it runs without compiling unless ``--cpu-compile``.

Other rows time ``--batches`` batches after ``--warmup`` and extrapolate to an epoch. Documents are
counted on the device and read once; CUDA rows synchronize before reading the clock (wall time of
host and GPU together) and name the GPU.
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import numpy as np
import pytorch_lightning as pl
import torch

from bench.timing import machine, sync
from datamodules.letor import LetorDataModule
from datamodules.letor_io import LetorData
from losses import lambdarank_loss
from rankers import MLPScorer, RankerModule


def mslr_like(queries: int, features: int = 136, seed: int = 0) -> LetorData:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(30, 211, size=queries)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n = int(offsets[-1])
    x = rng.standard_normal((n, features), dtype=np.float32)
    labels = np.clip(np.round(x[:, :5].sum(1) / 2 + rng.normal(size=n)), 0, 4).astype(np.float32)
    qids = np.repeat(np.arange(queries), lengths)
    return LetorData(x, labels, qids, offsets, "<memory>")


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
            self.docs = self.docs + batch["mask"].sum()
            self.batches += 1

    def on_train_epoch_end(self, trainer, module):
        if trainer.current_epoch == self.epoch:
            sync(module.device)
            self.seconds = time.perf_counter() - self.start
            self.docs = int(self.docs)


def run(data: LetorData, device: str, mode: str, batches: int | None, warmup: int, batch_size: int, compile_cpu: bool):
    """Documents per second and timed batches of one configuration (``mode``: loader, resident, fast)."""
    fast = mode == "fast"
    cuda = device == "cuda"
    datamodule = LetorDataModule(
        "<memory>",
        normalization="zscore",
        batch_size=batch_size,
        max_list_length=None,
        device_resident=mode != "loader",
        pad_multiple=256 if fast else 1,
        bucket_by_length=True,
    )
    datamodule.use_splits({"train": data, "val": data.subset(np.arange(2))})
    compile_mode: bool | str = False
    if fast and (cuda or compile_cpu):
        compile_mode = "reduce-overhead" if cuda else True
    model = RankerModule(
        partial(MLPScorer, hidden=(256, 128, 64)),
        partial(lambdarank_loss, k=10),
        partial(torch.optim.Adam, lr=1e-3, fused=fast),
        n_features=data.num_features,
        normalizer=datamodule.build_normalizer(),
        compile=compile_mode,
        step_loss_in_progress_bar=False if fast else None,
    )
    whole_epoch = fast and cuda  # compiling happens in epoch 0; epoch 1 is timed whole
    meter = Throughput(0 if whole_epoch else warmup, epoch=1 if whole_epoch else 0)
    trainer = pl.Trainer(
        accelerator="gpu" if cuda else "cpu",
        devices=1,
        max_epochs=2 if whole_epoch else 1,
        limit_train_batches=None if whole_epoch else batches + warmup,
        limit_val_batches=0,
        precision="bf16-mixed" if fast and cuda else "32-true",
        log_every_n_steps=50,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[meter],
    )
    trainer.fit(model, datamodule=datamodule)
    return meter.docs / meter.seconds, meter.batches


NAMES = {
    "loader": "DataLoader + collate (reference)",
    "resident": "device-resident gather",
    "fast": "gpu_fast: resident, padded, compiled (CUDA graphs), bf16, fused Adam",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all", help="cuda: CPU rows too")
    parser.add_argument("--queries", type=int, default=18919)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=None, help="timed batches (default: CUDA 100, CPU 40)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--cpu-compile", action="store_true", help="compile the gpu_fast row on CPU too")
    parser.add_argument("--skip-cpu", action="store_true", help="CUDA rows only (ratios then against CUDA's reference)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    data = mslr_like(args.queries)
    devices = [] if args.skip_cpu else ["cpu"]
    if args.device != "cpu" and torch.cuda.is_available():
        devices.append("cuda")
    epoch_batches = -(-data.num_queries // args.batch_size)
    print(f"# machine: {machine()}")
    print(
        f"# data: {data.num_queries} queries, {len(data.labels):,} documents, {data.num_features} features; "
        f"batch {args.batch_size} queries; {epoch_batches} batches an epoch"
    )
    print("| device | batches from | timed batches | documents/s | one epoch (s) | vs reference | vs CPU resident |")
    print("|---|---|---:|---:|---:|---:|---:|")
    reference = cpu_resident = None
    for device in devices:
        label = f"cuda {torch.cuda.get_device_name()}" if device == "cuda" else "cpu"
        default = 100 if device == "cuda" else 40
        batches = min(args.batches or default, epoch_batches - args.warmup)
        for mode in ("loader", "resident", "fast"):
            rate, timed = run(data, device, mode, batches, args.warmup, args.batch_size, args.cpu_compile)
            reference = reference or rate
            if device == "cpu" and mode == "resident":
                cpu_resident = rate
            versus_cpu = f"{rate / cpu_resident:.2f}x" if cpu_resident else "-"
            name = NAMES[mode]
            if device == "cpu" and mode == "fast":
                compiled = "compiled" if args.cpu_compile else "not compiled"
                name = f"gpu_fast settings on CPU: resident, padded to 256, fused Adam, {compiled}, float32"
            print(
                f"| {label} | {name} | {timed} | {rate:,.0f} | {len(data.labels) / rate:.2f} | "
                f"{rate / reference:.2f}x | {versus_cpu} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
