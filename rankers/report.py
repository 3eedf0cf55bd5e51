"""``OUT/report.png``: a run at a glance for people without TensorBoard open.

Left, the curves the run logged (validation metrics and the training loss per step, read back from
its TensorBoard events); right, the test metrics beside those of random scores. Drawn with
matplotlib's Agg backend (no display needed). A report that cannot be drawn is logged and skipped:
it never fails a run that trained.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from rankers.outputs import save_figure

log = logging.getLogger(__name__)


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar the run's TensorBoard event files hold: ``{tag: [(step, value), ...]}``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    curves: dict[str, list[tuple[int, float]]] = {}
    for events in sorted(Path(run_dir).rglob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            curves.setdefault(tag, []).extend((event.step, event.value) for event in accumulator.Scalars(tag))
    return {tag: sorted(points) for tag, points in curves.items()}


def _curves_to_draw(scalars: dict[str, list[tuple[int, float]]]) -> tuple[dict, dict]:
    """Validation metrics (not their running best, not the loss, not counts such as RankBoost's
    ``val/rounds``, which would flatten the metrics' axis) and one training loss curve."""
    validation = {
        tag: points
        for tag, points in scalars.items()
        if tag.startswith("val/") and not tag.endswith(("_best", "/rounds")) and tag != "val/loss"
    }
    training = {tag: scalars[tag] for tag in ("train/loss_epoch", "train/loss_step") if tag in scalars}
    return validation, dict(list(training.items())[:1])


def write_report(out: str | Path, results: dict[str, Any], *, title: str = "") -> Path | None:
    """Draw ``out/report.png`` from the run's events under ``out`` and its ``results``; None when
    there is nothing to draw or matplotlib is missing."""
    out = Path(out)
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        log.info("no report.png: matplotlib is not installed")
        return None
    validation, training = _curves_to_draw(read_scalars(out))
    test, random = results.get("test") or {}, results.get("test_random_scores") or {}
    if not (validation or training or test):
        return None
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    _draw_curves(left, validation, training)
    _draw_test(right, test, random)
    figure.suptitle(title or out.name)
    figure.tight_layout()
    path = out / "report.png"
    save_figure(figure, path, "report", dpi=90)
    plt.close(figure)
    return path


def _draw_curves(axes, validation: dict, training: dict) -> None:
    for tag, points in validation.items():
        steps, values = zip(*points, strict=True)
        axes.plot(steps, values, marker="o", markersize=3, label=tag)
    axes.set_xlabel("training step")
    axes.set_ylabel("validation metric")
    if training:
        loss_axes = axes.twinx()
        ((tag, points),) = training.items()
        steps, values = zip(*points, strict=True)
        loss_axes.plot(steps, values, color="grey", alpha=0.5, linewidth=1, label=tag)
        loss_axes.set_ylabel(tag, color="grey")
    if validation:
        axes.legend(loc="best", fontsize=8)
    axes.set_title("validation" if validation else "training loss (no validation split)")


def _draw_test(axes, test: dict[str, float], random: dict[str, float]) -> None:
    names = [name for name, value in test.items() if isinstance(value, int | float)]
    if not names:
        axes.axis("off")
        axes.text(0.5, 0.5, "no test split", ha="center", va="center")
        return
    positions = range(len(names))
    width = 0.4 if random else 0.8
    bars = axes.bar([p - width / 2 * bool(random) for p in positions], [test[n] for n in names], width, label="model")
    axes.bar_label(bars, fmt="%.3f", fontsize=8)
    if random:
        axes.bar([p + width / 2 for p in positions], [random.get(n, 0.0) for n in names], width, label="random scores")
    axes.set_xticks(list(positions), names, rotation=30)
    axes.set_title("test")
    axes.legend(fontsize=8)
