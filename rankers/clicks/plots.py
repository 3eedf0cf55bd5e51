"""The propensity plot: estimated examination probability against position."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_propensities(
    estimates: dict[str, dict[str, Any]], path: Path, truth: list[float] | None = None, title: str = ""
) -> Path:
    """One line per estimate (``{"em": {"propensity": [...], "stderr": [...]}, ...}``), error bars where
    given, the simulation's truth dashed when known; written to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(4.5, 3.2), dpi=100)
    for name, estimate in estimates.items():
        values = estimate["propensity"]
        positions = range(1, len(values) + 1)
        axis.errorbar(positions, values, yerr=estimate.get("stderr"), marker="o", ms=3, capsize=2, label=name)
    if truth is not None:
        axis.plot(range(1, len(truth) + 1), truth, "k--", lw=1, label="truth")
    axis.set_xlabel("position")
    axis.set_ylabel("examination (position 1 = 1)")
    axis.set_yscale("log")
    axis.set_title(title or "propensity")
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path
