"""Callbacks used by the default configuration."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch


class EpochSeed(pl.Callback):
    """Reseed torch, numpy and random from ``(seed, epoch, batch)`` before every training batch.

    Lightning restores weights, optimizer and loop state from a checkpoint but not the global RNG,
    and loaders and sanity checks draw from it a different number of times in a resumed run. So
    without this a resumed run draws other dropout masks than an uninterrupted one. Seeding per
    batch (not per epoch) also covers a resume from the middle of an epoch.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        step_seed = int(np.random.default_rng([self.seed, trainer.current_epoch, batch_idx]).integers(2**31))
        torch.manual_seed(step_seed + trainer.global_rank)
        np.random.seed(step_seed)
        random.seed(step_seed)
