"""Click logs: the reader (``read_click_log``), the simulator (``python -m datamodules.clicks simulate``)
and the datamodule of ``data=clicks``. See docs/clicks.md."""

from datamodules.clicks.io import ClickLog, ClickLogError, read_click_log, read_clicks, read_shown_features

__all__ = ["ClickLog", "ClickLogError", "read_click_log", "read_clicks", "read_shown_features"]
