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
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

KEY = "run_identity"
# ckpt_path values Lightning resolves itself, within this run's checkpoint folder
LIGHTNING_KEYWORDS = frozenset({"last", "best", "hpc", "registry"})
# beside it, the resolved config the fingerprint hashes, so that a refusal can say what differs
CONFIG_KEY = "run_config"


class RunConflict(Exception):
    """A run that would mix with another run's checkpoints (wrong resume file, reused run directory)."""


def run_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved ``model`` and ``data`` config (JSON types): what the fingerprint hashes."""
    resolved = {
        part: OmegaConf.to_container(cfg[part], resolve=True) if part in cfg and cfg[part] is not None else None
        for part in ("model", "data")
    }
    return json.loads(json.dumps(resolved, default=str))


def run_identity(cfg: DictConfig) -> dict[str, str]:
    """``{"model": cfg.model._target_, "fingerprint": <sha256 hex of the resolved model + data config>}``."""
    text = json.dumps(run_config(cfg), sort_keys=True)
    return {"model": str(cfg.model.get("_target_", "")), "fingerprint": hashlib.sha256(text.encode()).hexdigest()}


def differences(stored: dict[str, Any] | None, ours: dict[str, Any] | None, limit: int = 4) -> str:
    """``"model.loss: a (checkpoint) vs b (this run); ..."`` for the first ``limit`` differing keys."""
    found: list[str] = []

    def walk(a: Any, b: Any, path: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b), key=str):
                walk(a.get(key, "<unset>"), b.get(key, "<unset>"), f"{path}.{key}" if path else str(key))
        elif a != b:
            found.append(f"{path}: {a} (checkpoint) vs {b} (this run)")

    walk(stored or {}, ours or {}, "")
    return "; ".join(found[:limit]) + (f"; and {len(found) - limit} more" if len(found) > limit else "")


def describe(identity: dict[str, str] | None) -> str:
    if not identity:
        return "a run of unknown identity (the checkpoint records none)"
    return f"{identity.get('model')} (config {str(identity.get('fingerprint'))[:12]})"


def _read(path: str | Path) -> dict[str, Any]:
    """A checkpoint's top-level entries; the tensors are only mapped, not read."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except RuntimeError:  # an old-format (not zip) file cannot be mapped
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    return checkpoint if isinstance(checkpoint, dict) else {}


def checkpoint_identity(path: str | Path) -> dict[str, str] | None:
    """The ``run_identity`` stored in a checkpoint file (None when it has none)."""
    return _read(path).get(KEY)


def refuse_foreign(
    checkpoint: dict[str, Any], identity: dict[str, str], path: Any, config: dict[str, Any] | None = None
) -> None:
    """RunConflict unless ``checkpoint``'s stored identity is this run's ``identity``; with this run's
    resolved ``config`` the message names the settings that differ."""
    stored = checkpoint.get(KEY)
    if stored == identity:
        return
    differing = differences(checkpoint.get(CONFIG_KEY), config) if CONFIG_KEY in checkpoint and config else ""
    raise RunConflict(
        f"refusing to resume from {path}: it belongs to {describe(stored)}, this run is {describe(identity)}"
        + (f" ({differing})" if differing else "")
        + "; resume with the model and data settings of the run that wrote it, or start without ckpt_path"
    )


def resolve_ckpt_path(ckpt_path: str | Path, checkpoint_dir: str | Path | None) -> Path | None:
    """The file a ``ckpt_path`` names: itself, or for Lightning's ``last`` the newest ``last*.ckpt`` in
    ``checkpoint_dir`` (None when there is none, and for the other keywords)."""
    if str(ckpt_path) not in LIGHTNING_KEYWORDS:
        return Path(ckpt_path)
    if str(ckpt_path) != "last" or checkpoint_dir is None or not Path(checkpoint_dir).is_dir():
        return None
    candidates = sorted(Path(checkpoint_dir).glob("last*.ckpt"), key=lambda p: p.stat().st_mtime_ns)
    return candidates[-1] if candidates else None


def refuse_foreign_checkpoint(
    path: str | Path, cfg: DictConfig, checkpoint_dir: str | Path | None = None, identity: dict | None = None
) -> None:
    """RunConflict unless the checkpoint ``path`` names (``last``: in ``checkpoint_dir``) was written by
    a run with ``cfg``'s identity; checked before Lightning loads any weights from it."""
    file = resolve_ckpt_path(path, checkpoint_dir)
    if file is None:
        return
    if not file.is_file():
        raise RunConflict(f"ckpt_path={path}: no such checkpoint file")
    refuse_foreign(_read(file), identity or run_identity(cfg), file, run_config(cfg))


def refuse_reused_directory(checkpoint_dir: str | Path, ckpt_path: str | Path | None) -> None:
    """RunConflict when ``checkpoint_dir`` already holds checkpoints and this run does not resume from
    one of them."""
    folder = Path(checkpoint_dir)
    existing = sorted(folder.glob("*.ckpt")) if folder.is_dir() else []
    if not existing:
        return
    if ckpt_path is not None and (
        str(ckpt_path) in LIGHTNING_KEYWORDS or Path(ckpt_path).resolve().parent == folder.resolve()
    ):
        return
    resume = folder / "last.ckpt" if (folder / "last.ckpt").exists() else existing[-1]
    raise RunConflict(
        f"{folder.parent} already holds another run ({len(existing)} checkpoints in {folder}): give this run "
        f"its own hydra.run.dir, or resume that run with ckpt_path={resume}"
    )
