"""Shared fixtures: the real Hydra config, composed with small data for fast runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from rankers.pipeline import compose_config

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

TINY = [
    "data.n_train_queries=120",
    "data.n_val_queries=30",
    "data.n_test_queries=30",
    "data.mean_docs=12",
    "data.num_features=8",
    "data.batch_size=16",
    "model.scorer.hidden=[16]",
    "model.optimizer.lr=0.01",
    "trainer.max_epochs=3",
    "trainer.log_every_n_steps=1",
    "callbacks.progress_bar.refresh_rate=0",
]


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """Generated data and parse cache shared by every test of the session."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture
def make_cfg(tmp_path: Path, data_dir: Path) -> Callable[..., DictConfig]:
    """``make_cfg(*overrides, out=...)``: the composed config of ``train.py`` with tiny data."""

    def build(*overrides: str, out: Path | None = None, tiny: bool = True) -> DictConfig:
        all_overrides = [*(TINY if tiny else []), *overrides]
        return compose_config(all_overrides, output_dir=out or tmp_path / "run", data_dir=data_dir)

    yield build
    GlobalHydra.instance().clear()


def cuda_only(fn):
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")(fn))
