"""LambdaRank training throughput on MSLR-WEB30K-shaped data: DataLoader vs device-resident batches.

    python bench/train_throughput.py                      # CPU, and CUDA when present
    python bench/train_throughput.py --device cpu --batches 60 --queries 4000

Data: ~19k queries of 30-210 documents (about 120 on average), 136 features, labels 0-4, made in
memory (no text round trip). Model: MLP 136-256-128-64-1 with LambdaRank@10 and Adam, trained by
the real Lightning Trainer. Reports training documents per second (padding not counted) measured
after warm-up batches, and the time of one full epoch at that rate. The reference is the
DataLoader path (per-query items, collate) on the same device.
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._timing import machine, sync
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
    """Wall time and real documents of the batches after ``warmup``."""

    def __init__(self, warmup: int) -> None:
        self.warmup, self.docs, self.start, self.seconds = warmup, 0, None, 0.0

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch_idx == self.warmup:
            sync(module.device)
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if batch_idx >= self.warmup:
            self.docs += int(batch["mask"].sum())

    def on_train_epoch_end(self, trainer, module):
        sync(module.device)
        self.seconds = time.perf_counter() - self.start


def run(data: LetorData, device: str, resident: bool, batches: int, warmup: int, batch_size: int) -> float:
    datamodule = LetorDataModule(
        "<memory>",
        normalization="zscore",
        batch_size=batch_size,
        max_list_length=None,
        device_resident=resident,
        bucket_by_length=True,
    )
    datamodule.use_splits({"train": data, "val": data.subset(np.arange(2))})
    model = RankerModule(
        partial(MLPScorer, hidden=(256, 128, 64)),
        partial(lambdarank_loss, k=10),
        partial(torch.optim.Adam, lr=1e-3),
        n_features=data.num_features,
        normalizer=datamodule.build_normalizer(),
    )
    meter = Throughput(warmup)
    trainer = pl.Trainer(
        accelerator=device,
        devices=1,
        max_epochs=1,
        limit_train_batches=batches + warmup,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[meter],
    )
    trainer.fit(model, datamodule=datamodule)
    return meter.docs / meter.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    parser.add_argument("--queries", type=int, default=18919)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=None, help="timed batches (default: CUDA an epoch, CPU 40)")
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    data = mslr_like(args.queries)
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    devices = [d for d in devices if d == "cpu" or torch.cuda.is_available()]
    epoch_batches = -(-data.num_queries // args.batch_size)
    print(f"# machine: {machine()}")
    print(
        f"# data: {data.num_queries} queries, {len(data.labels):,} documents, {data.num_features} features; "
        f"batch {args.batch_size} queries; {epoch_batches} batches an epoch"
    )
    print("| device | batches from | timed batches | documents/s | one epoch (s) | vs DataLoader |")
    print("|---|---|---:|---:|---:|---:|")
    for device in devices:
        default = epoch_batches - args.warmup if device == "cuda" else 40
        batches = min(args.batches or default, epoch_batches - args.warmup)
        reference = None
        for resident in (False, True):
            rate = run(data, "gpu" if device == "cuda" else "cpu", resident, batches, args.warmup, args.batch_size)
            reference = reference or rate
            name = "device-resident gather" if resident else "DataLoader + collate (reference)"
            print(
                f"| {device} | {name} | {batches} | {rate:,.0f} | {len(data.labels) / rate:.1f} | "
                f"{rate / reference:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
