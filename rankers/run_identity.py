"""Which run a checkpoint belongs to, so that no run silently continues from another's weights.

Every checkpoint holds ``checkpoint["run_identity"] = run_identity(cfg)``:
``{"model": cfg.model._target_, "fingerprint": sha256 of the resolved model and data config}``. The
trainer's settings (epochs, devices), the output folder and ``ckpt_path`` are not part of it: a run
resumed with more epochs or on other hardware is the same run. Lightning's loop writes it through
``rankers.callbacks.RunIdentity``; the learner harness writes the same key.

Two refusals, both before training (:class:`RunConflict`, one line and exit 2 from ``train.py``):

- resuming (``ckpt_path=``) from a checkpoint whose identity differs from this run's, or that has none;
- a run directory whose ``checkpoints/`` already holds checkpoints, unless this run resumes from one
  of them (Lightning would otherwise write ``last-v1.ckpt`` beside the old run's ``last.ckpt``, and
  the resume advice would name the old run's file).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

KEY = "run_identity"


class RunConflict(Exception):
    """A run that would mix with another run's checkpoints (wrong resume file, reused run directory)."""


def run_identity(cfg: DictConfig) -> dict[str, str]:
    """``{"model": cfg.model._target_, "fingerprint": <sha256 hex of the resolved model + data config>}``."""
    resolved = {
        part: OmegaConf.to_container(cfg[part], resolve=True) if part in cfg and cfg[part] is not None else None
        for part in ("model", "data")
    }
    text = json.dumps(resolved, sort_keys=True, default=str)
    return {"model": str(cfg.model.get("_target_", "")), "fingerprint": hashlib.sha256(text.encode()).hexdigest()}


def describe(identity: dict[str, str] | None) -> str:
    if not identity:
        return "no run identity"
    return f"{identity.get('model')} (config {str(identity.get('fingerprint'))[:12]})"


def checkpoint_identity(path: str | Path) -> dict[str, str] | None:
    """The ``run_identity`` stored in a checkpoint file (None when it has none); the tensors are only
    mapped, not read."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except RuntimeError:  # an old-format (not zip) file cannot be mapped
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    return checkpoint.get(KEY) if isinstance(checkpoint, dict) else None


def refuse_foreign(stored: dict[str, str] | None, identity: dict[str, str], path: str | Path) -> None:
    """RunConflict unless a checkpoint's ``stored`` identity is this run's ``identity``."""
    if stored == identity:
        return
    raise RunConflict(
        f"refusing to resume from {path}: it belongs to {describe(stored)}, this run is {describe(identity)}; "
        "resume with the model and data settings of the run that wrote it, or start without ckpt_path"
    )


def refuse_foreign_checkpoint(path: str | Path, identity: dict[str, str]) -> None:
    """RunConflict unless the checkpoint file at ``path`` was written by a run with ``identity``."""
    if not Path(path).is_file():
        raise RunConflict(f"ckpt_path={path}: no such checkpoint file")
    refuse_foreign(checkpoint_identity(path), identity, path)


def refuse_reused_directory(checkpoint_dir: str | Path, ckpt_path: str | Path | None) -> None:
    """RunConflict when ``checkpoint_dir`` already holds checkpoints and this run does not resume from
    one of them."""
    folder = Path(checkpoint_dir)
    existing = sorted(folder.glob("*.ckpt")) if folder.is_dir() else []
    if not existing:
        return
    if ckpt_path is not None and Path(ckpt_path).resolve().parent == folder.resolve():
        return
    resume = folder / "last.ckpt" if (folder / "last.ckpt").exists() else existing[-1]
    raise RunConflict(
        f"{folder.parent} already holds another run ({len(existing)} checkpoints in {folder}): give this run "
        f"its own hydra.run.dir, or resume that run with ckpt_path={resume}"
    )
