"""The project's error for input it cannot use: every reader's own error type derives from it, so
that ``train.py`` ends such a run with one line saying what is wrong and where (file, line), and a
non-zero exit, instead of a traceback from deep inside."""

from __future__ import annotations


class DataError(ValueError):
    """Input that cannot be used: a malformed file (the message names file and line), or data with
    nothing to learn from (the message names the file and the settings that would change that)."""
