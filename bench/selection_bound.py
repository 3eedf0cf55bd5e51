"""Coverage and slack of Usunier et al.'s certified bound (``rankers.selection.bound``) on synthetic
queries whose true risk is known.

Each repetition draws a labeled training set (``--queries`` queries of ``--docs`` documents, binary
relevance from a noisy linear model) and ``--unlabeled`` unlabeled queries, fits a ridge-regression
ranker on every training query and one per fold (``--folds``), and computes the bound at
``--delta``. The true risk of the ranker (its bipartite risk over queries with a pair) is measured
on ``--truth-queries`` (20,000) fresh queries. Printed: how often the true risk stays below the
bound (the coverage, at least 1 - delta required), the mean bound, true risk, slack, and its parts.

    python -m bench.selection_bound --repeats 200 --queries 300 --unlabeled 300
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from rankers.selection.bound import (
    BoundParts,
    bipartite_risk,
    certified_bound,
    disagreement,
    permutation_ranks,
    worst_case_ranks,
)


def draw_queries(rng: np.random.Generator, n: int, docs: int, w_true: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``n`` queries of ``docs`` documents: features ``[n, docs, d]`` and binary labels ``[n, docs]``
    from a noisy linear relevance (no ranker is perfect)."""
    x = rng.normal(size=(n, docs, len(w_true)))
    latent = x @ w_true + rng.normal(scale=1.5, size=(n, docs))
    return x, (latent > 0.8).astype(np.float64)


def ridge(x: np.ndarray, y: np.ndarray, lam: float = 1.0) -> np.ndarray:
    """Least-squares weights ``[d]`` of the labels on the features (every document pooled)."""
    flat_x, flat_y = x.reshape(-1, x.shape[-1]), y.reshape(-1)
    return np.linalg.solve(flat_x.T @ flat_x + lam * np.eye(x.shape[-1]), flat_x.T @ flat_y)


def risk_with_pairs(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    """The bipartite risk of ``x @ w`` averaged over the queries that have a pair."""
    scores = torch.from_numpy(x @ w)  # continuous scores: no ties, so the ranks are not needed
    risk, defined = bipartite_risk(scores, torch.from_numpy(y), scores=scores)
    return float(risk[defined].mean())


def one_bound(
    rng: np.random.Generator, w_true: np.ndarray, *, n: int, m: int, docs: int, folds: int, delta: float
) -> tuple[BoundParts, np.ndarray]:
    """One draw: the bound of the ridge ranker fitted on ``n`` queries, and its weights."""
    x, y = draw_queries(rng, n, docs, w_true)
    unlabeled, _ = draw_queries(rng, m, docs, w_true)  # their labels are dropped
    w = ridge(x, y)
    parts = np.array_split(rng.permutation(n), folds)
    risks, defined, fold_ranks = [], [], []
    for f, held in enumerate(parts):
        rest = np.concatenate([p for g, p in enumerate(parts) if g != f])
        w_k = ridge(x[rest], y[rest])
        risk, has_pair = bipartite_risk(permutation_ranks(torch.from_numpy(x[held] @ w_k)), torch.from_numpy(y[held]))
        risks.append(risk)
        defined.append(has_pair)
        fold_ranks.append(permutation_ranks(torch.from_numpy(unlabeled @ w_k)))
    mine = torch.from_numpy(unlabeled @ w)
    d = sum(disagreement(worst_case_ranks(mine, theirs), theirs) for theirs in fold_ranks) / folds
    has_pair = torch.from_numpy((y.sum(1) > 0) & (y.sum(1) < docs))
    return certified_bound(risks, defined, d, training_pairs=has_pair, delta=delta), w


def coverage(
    repeats: int, *, n: int, m: int, docs: int, folds: int, delta: float, seed: int = 0, truth_queries: int = 20000
) -> tuple[list[BoundParts], np.ndarray]:
    """The bounds and true risks of ``repeats`` independent draws."""
    rng = np.random.default_rng(seed)
    w_true = rng.normal(size=6)
    big_x, big_y = draw_queries(rng, truth_queries, docs, w_true)
    bounds, truths = [], []
    for _ in range(repeats):
        parts, w = one_bound(rng, w_true, n=n, m=m, docs=docs, folds=folds, delta=delta)
        bounds.append(parts)
        truths.append(risk_with_pairs(big_x, big_y, w))
    return bounds, np.array(truths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--queries", type=int, default=300, help="labeled training queries")
    parser.add_argument("--unlabeled", type=int, default=300)
    parser.add_argument("--docs", type=int, default=12)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--delta", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--truth-queries", type=int, default=20000, help="fresh queries measuring the true risk")
    args = parser.parse_args()
    bounds, truths = coverage(
        args.repeats,
        n=args.queries,
        m=args.unlabeled,
        docs=args.docs,
        folds=args.folds,
        delta=args.delta,
        seed=args.seed,
        truth_queries=args.truth_queries,
    )
    values = np.array([b.bound for b in bounds])
    sizes = f"{args.queries} labeled and {args.unlabeled} unlabeled queries of {args.docs} documents"
    print(f"{args.repeats} draws, {sizes}, {args.folds} folds, delta {args.delta}:")
    print(f"the true risk stays below the bound in {np.mean(truths <= values):.3f} of the draws")
    print(f"(at least {1 - args.delta:.3f} required)")
    print(f"mean bound {values.mean():.4f}, mean true risk {truths.mean():.4f}, slack {np.mean(values - truths):.4f}")
    for name in ("held_out_risk", "held_out_bound", "disagreement", "disagreement_bound", "pair_share_lower"):
        print(f"  {name}: {np.mean([getattr(b, name) for b in bounds]):.4f}")


if __name__ == "__main__":
    main()
