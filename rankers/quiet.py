"""Third-party notices that say nothing about the user's run, silenced one by one at their source.

Each filter names the exact message and where it comes from; nothing here hides a warning of ours,
nor another warning of the same libraries. ``quiet_third_party()`` is idempotent.
"""

from __future__ import annotations

import logging
import warnings

# torch.onnx's exporter, on every export: "torchvision is not installed. Skipping torchvision::nms"
# (it registers torchvision's operators when it can; our scorers use none of them)
ONNX_REGISTRATION_LOGGER = "torch.onnx._internal.exporter._registration"
# torch deprecated `LeafSpec` (torch.utils._pytree); pytorch_lightning's own pytree helper builds one
# per training step's output and torch.export deep-copies them when the scorer is exported to ONNX
LEAFSPEC_DEPRECATION = r"`isinstance\(treespec, LeafSpec\)` is deprecated"
# Lightning's advertisements for its cloud services, printed at every fit
LIGHTNING_RANK_ZERO_LOGGER = "pytorch_lightning.utilities.rank_zero"
LIGHTNING_TIP = "💡 Tip:"


class _DropMessages(logging.Filter):
    """Drop records whose message starts with one of ``prefixes``."""

    def __init__(self, *prefixes: str) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefixes)


def _add_once(logger_name: str, drop: _DropMessages) -> None:
    logger = logging.getLogger(logger_name)
    if not any(isinstance(existing, _DropMessages) for existing in logger.filters):
        logger.addFilter(drop)


def quiet_third_party() -> None:
    """Install the filters (see the module docstring)."""
    _add_once(ONNX_REGISTRATION_LOGGER, _DropMessages("torchvision is not installed"))
    _add_once(LIGHTNING_RANK_ZERO_LOGGER, _DropMessages(LIGHTNING_TIP))
    warnings.filterwarnings("ignore", message=LEAFSPEC_DEPRECATION, category=FutureWarning)
