"""Label ranking on multilabel data: the calibrated ranker, its neural version, binary relevance, ML-kNN.

    python -m bench.label_ranking --data emotions-train.arff emotions-test.arff emotions.xml \
        --data yeast-train.arff yeast-test.arff yeast.xml --plot label_ranking.png

With ``--cv K`` the test files are not read: each model is cross-validated on each training file
(``data.cv_folds=K``), the figures are means over the folds. ``--override`` applies to every run
(``--override data.scaling=zscore`` checks the scaling).

Each ``--data TRAIN TEST LABELS`` (LABELS: MULAN's XML, or k for the last k attributes) is run through
``train.py``'s pipeline with every model at its defaults (``model=calibrated_label_ranking``, the
same with ``model.share=1`` (Algorithm 1 alone), ``calibrated_label_ranking_mlp``, ``binary_relevance``;
``--models`` takes configs, each optionally followed by ``:`` and comma-separated overrides), plus
scikit-multilearn's ML-kNN (k=10) on the
same scaled arrays when it is installed. Prints one table per set (test metrics, fit seconds, and
each model's ratio to binary relevance), the mean over sets, and draws the ranking and Hamming losses.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench.timing import machine
from metrics.label_ranking import LABEL_RANKING_METRICS
from rankers.label_ranking.baselines import mlknn_scores
from rankers.pipeline import compose_config, train

# a model: its config, then ":" and comma-separated overrides of it where it has some
MODELS = {
    "calibrated (default)": "calibrated_label_ranking",
    "Algorithm 1 alone": "calibrated_label_ranking:model.share=1",
    "calibrated MLP": "calibrated_label_ranking_mlp",
    "binary relevance (LR)": "binary_relevance",
}
REFERENCE = "binary relevance (LR)"
COLUMNS = ("ranking_loss", "hamming_loss", "coverage", "average_precision", "one_error")


def data_overrides(train_path: str, test_path: str, labels: str) -> list[str]:
    label_option = f"data.n_labels={labels}" if labels.isdigit() else f"data.labels={labels}"
    return ["data=multilabel", f"data.train={train_path}", f"data.test={test_path}", label_option]


def run_model(model: str, overrides: list[str], out: Path, seed: int) -> dict:
    config, _, options = model.partition(":")
    own = [option for option in options.split(",") if option]
    cfg = compose_config(
        [f"model={config}", *own, *overrides, f"seed={seed}", "~logger", "~callbacks.progress_bar",
         "+trainer.enable_progress_bar=false", "export=false"],
        output_dir=out / model.replace(":", "_").replace(",", "_").replace("=", "-"),
    )  # fmt: skip
    results = train(cfg)
    return {**results["test"], "fit_seconds": results["fit_seconds"]}


def run_mlknn(overrides: list[str], out: Path) -> dict | None:
    """ML-kNN on the datamodule's arrays, scaled as the models see them."""
    from hydra.utils import instantiate

    cfg = compose_config(["model=binary_relevance", *overrides], output_dir=out / "mlknn")
    module = instantiate(cfg.data)
    module.setup("fit")
    scaler = module.model_inputs()["scaler"]
    (x, y), (tx, ty) = module.arrays("train"), module.arrays("test")
    with torch.no_grad():
        x, tx = scaler(torch.from_numpy(x)).numpy(), scaler(torch.from_numpy(tx)).numpy()
    start = time.perf_counter()
    scores = mlknn_scores(x, y, tx)
    seconds = time.perf_counter() - start
    if scores is None:
        return None
    s, labels = torch.from_numpy(scores), torch.from_numpy(ty)
    return {**{n: float(f(s, labels).mean()) for n, f in LABEL_RANKING_METRICS.items()}, "fit_seconds": seconds}


def run_set(models: list[str], overrides: list[str], out: Path, seed: int, names: dict[str, str]) -> dict:
    rows = {names.get(m, m): run_model(m, overrides, out, seed) for m in models}
    mlknn = run_mlknn(overrides, out)
    if mlknn is not None:
        rows["ML-kNN (k=10)"] = mlknn
    return rows


def table(name: str, rows: dict[str, dict]) -> str:
    reference = rows[REFERENCE]
    lines = [
        f"\n{name}",
        f"{'model':<24}" + "".join(f"{c:>18}" for c in COLUMNS) + f"{'fit s':>9}{'rank/BR':>9}{'hamm/BR':>9}",
    ]
    for model, row in rows.items():
        lines.append(
            f"{model:<24}"
            + "".join(f"{row[c]:>18.4f}" for c in COLUMNS)
            + f"{row['fit_seconds']:>9.2f}"
            + f"{row['ranking_loss'] / reference['ranking_loss']:>9.3f}"
            + f"{row['hamming_loss'] / reference['hamming_loss']:>9.3f}"
        )
    return "\n".join(lines)


def plot(results: dict[str, dict[str, dict]], path: str) -> None:
    """Each model's ranking and Hamming loss as a ratio to binary relevance's, per set (below 1: better)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets, models = list(results), [m for m in next(iter(results.values())) if m != REFERENCE]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    width = 0.8 / len(models)
    for ax, metric in zip(axes, ("ranking_loss", "hamming_loss"), strict=True):
        for i, model in enumerate(models):
            values = [results[s][model][metric] / results[s][REFERENCE][metric] for s in sets]
            ax.bar(np.arange(len(sets)) + i * width, values, width, label=model)
        ax.axhline(1.0, color="black", lw=1, label=REFERENCE)
        ax.set_xticks(np.arange(len(sets)) + width * (len(models) - 1) / 2, sets)
        ax.set_title(f"test {metric.replace('_', ' ')} / binary relevance's (below 1: better)")
        ax.set_ylim(0.8, 1.2)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs=3, action="append", required=True, metavar=("TRAIN", "TEST", "LABELS"),
                        help="a train/test pair and its MULAN XML (or k: the last k attributes)")  # fmt: skip
    parser.add_argument("--models", nargs="+", default=list(MODELS.values()),
                        help="model configs to run, each config[:override,...]")  # fmt: skip
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--cv", type=int, default=0, metavar="K",
                        help="K-fold cross-validation on each TRAIN file instead of the test file")  # fmt: skip
    parser.add_argument("--override", nargs="*", default=[], help="overrides for every run, e.g. data.scaling=zscore")
    parser.add_argument("--plot", default=None, help="PNG of the ranking and Hamming losses")
    parser.add_argument("--json", default=None, help="write every figure here")
    args = parser.parse_args(argv)
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    print(f"machine: {machine()}")
    names = {config: label for label, config in MODELS.items()}
    results: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for train_path, test_path, labels in args.data:
            name = Path(train_path).stem.removesuffix("-train")
            overrides = [*data_overrides(train_path, test_path, labels), *args.override]
            folds = [[f"data.cv_folds={args.cv}", f"data.cv_fold={i}"] for i in range(args.cv)] if args.cv else [[]]
            per_fold = [
                run_set(args.models, [*overrides, *fold], Path(tmp) / name / f"fold{i}", args.seed, names)
                for i, fold in enumerate(folds)
            ]
            rows = {m: {c: float(np.mean([f[m][c] for f in per_fold])) for c in per_fold[0][m]} for m in per_fold[0]}
            results[name] = rows
            if REFERENCE in rows:
                print(table(f"{name} ({args.cv}-fold CV on the training file)" if args.cv else name, rows), flush=True)
    if len(results) > 1 and all(REFERENCE in r for r in results.values()):
        mean = {m: {c: float(np.mean([r[m][c] for r in results.values()])) for c in (*COLUMNS, "fit_seconds")}
                for m in next(iter(results.values()))}  # fmt: skip
        print(table(f"mean over {len(results)} sets", mean))
    if args.plot:
        plot(results, args.plot)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
