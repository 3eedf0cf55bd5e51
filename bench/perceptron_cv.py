"""Cross-validate the pairwise perceptron family's settings on a LETOR file, straight on the learner.

The figures behind the committee perceptron's defaults (docs/committee_perceptron.md): for each
fold (``bench/letor_peers.py``'s folds, no validation file), z-score on the training split, fit the
quantile thresholds there (or not), run ``--runs`` seeds of every committee size for the largest
``--passes`` as one tensor, and after each listed pass score the test split with trec_eval's
``ndcg_cut_10``:

* ``committee K vote|weight``: the seeds of size K pooled (every member votes its count / the mean
  of their count-weighted scorers), as ``model=committee_perceptron`` with ``model.pool_runs=true``;
* ``averaged``: the averaged perceptron of one seed (the mean over seeds of that single-seed score),
  the reference every other row is paired against; ``averaged pooled``: the seeds' mean scorer.

``--raw-columns features cdf none`` runs each setting with those first F columns (the features as
normalized, their training CDF, or none) and pairs every row against the same row under the first.

No Lightning and no export: a grid of settings runs in minutes. ``--small`` swaps the splits (one
fold trains, the others test). Example:

    python -m bench.perceptron_cv --train train_full.txt --seeds 0 1 2 3 4 5 6 7 --bins 32 64 --scales 0.1 0.25
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch

from bench.committee_perceptron import query_pairs
from bench.letor_peers import folds, trec_metrics
from datamodules.feature_maps import CDF_SCALE, QuantileThresholds, sorted_columns
from datamodules.letor_io import LetorData, read_letor
from datamodules.normalization import FeatureNormalizer
from rankers.pairwise_perceptron.perceptron import PairwisePerceptron, pass_orders


def raw_columns_of(
    train: torch.Tensor, test: torch.Tensor, kind: str, mapper: QuantileThresholds, cdf_factor: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first F columns beside the indicators, for the training and test documents ``[n, F]``:
    ``features`` as given; ``cdf`` the library's ``QuantileCDF`` (fitted in ``mapper``), rescaled to
    ``cdf_factor`` at the top (sqrt(12) in the library); ``exact`` the share of training documents at
    or below each value (every training value a knot; a comparison, not in the library), times
    ``cdf_factor``; ``none`` no columns."""
    if kind == "features":
        return train, test
    if kind == "none":
        return train[:, :0], test[:, :0]
    if kind == "cdf":
        return mapper.raw(train) * (cdf_factor / CDF_SCALE), mapper.raw(test) * (cdf_factor / CDF_SCALE)
    ordered = sorted_columns(train)  # [F, N]

    def exact(x: torch.Tensor) -> torch.Tensor:
        below = torch.searchsorted(ordered, x.double().t().contiguous(), right=True)  # [F, n]
        return (below.t() / ordered.shape[1]).to(x.dtype) * cdf_factor

    return exact(train), exact(test)


def fold_scores(
    train: LetorData, test: LetorData, args: argparse.Namespace, setting: tuple[str, int | None, float], seed: int
):
    """``{(row, passes): ndcg_cut_10}`` of one fold for one map setting ``(raw columns, bins, scale)``
    (``bins`` None: no map; raw columns ``none``: the indicators alone)."""
    raw_columns, bins, scale = setting
    normalizer = FeatureNormalizer.fit("zscore", train.features)
    x_train, x_test = normalizer(torch.from_numpy(train.features)), normalizer(torch.from_numpy(test.features))
    if args.clip:  # test documents held to the training range of every (normalized) feature
        x_test = torch.minimum(torch.maximum(x_test, x_train.min(0).values), x_train.max(0).values)
    if bins is not None:
        kind = "cdf" if raw_columns == "cdf" else "features"
        mapper = QuantileThresholds(x_train.shape[1], bins=bins, scale=scale, raw_columns=kind).fit(x_train)
        width = x_train.shape[1]  # live_forward: the F raw columns, then the indicators
        raw_train, raw_test = raw_columns_of(x_train, x_test, raw_columns, mapper, args.cdf_factor)
        x_train = torch.cat([raw_train, mapper.live_forward(x_train)[:, width:]], 1)
        x_test = torch.cat([raw_test, mapper.live_forward(x_test)[:, width:]], 1)
        if args.standardize:  # every column z-scored on the training documents, as the networks' input
            mean, spread = x_train.mean(0), x_train.std(0).clamp_min(1e-6)
            x_train, x_test = (x_train - mean) / spread, (x_test - mean) / spread
    pairs, eta = query_pairs(train.labels, train.offsets)
    sizes = [k for k in args.committee_sizes for _ in range(args.runs)]
    learner = PairwisePerceptron(x_train.shape[1], committee_size=sizes, n_runs=len(sizes))
    seeds = [seed * 1000 + r for r in range(len(sizes))]
    groups = torch.arange(len(sizes)).reshape(len(args.committee_sizes), args.runs)
    queries = [x_test[a:b][None] for a, b in zip(test.offsets[:-1], test.offsets[1:], strict=True)]

    def ndcg(combine: str, groups: torch.Tensor | None = None, row: int = 0) -> float:
        """trec ``ndcg_cut_10`` of one run (or pooled group) ``row`` under a read-out."""
        scores = [learner.scores(x, None, combine, groups=groups)[row, 0].numpy() for x in queries]
        return trec_metrics(test, np.concatenate(scores))["ndcg@10"]

    out = {}
    for epoch in range(max(args.passes)):
        learner.fit_pairs(x_train, pairs, eta, pass_orders(len(pairs), seeds, epoch))
        if epoch + 1 not in args.passes:
            continue
        t = epoch + 1
        for g, k in enumerate(args.committee_sizes):
            for combine in ("vote", "weight"):
                out[f"committee K={k} {combine}", t] = ndcg(combine, groups, row=g)
        out["averaged", t] = statistics.fmean(ndcg("average", row=int(r)) for r in groups[0])
        out["averaged pooled", t] = ndcg("average", groups, row=0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", default="/work/data/letor_a/train_full.txt")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="fold draws")
    parser.add_argument("--bins", type=int, nargs="+", default=[32], help="0: no feature map")
    parser.add_argument("--scales", type=float, nargs="+", default=[0.25])
    parser.add_argument("--passes", type=int, nargs="+", default=[2])
    parser.add_argument("--committee-sizes", type=int, nargs="+", default=[20, 200])
    parser.add_argument("--runs", type=int, default=5, help="seeds per committee size (pooled)")
    parser.add_argument("--small", action="store_true", help="train on one fold, test on the others")
    parser.add_argument(
        "--raw-columns",
        nargs="+",
        choices=["features", "cdf", "exact", "none"],
        default=["features"],
        help="the map's first F columns (QuantileThresholds' raw_columns; exact: the empirical CDF at every "
        "training value; none: the indicators alone)",
    )
    parser.add_argument(
        "--cdf-factor", type=float, default=CDF_SCALE, help="the cdf / exact columns' top value (library: sqrt(12))"
    )
    parser.add_argument("--clip", action="store_true", help="clip the test features to the training range")
    parser.add_argument(
        "--standardize", action="store_true", help="z-score the mapped columns (the networks' ThresholdInputs)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = read_letor(args.train)
    if args.bins == [0]:
        settings = [("features", None, 1.0)]
    else:
        settings = list(itertools.product(args.raw_columns, args.bins, args.scales))
    rows: dict[tuple, list[float]] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for seed in args.seeds:
            for files in folds(data, args.folds, seed, Path(workdir), with_val=False, small=args.small):
                train, test = read_letor(files["train"]), read_letor(files["test"])
                width = max(train.num_features, test.num_features)
                train, test = train.with_num_features(width), test.with_num_features(width)
                for setting in settings:
                    for (name, t), value in fold_scores(train, test, args, setting, seed).items():
                        rows.setdefault((*setting, t, name), []).append(value)
    size = "one fold trains" if args.small else "the other folds train"
    print(f"{args.train}: {args.folds}-fold CV, fold draws {args.seeds}, {size}")
    first = settings[0][0]
    print(f"\n| raw columns | bins | scale | passes | scorer | ndcg@10 | - averaged (one seed), paired | - {first} |")
    print("|---|---|---|---:|---|---:|---:|---:|")
    for (raw, bins, scale, t, name), values in rows.items():
        within = paired(values, rows[raw, bins, scale, t, "averaged"])
        across = paired(values, rows[first, bins, scale, t, name]) if raw != first else ""
        print(f"| {raw} | {bins or 'none'} | {scale} | {t} | {name} | {np.mean(values):.4f} | {within} | {across} |")


def paired(values: list[float], reference: list[float]) -> str:
    """``mean ± standard error (wins/runs)`` of ``values - reference``, run by run."""
    difference = np.array(values) - np.array(reference)
    spread = difference.std() / np.sqrt(len(difference))
    return f"{difference.mean():+.4f} ± {spread:.4f} ({int((difference > 0).sum())}/{len(difference)})"


if __name__ == "__main__":
    main()
