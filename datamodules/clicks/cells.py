"""A click log aggregated to cells: one per (shown document row, position), with its impressions and
clicks. Every estimator (regression EM, intervention harvesting, the IPS targets) reads these."""

from __future__ import annotations

import numpy as np


class ClickCells:
    """``row [C]`` features row, ``position [C]`` 1-based, ``impressions [C]``, ``clicks [C]`` (int64);
    ``query [C]`` the row's query index; ``sessions [Q]`` sessions per query of the features file.

    A plain class, not a dataclass: Hydra would turn a dataclass argument into a config."""

    def __init__(
        self,
        row: np.ndarray,
        position: np.ndarray,
        impressions: np.ndarray,
        clicks: np.ndarray,
        query: np.ndarray,
        sessions: np.ndarray,
    ) -> None:
        self.row, self.position, self.impressions, self.clicks = row, position, impressions, clicks
        self.query, self.sessions = query, sessions

    @property
    def max_position(self) -> int:
        return int(self.position.max()) if len(self.position) else 0

    def subset(self, keep: np.ndarray) -> ClickCells:
        """Cells whose ``keep [C]`` is True (``sessions`` kept whole)."""
        return ClickCells(
            self.row[keep],
            self.position[keep],
            self.impressions[keep],
            self.clicks[keep],
            self.query[keep],
            self.sessions,
        )


def aggregate(
    row: np.ndarray, position: np.ndarray, click: np.ndarray, session: np.ndarray, offsets: np.ndarray
) -> ClickCells:
    """Cells of per-entry arrays ``[n]`` (features row, position, click, session); ``offsets [Q+1]``
    of the features file give each row's query."""
    k = int(position.max())
    code = row.astype(np.int64) * k + (position - 1)
    cells, inverse = np.unique(code, return_inverse=True)
    impressions = np.bincount(inverse, minlength=len(cells)).astype(np.int64)
    clicks = np.bincount(inverse, weights=click, minlength=len(cells)).astype(np.int64)
    cell_row = cells // k
    query_of = np.searchsorted(offsets, cell_row, side="right") - 1
    entry_query = np.searchsorted(offsets, row, side="right") - 1
    first = np.unique(session, return_index=True)[1]
    sessions = np.bincount(entry_query[first], minlength=len(offsets) - 1).astype(np.int64)
    return ClickCells(cell_row, cells % k + 1, impressions, clicks, query_of, sessions)
