"""The run's log file, as Hydra's job logging opens it (``conf/hydra/default.yaml``)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from rankers.outputs import EXIT_OUTPUT_ERROR


class RunLogFileHandler(logging.FileHandler):
    """``logging.FileHandler`` for ``OUT/train.log`` that turns an unwritable run directory into a
    clear exit instead of logging's "Unable to configure handler 'file'" (SystemExit passes through
    ``logging.config.dictConfig``, which wraps every Exception)."""

    def __init__(self, filename: str, *args, **kwargs) -> None:
        try:
            super().__init__(filename, *args, **kwargs)
        except OSError as error:
            raise SystemExit(
                f"error: cannot write the run's log file {filename}: {error.strerror or error}. "
                "The run directory (hydra.run.dir) must be a writable directory."
            ) from None


class RunDirectoryCheck(Callback):
    """Hydra callback: a run directory that cannot be created (a path under a regular file, no
    permission, a full disk) ends the run with one line and exit 74, before Hydra's own
    ``mkdir`` would fail with a traceback from pathlib."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        create_run_directory(config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        create_run_directory(config.hydra.sweep.dir)


def create_run_directory(path: str) -> None:
    """``mkdir -p path``, or a one-line message on stderr and ``SystemExit(74)``."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        print(
            f"error: cannot create the run directory {path} (hydra.run.dir): {error.strerror or error}",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_OUTPUT_ERROR) from None
