"""The run's log file, as Hydra's job logging opens it (``conf/hydra/default.yaml``)."""

from __future__ import annotations

import logging


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
