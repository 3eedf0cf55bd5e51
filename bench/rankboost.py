"""RankBoost speed and quality: ours (RankBoost.B, O(n) potentials, all candidates as one tensor op)
against a straightforward O(pairs) RankBoost measured in the same run, and RankLib when given.

    python -m bench.rankboost --train /work/data/letor_a/train.txt --rounds 300 --device all
    python -m bench.rankboost --train synthetic:100,400,136 --reference-rounds 10   # long lists
    python -m bench.rankboost --train T.txt --test V.txt --ranklib-jar RankLib.jar   # + RankLib, if java
    python -m bench.rankboost --exported RUN/export --test V.txt   # trec_eval ndcg_cut_10 of a train.py export

"reference" keeps D over every crucial pair explicitly (a ``[P]`` tensor, as RankLib's ``sweight``),
computes the potentials by scattering D over pairs, r of every (feature, threshold) candidate as one
``pi @ 1[x_f > theta]`` product, and updates D pair by pair; both learners get the same candidates,
so their first rounds must choose the same weak rankers (checked before timing). Ours is
``rankers.boosting.rankboost``. Figures: seconds per round (median over the timed rounds, device-synced) and
total fit seconds (data layout + rounds). RankLib is timed as a whole ``java -jar`` process with
``-ranker 2 -round R -tc T`` (``bench.ranklib``), and its saved ensemble is compared with ours fitted
with model=rankboost's RankLib defaults: the largest score difference on the training documents and
the rounds that chose another feature.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench.ranklib import rankboost_ensemble, run_ranklib
from bench.timing import each_seconds, sync
from datamodules.letor_io import read_letor
from rankers.boosting.rankboost import RankBoostLearner, choose_alpha, fit_rankboost, prepare


def load(path: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``features [N, F]``, ``labels [N]``, ``query [N]`` of a LETOR file, or of ``synthetic:Q,L,F``
    (Q queries of L documents, F features, labels 0..4 from a noisy linear score: long lists, many pairs)."""
    if path.startswith("synthetic:"):
        queries, length, n_features = (int(v) for v in path.removeprefix("synthetic:").split(","))
        generator = torch.Generator().manual_seed(0)
        features = torch.randn(queries * length, n_features, generator=generator)
        score = features[:, :8].sum(1) + 2 * torch.randn(len(features), generator=generator)
        labels = torch.bucketize(score, torch.tensor([0.0, 2.0, 4.0, 6.0])).float()
        query = torch.arange(queries).repeat_interleave(length)
        return features.to(device), labels.to(device), query.to(device)
    data = read_letor(path)
    offsets = torch.from_numpy(data.offsets)
    query = torch.repeat_interleave(torch.arange(len(offsets) - 1), offsets.diff())
    return (
        torch.from_numpy(data.features).to(device),
        torch.from_numpy(data.labels).float().to(device),
        query.to(device),
    )


class PairwiseReference:
    """RankBoost with D kept per crucial pair: O(pairs) potentials and updates, r by one matmul."""

    def __init__(self, features: torch.Tensor, labels: torch.Tensor, query: torch.Tensor, thresholds: torch.Tensor):
        same = query[:, None] == query[None, :]
        self.bottom, self.top = torch.nonzero(same & (labels[None, :] > labels[:, None]), as_tuple=True)
        self.d = torch.full(self.bottom.shape, 1.0 / len(self.bottom), device=features.device)
        self.features, self.thresholds = features, thresholds  # thresholds [F, J]
        n = len(features)
        # 1[x_f > theta_fj] for every candidate, [N, F * J]
        self.above = (features[:, :, None] > thresholds[None]).reshape(n, -1).float()

    def round(self) -> tuple[int, float, float]:
        n = len(self.features)
        pi = torch.zeros(n, device=self.d.device).index_add_(0, self.top, self.d)
        pi = pi.index_add_(0, self.bottom, -self.d)
        r = pi @ self.above  # [F * J]
        best = int(r.argmax())  # r > 0 only, as model=rankboost (and RankLib) choose
        j_count = self.thresholds.shape[1]
        feature, j = divmod(best, j_count)
        h = self.above[:, best]
        alpha = float(choose_alpha(r[best], kind="approx", smoothing=1e-6))
        self.d = self.d * torch.exp(alpha * (h[self.bottom] - h[self.top]))
        self.d = self.d / self.d.sum()
        return feature, float(self.thresholds[feature, j]), alpha


def bench_device(args: argparse.Namespace, device: torch.device) -> None:
    features, labels, query = load(args.train, device)
    n, f = features.shape
    sync(device)
    start = time.perf_counter()
    data = prepare(features, labels, query, thresholds=args.thresholds, threshold_kind=args.threshold_kind)
    learner = RankBoostLearner(data, alpha="approx", allow_negative=False)  # model=rankboost's defaults
    sync(device)
    layout = time.perf_counter() - start
    ours_rounds = each_seconds(learner.round, args.rounds, device)
    ours_total = layout + sum(ours_rounds)
    print(
        f"{device.type}: {n} documents, {data.n_queries} queries, {data.n_pairs} crucial pairs, "
        f"{f} features x {data.thresholds.shape[1]} thresholds"
    )
    # the reference with the same candidates: the first rounds must agree before anything is timed
    sync(device)
    start = time.perf_counter()
    finite = torch.where(torch.isfinite(data.thresholds), data.thresholds, torch.full_like(data.thresholds, 1e30))
    reference = PairwiseReference(features, labels, query, finite)
    sync(device)
    ref_layout = time.perf_counter() - start
    check = RankBoostLearner(data, alpha="approx", allow_negative=False)
    for t in range(3):
        mine, theirs = check.round(), reference.round()
        if int(mine["feature"]) != theirs[0] or abs(float(mine["alpha"]) - theirs[2]) > 1e-3 * max(1, abs(theirs[2])):
            raise SystemExit(f"round {t + 1}: ours {mine['feature']}, {float(mine['alpha'])} != reference {theirs}")
    reference = PairwiseReference(features, labels, query, finite)
    ref_count = min(args.rounds, args.reference_rounds)
    ref_rounds = each_seconds(reference.round, ref_count, device)
    ref_per_round = statistics.median(ref_rounds)
    ref_total = ref_layout + ref_per_round * args.rounds  # extrapolated when fewer rounds were timed
    ours_per_round = statistics.median(ours_rounds)
    print("| device | learner | s / round | fit s (layout + rounds) | reference / ours |")
    print("|---|---|---:|---:|---:|")
    print(f"| {device.type} | ours (RankBoost.B) | {ours_per_round:.5f} | {ours_total:.2f} | 1.0x |")
    note = "" if ref_count == args.rounds else f" ({ref_count} rounds timed, total extrapolated)"
    print(
        f"| {device.type} | pairwise reference{note} | {ref_per_round:.5f} | {ref_total:.2f} | "
        f"{ref_total / ours_total:.1f}x |"
    )


def trec_ndcg(scores: np.ndarray, labels: np.ndarray, query: np.ndarray, k: int = 10) -> float:
    """trec_eval's ``ndcg_cut_k`` (pytrec_eval), averaged over the queries."""
    import pytrec_eval

    qrel: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for i, (score, label, q) in enumerate(zip(scores.tolist(), labels.tolist(), query.tolist(), strict=True)):
        qrel.setdefault(str(q), {})[f"d{i}"] = int(label)
        run.setdefault(str(q), {})[f"d{i}"] = float(score)
    measure = f"ndcg_cut_{k}"
    evaluated = pytrec_eval.RelevanceEvaluator(qrel, {measure}).evaluate(run)
    return float(np.mean([values[measure] for values in evaluated.values()]))


def exported_scores(export_dir: str, path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores of the exported TorchScript scorer, one query at a time, as a user would run it."""
    data = read_letor(path)
    scorer = torch.jit.load(str(Path(export_dir) / "scorer.pt"))
    features = torch.from_numpy(data.features)
    parts = [
        scorer(features[start:stop]).detach().numpy()
        for start, stop in zip(data.offsets[:-1], data.offsets[1:], strict=True)
    ]
    query = np.repeat(np.arange(data.num_queries), np.diff(data.offsets))
    return np.concatenate(parts), data.labels, query


def bench_ranklib(args: argparse.Namespace) -> None:
    """RankLib's RankBoost on the same file: its fit time, its test ndcg, and how its ensemble compares
    with ours fitted with model=rankboost's RankLib defaults (scores on the training documents)."""
    if not args.ranklib_jar:
        print("RankLib: skipped (needs --ranklib-jar JAR and a java runtime)")
        return
    options = ["-round", str(args.rounds), "-tc", str(args.thresholds_ranklib)]
    with tempfile.TemporaryDirectory() as tmp:
        run = run_ranklib(args.ranklib_jar, args.train, args.test or args.train, ranker=2, options=options, workdir=tmp)
    print(f"RankLib RankBoost: fit process {run.fit_seconds:.2f} s")
    if args.test:
        data = read_letor(args.test)
        query = np.repeat(np.arange(data.num_queries), np.diff(data.offsets))
        print(f"RankLib RankBoost: trec ndcg_cut_10 on {args.test}: {trec_ndcg(run.scores, data.labels, query):.4f}")
    theirs = rankboost_ensemble(run.model)
    features, labels, query = load(args.train, torch.device("cpu"))
    # float64: the file's float32 values compared with float64 thresholds, RankLib's arithmetic exactly
    features, labels = features.double(), labels.double()
    ours = fit_rankboost(
        features,
        labels,
        query,
        rounds=len(theirs),
        thresholds=args.thresholds_ranklib,
        threshold_kind="ranklib",
        q_def=0,
        allow_negative=False,
        alpha="approx",
        smoothing=0.0,
    )
    raw = features.double()
    their_h = torch.stack([(raw[:, f] > threshold).double() for f, threshold, _ in theirs], 1)
    our_h = (raw[:, ours["feature"]] > ours["threshold"].double()).double()
    alphas = torch.tensor([alpha for _, _, alpha in theirs], dtype=torch.float64)
    gap = float((their_h @ alphas - our_h @ ours["alpha"].double()).abs().max())
    other = [t for t, (f, _, _) in enumerate(theirs) if f != int(ours["feature"][t])]
    same_split = sum(bool(torch.equal(their_h[:, t], our_h[:, t])) for t in other)
    print(
        f"parity with RankLib ({len(theirs)} rounds, training documents): max |score difference| {gap:.2g}; "
        f"another feature chosen in {len(other)} rounds, {same_split} of them splitting the documents identically"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", default="/work/data/letor_a/train.txt", help="a LETOR file or synthetic:Q,L,F")
    parser.add_argument("--test", default=None, help="LETOR file for trec_eval ndcg_cut_10 (RankLib, --exported)")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--reference-rounds", type=int, default=300, help="rounds of the reference actually timed")
    parser.add_argument("--thresholds", type=int, default=10)
    parser.add_argument("--threshold-kind", default="ranklib", help="ranklib, uniform or quantile")
    parser.add_argument("--thresholds-ranklib", type=int, default=10)
    parser.add_argument("--device", default="all", help="cpu, cuda or all (cpu, and cuda when present)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--ranklib-jar", default=None)
    parser.add_argument("--exported", default=None, help="a train.py run's export/ folder to score on --test")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"machine: {platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}")
    if args.exported:
        if not args.test:
            raise SystemExit("--exported needs --test FILE")
        scores, labels, query = exported_scores(args.exported, args.test)
        print(json.dumps({"export": args.exported, "file": args.test, "ndcg_cut_10": trec_ndcg(scores, labels, query)}))
        return
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    for name in devices:
        if name == "cuda" and not torch.cuda.is_available():
            print("cuda: not available, skipped")
            continue
        if name == "cuda":
            print(f"cuda device: {torch.cuda.get_device_name()}")
        bench_device(args, torch.device(name))
    bench_ranklib(args)


if __name__ == "__main__":
    main()
