"""A time budget that stops a fit only at safe points: a deadline the fits poll, never a signal.

``model=auto`` gives each candidate's fold fit a deadline (``with deadline(seconds): ...``). What polls it:

- learners, between rounds / epochs / folds, through ``FitLog.should_stop()`` (the harness's log answers
  True once the deadline has passed: the learner returns what it has, the harness does not treat it as
  an interruption);
- gradient-trained models through ``BudgetCallback`` (a Lightning callback: after every training batch
  it sets ``trainer.should_stop``, Lightning's own way to end a fit between steps);
- ``model=auto`` itself, after the fit returns: ``check()`` raises ``BudgetExceeded`` in our code, and the
  candidate is dropped (a fit stopped early is never scored as if complete).

No SIGALRM: an exception raised by a signal handler lands wherever the main thread is, inside Hydra's
instantiate or a C extension's callback, and comes out wrapped or not at all (issue 41).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from typing import Any

import pytorch_lightning as pl

__all__ = ["BudgetCallback", "BudgetExceeded", "check", "deadline", "expired", "remaining"]

_deadline = math.inf  # perf_counter time; inf: no budget running


class BudgetExceeded(Exception):
    """A fit ran past the time its budget left it."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Within the block, ``expired()`` is True once ``seconds`` have passed (inf: never). Nests: the
    earlier deadline wins."""
    global _deadline
    previous = _deadline
    _deadline = min(previous, time.perf_counter() + seconds)
    try:
        yield
    finally:
        _deadline = previous


def remaining() -> float:
    """Seconds left before the running deadline (inf without one)."""
    return _deadline - time.perf_counter()


def expired() -> bool:
    """True once the running deadline has passed (a learner's and a callback's safe-point poll)."""
    return time.perf_counter() >= _deadline


def check(what: str = "the fit") -> None:
    """Raise ``BudgetExceeded`` (in the caller's own code) when the deadline has passed."""
    if expired():
        raise BudgetExceeded(f"{what} ran past the budget")


class BudgetCallback(pl.Callback):
    """Ends a Lightning fit between training steps once the running deadline has passed.

    ``raise_at_epoch_end=True`` is for a trainer whose ``min_epochs`` overrides ``should_stop`` (epoch
    selection's fixed-length fits): it raises ``BudgetExceeded`` from the epoch-end hook (a safe point;
    Lightning tears the fit down and re-raises it)."""

    def __init__(self, raise_at_epoch_end: bool = False) -> None:
        self.raise_at_epoch_end = raise_at_epoch_end

    def _poll(self, trainer: pl.Trainer) -> None:
        if expired():
            trainer.should_stop = True

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self._poll(trainer)

    def on_validation_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self._poll(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if self.raise_at_epoch_end:
            check("an epoch-selection fit")
        self._poll(trainer)
