"""Callbacks used by the default configuration."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from omegaconf import DictConfig

from rankers.run_identity import (
    CONFIG_KEY,
    KEY,
    refuse_foreign,
    refuse_foreign_checkpoint,
    refuse_reused_directory,
    run_config,
    run_identity,
)


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


class RunIdentity(pl.Callback):
    """Stamps every checkpoint with the run's identity (``rankers.run_identity``) and refuses, before
    training, a resume from another run's checkpoint or a checkpoint folder that holds another run."""

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg, self.identity, self.config = cfg, run_identity(cfg), run_config(cfg)
        self.ckpt_path = cfg.get("ckpt_path")  # trainer.ckpt_path is set only after setup

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        saver = trainer.checkpoint_callback
        folder = saver.dirpath if saver is not None else None
        # here, before Lightning restores the module's weights (it calls on_load_checkpoint after that)
        if self.ckpt_path:
            refuse_foreign_checkpoint(self.ckpt_path, self.cfg, folder, self.identity)
        if folder:
            refuse_reused_directory(folder, self.ckpt_path)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        checkpoint[KEY] = dict(self.identity)
        checkpoint[CONFIG_KEY] = self.config

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        if trainer.state.fn == "fit":  # validate/test of a fit's own best checkpoint need no check
            refuse_foreign(checkpoint, self.identity, trainer.ckpt_path or self.ckpt_path, self.config)
