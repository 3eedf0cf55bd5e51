"""Writing what a run produces (checkpoints, exports, results, tables, figures) so that a full disk
or an unwritable folder ends the run with one line naming the file and what was being written, and
leaves nothing partial that a later run or resume would load.

Every file goes to a private temporary name beside its target and is renamed onto it when complete
(``os.replace``: atomic within one folder, NFS included); an export folder is built aside and swapped
in whole. An ``OSError`` on the way becomes an :class:`OutputError`; ``train.py`` prints its message
and exits with :data:`EXIT_OUTPUT_ERROR`.

results.json never holds NaN or infinity (``json.dumps`` writes them as ``NaN``, which is not JSON
and reads back as a number nobody can compare): :func:`write_results` writes each as ``null`` and
lists where and why under ``"absent"``.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from datamodules.atomic import atomic_path, private_sibling

# sysexits.h's EX_IOERR: the run could not write its output (distinct from 2, input refused)
EXIT_OUTPUT_ERROR = 74


class OutputError(Exception):
    """A run output that could not be written: ``what`` (e.g. "checkpoint"), ``path`` and why."""

    def __init__(self, what: str, path: str | os.PathLike, error: BaseException) -> None:
        self.what, self.path, self.error = what, Path(path), error
        if isinstance(error, OSError):
            reason = f"{error.strerror or error} (errno {error.errno})"
        else:  # torch's C++ writers report a full disk as a RuntimeError without an errno
            reason = f"the writer failed ({str(error).strip().splitlines()[-1]}){_free_space(Path(path))}"
        super().__init__(f"cannot write the {what} {path}: {reason}")


def _free_space(path: Path) -> str:
    for folder in (path, *path.parents):
        if folder.exists():
            return f" with {shutil.disk_usage(folder).free} bytes free on {folder}'s disk"
    return ""


# how torch's C++ stream writers (torch.save, torch.jit.save) report a failed write
_WRITER_FAILURE = re.compile(r"iostream error|PytorchStreamWriter failed|file write failed|No space left", re.I)


def write_failure(error: BaseException) -> BaseException | None:
    """The ``OSError`` (or torch writer's ``RuntimeError``) behind ``error``, if a failed write caused it."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) or (isinstance(current, RuntimeError) and _WRITER_FAILURE.search(str(current))):
            return current
        current = current.__cause__ or current.__context__
    return None


@contextmanager
def writing(what: str, path: str | os.PathLike) -> Iterator[None]:
    """Turn a failed write (an ``OSError``, or torch's writers' ``RuntimeError``) while writing ``path``
    into an :class:`OutputError` naming it."""
    try:
        yield
    except OutputError:
        raise
    except Exception as error:
        failure = write_failure(error)
        if failure is None:
            raise
        raise OutputError(what, path, failure) from error


@contextmanager
def atomic_file(path: str | os.PathLike, what: str) -> Iterator[Path]:
    """Yield a private temporary name for ``path`` (same folder and suffix); on success it replaces
    ``path`` at once (``datamodules.atomic.atomic_path``). On any failure the temporary file goes and
    ``path`` keeps its old content; a failed write becomes an :class:`OutputError` naming ``path``."""
    with writing(what, path), atomic_path(path) as partial:
        yield partial


def write_text(path: str | os.PathLike, text: str, what: str) -> Path:
    """``path.write_text(text)``, atomically (see :func:`atomic_file`)."""
    with atomic_file(path, what) as partial:
        partial.write_text(text)
    return Path(path)


def save_figure(figure: Any, path: str | os.PathLike, what: str = "figure", **options: Any) -> Path:
    """``figure.savefig(path)`` atomically; the format comes from ``path``'s suffix."""
    path = Path(path)
    with atomic_file(path, what) as partial:
        figure.savefig(partial, format=path.suffix.lstrip(".") or "png", **options)
    return path


def finite_or_absent(value: Any, where: str = "") -> tuple[Any, dict[str, str]]:
    """``value`` with every non-finite float (NaN, +-inf, also one-element tensors and numpy scalars) replaced by
    None, and ``{"a.b.c": "nan"}`` naming each replaced entry by its key path."""
    absent: dict[str, str] = {}

    def clean(node: Any, path: str) -> Any:
        if isinstance(node, dict):
            return {key: clean(item, f"{path}.{key}" if path else str(key)) for key, item in node.items()}
        if isinstance(node, list | tuple):
            return [clean(item, f"{path}[{i}]") for i, item in enumerate(node)]
        if (isinstance(node, torch.Tensor) and node.numel() == 1) or isinstance(node, np.generic):
            node = node.item()
        if isinstance(node, float) and not math.isfinite(node):
            absent[path or "value"] = str(node)
            return None
        return node

    return clean(value, where), absent


def results_json(results: dict[str, Any], *, default: Any = None) -> str:
    """results as JSON text without NaN or infinity: each becomes null and ``"absent"`` says where
    (merged with the reasons a writer already put there)."""
    clean, absent = finite_or_absent(results)
    if absent:
        reasons = clean.get("absent") if isinstance(clean.get("absent"), dict) else {}
        clean["absent"] = {**{key: f"not finite ({value})" for key, value in absent.items()}, **reasons}
    return json.dumps(clean, indent=2, allow_nan=False, default=default)


def write_results(path: str | os.PathLike, results: dict[str, Any], *, default: Any = None) -> Path:
    """Write ``results`` to ``path`` (a results.json) atomically, non-finite numbers as null
    (:func:`results_json`); ``default`` as ``json.dumps``'s, for values JSON does not know."""
    return write_text(path, results_json(results, default=default) + "\n", "results file")


def save_torchscript(module: torch.jit.ScriptModule, path: str | os.PathLike, what: str = "TorchScript file") -> Path:
    """``torch.jit.save(module, path)``, atomically, through Python's file write: torch's C++ writer
    aborts the whole process on a full disk (an exception in a destructor), this reports ENOSPC."""
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    with atomic_file(path, what) as partial:
        partial.write_bytes(buffer.getbuffer())
    return Path(path)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, atomic: a checkpoint appears whole or not at all.

    Lightning's own ``_atomic_save`` serializes into memory, then writes straight into the target, so a
    full disk leaves a truncated ``last.ckpt`` that the next resume tries to load.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        # serialized in memory first (as Lightning does): Python's file write then reports a full
        # disk as ENOSPC, where torch.save's own C++ stream only says "iostream error"
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        with atomic_file(path, "checkpoint") as partial:
            partial.write_bytes(buffer.getbuffer())


@contextmanager
def atomic_directory(path: str | os.PathLike, what: str) -> Iterator[Path]:
    """Yield a private temporary folder beside ``path``; on success it replaces ``path`` (an older
    folder there is removed), so that ``path`` holds one complete set of files or its old ones.
    ``OSError`` becomes :class:`OutputError`; on any failure the temporary folder goes."""
    path = Path(path)
    with writing(what, path):
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = private_sibling(path).with_suffix("")
        partial.mkdir()
        try:
            try:
                yield partial
            except OutputError as error:  # a file inside: named where it was meant to end up
                raise OutputError(error.what, moved(error.path, partial, path), error.error) from error
            old = None
            if path.exists():
                old = private_sibling(path).with_suffix(".old")
                os.rename(path, old)
            os.rename(partial, path)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(partial, ignore_errors=True)


def moved(value: Any, source: Path, target: Path) -> Any:
    """``value`` (paths a writer returned, nested in dicts and lists) with the folder ``source``
    renamed ``target``: what an exporter into :func:`atomic_directory`'s folder reports."""
    if isinstance(value, dict):
        return {key: moved(item, source, target) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [moved(item, source, target) for item in value]
    if isinstance(value, str | Path) and str(value).startswith(str(source)):
        return type(value)(str(target) + str(value)[len(str(source)) :])
    return value
