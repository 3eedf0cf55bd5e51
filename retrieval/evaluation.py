"""Ad-hoc evaluation: score matrices -> trec_eval-equal measures and TREC run files."""

from __future__ import annotations

from pathlib import Path

import torch

from metrics.functional import average_precision, ndcg, precision, r_precision
from retrieval.trec import write_run


def evaluate(scores: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """MAP, P@10, R-precision and nDCG@10 (linear gain) averaged over the queries with a relevant document.

    ``scores``, ``labels [Q, D]``; ties are broken by document position. Queries without a relevant
    document are left out (as trec_eval does for queries absent from the qrels) and counted; if no
    query has one there is nothing to measure and it is an error, never NaN.
    """
    judged = labels.amax(1) > 0
    if not judged.any():
        raise ValueError(f"none of the {len(labels)} queries has a relevant document: nothing to evaluate")
    scores, labels = scores[judged].float(), labels[judged].float()
    return {
        "map": float(average_precision(scores, labels).mean()),
        "p@10": float(precision(scores, labels, k=10).mean()),
        "r_precision": float(r_precision(scores, labels).mean()),
        "ndcg@10": float(ndcg(scores, labels, k=10, gain="linear").mean()),
        "queries": int(judged.sum()),
        "queries_without_relevant": int((~judged).sum()),
    }


def evaluate_runs(
    runs: dict[str, torch.Tensor],
    labels: torch.Tensor,
    query_ids: list[str],
    doc_ids: list[str],
    out_dir: str | Path | None = None,
) -> dict[str, dict[str, float | str]]:
    """``evaluate`` each named ``[Q, D]`` score matrix; with ``out_dir`` also write ``<name>.run`` (TREC)."""
    results: dict[str, dict[str, float | str]] = {}
    for name, scores in runs.items():
        results[name] = dict(evaluate(scores.cpu(), labels))
        if out_dir is not None:
            path = write_run(Path(out_dir) / f"{name}.run", scores.cpu(), query_ids, doc_ids, tag=name)
            results[name]["run"] = str(path)
    return results


__all__ = ["evaluate", "evaluate_runs"]
