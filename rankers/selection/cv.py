"""The arithmetic of ``model=auto``: candidates, the time budget, the CV table and the choice.

Pure functions on plain numbers (no Lightning, no Hydra); ``rankers.selection.run`` drives the fits.

A candidate is a ``conf/model`` name, optionally followed by overrides of that model's options,
``"lambdarank model.loss.k=null"``: its row in the table is the whole string.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

__all__ = [
    "Candidate",
    "CandidateResult",
    "choose",
    "first_fold_allowance",
    "format_table",
    "parse_candidate",
    "plan_budget",
    "tied_with_best",
]


@dataclass(frozen=True)
class Candidate:
    """``name`` (a ``conf/model`` file) and ``overrides`` (``model.*=value`` strings) under ``label``."""

    label: str
    name: str
    overrides: tuple[str, ...] = ()


def parse_candidate(text: str) -> Candidate:
    """``"NAME [model.key=value ...]"`` -> ``Candidate``; only ``model.*`` keys may be overridden
    (the data, trainer and seed are the run's, the same for every candidate).

    Example:
        >>> parse_candidate("lambdarank model.loss.k=null")
        Candidate(label='lambdarank model.loss.k=null', name='lambdarank', overrides=('model.loss.k=null',))
    """
    parts = str(text).split()
    if not parts:
        raise ValueError("model.candidates holds an empty entry")
    name, overrides = parts[0], tuple(parts[1:])
    if name == "auto":
        raise ValueError("model.candidates cannot hold auto itself")
    bad = [item for item in overrides if not item.startswith("model.") or "=" not in item]
    if bad:
        raise ValueError(f"candidate {text!r}: overrides must be model.KEY=VALUE, got {bad}")
    return Candidate(" ".join(parts), name, overrides)


@dataclass
class CandidateResult:
    """One row of the CV table: per-fold means of the metric over held-out queries, fit seconds."""

    label: str
    fold_scores: list[float] = field(default_factory=list)  # the metric's mean over each held-out fold
    fold_queries: list[int] = field(default_factory=list)
    fit_seconds: list[float] = field(default_factory=list)
    status: str = "complete"
    query_scores: list[float] = field(default_factory=list)  # every held-out query's metric, fold by fold

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def mean(self) -> float:
        """The metric's mean over every held-out query (folds weighted by their query counts)."""
        if not self.fold_scores:
            return math.nan
        total = sum(self.fold_queries)
        return sum(s * n for s, n in zip(self.fold_scores, self.fold_queries, strict=True)) / total

    @property
    def spread(self) -> float:
        """Standard deviation of the fold means (0 with one fold)."""
        return statistics.stdev(self.fold_scores) if len(self.fold_scores) > 1 else 0.0

    def paired_gap(self, other: CandidateResult) -> tuple[float, float] | None:
        """Mean and standard error of this candidate's metric minus ``other``'s, query by query on
        the same held-out queries (None unless both completed every fold)."""
        if not (self.complete and other.complete) or len(self.query_scores) != len(other.query_scores):
            return None
        gaps = [a - b for a, b in zip(self.query_scores, other.query_scores, strict=True)]
        if len(gaps) < 2:
            return None
        return statistics.fmean(gaps), statistics.stdev(gaps) / math.sqrt(len(gaps))

    def as_dict(self) -> dict:
        """The row for results.json: ``mean`` and ``spread`` are null (never NaN) for a candidate that
        completed no fold; ``status`` says why."""
        measured = bool(self.fold_scores)
        record = {**asdict(self), "mean": self.mean if measured else None, "spread": self.spread if measured else None}
        record.pop("query_scores")  # one number per training query: in the table as the paired gap
        return record


def first_fold_allowance(remaining_seconds: float, folds: int) -> float:
    """The most a candidate's first fold may take: with ``K`` folds its CV costs about ``K`` times
    that and the refit on every training query ``K / (K - 1)`` times, all within what is left.

    Example:
        >>> round(first_fold_allowance(600.0, 5), 1)
        96.0
    """
    return max(0.0, remaining_seconds) / (folds + folds / (folds - 1))


def plan_budget(
    first_fold_seconds: dict[str, float], *, folds: int, remaining_seconds: float, always: str | None = None
) -> tuple[list[str], list[str]]:
    """Which candidates finish their cross-validation within the budget: drop the slowest (by their
    first fold) until the other ``K - 1`` folds of the kept ones and the refit of the slowest kept
    (``K / (K - 1)`` of its fold: more queries) fit in ``remaining_seconds``. One is always kept:
    ``always`` when given (``model=auto``'s first candidate, which runs without a time limit), else
    the fastest.

    Returns:
        ``(kept, dropped)``, kept in the given order, dropped slowest first.

    Example:
        >>> plan_budget({"rankboost": 2.0, "lambdarank": 30.0, "ranknet_listnet": 200.0}, folds=5,
        ...             remaining_seconds=300.0)
        (['rankboost', 'lambdarank'], ['ranknet_listnet'])
    """
    kept = dict(first_fold_seconds)
    dropped: list[str] = []

    def cost(times: dict[str, float]) -> float:
        return sum(times.values()) * (folds - 1) + max(times.values()) * folds / (folds - 1)

    while len(kept) > 1 and cost(kept) > remaining_seconds:
        slowest = max((name for name in kept if name != always), key=kept.__getitem__)
        dropped.append(slowest)
        del kept[slowest]
    return list(kept), dropped


def choose(results: list[CandidateResult]) -> CandidateResult:
    """The complete candidate with the best mean (the earlier in the list of equals).

    Example:
        >>> a = CandidateResult("a", [0.5, 0.6], [10, 10], [1.0, 1.0])
        >>> b = CandidateResult("b", [0.7], [10], [9.0], status="dropped")
        >>> choose([a, b]).label
        'a'
    """
    complete = [result for result in results if result.complete]
    if not complete:
        raise ValueError("no candidate completed its cross-validation")
    return max(complete, key=lambda result: (result.mean, -complete.index(result)))


def tied_with_best(results: list[CandidateResult], *, max_members: int = 3) -> list[str]:
    """The best complete candidate and those the CV cannot tell from it: a paired gap (same held-out
    queries) within one standard error, best first, at most ``max_members``.

    Example:
        >>> a = CandidateResult("a", [0.6], [4], [1.0], query_scores=[0.5, 0.7, 0.6, 0.6])
        >>> b = CandidateResult("b", [0.59], [4], [1.0], query_scores=[0.6, 0.6, 0.5, 0.66])
        >>> c = CandidateResult("c", [0.3], [4], [1.0], query_scores=[0.3, 0.3, 0.3, 0.3])
        >>> tied_with_best([a, b, c])
        ['a', 'b']
    """
    best = choose(results)
    tied = [best]
    for result in sorted((r for r in results if r.complete and r is not best), key=lambda r: -r.mean):
        gap = result.paired_gap(best)
        if gap is not None and gap[0] + gap[1] >= 0:
            tied.append(result)
    return [result.label for result in tied[:max_members]]


def format_table(results: list[CandidateResult], chosen: str, metric: str) -> str:
    """The CV table as Markdown: every candidate's mean, spread over folds, its paired gap to the
    chosen one over the same held-out queries (mean ± standard error), fit seconds and status.

    Example:
        >>> a = CandidateResult("a", [0.5, 0.6], [2, 2], [1.0, 3.0], query_scores=[0.4, 0.6, 0.6, 0.6])
        >>> b = CandidateResult("b", [0.5, 0.4], [2, 2], [2.0, 2.0], query_scores=[0.5, 0.5, 0.4, 0.4])
        >>> print(format_table([a, b], "a", "ndcg@10"))
        | candidate | ndcg@10 (CV mean) | ± std over folds | - chosen (paired) | fit s per fold | folds | status |
        |---|---:|---:|---:|---:|---:|---|
        | **a** | 0.5500 | 0.0707 | - | 2.0 | 2 | complete, chosen |
        | b | 0.4500 | 0.0707 | -0.1000 ± 0.0707 | 2.0 | 2 | complete |
    """
    lines = [
        f"| candidate | {metric} (CV mean) | ± std over folds | - chosen (paired) | fit s per fold | folds | status |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    best = next((result for result in results if result.label == chosen), None)
    for result in results:
        name = f"**{result.label}**" if result.label == chosen else result.label
        seconds = statistics.fmean(result.fit_seconds) if result.fit_seconds else math.nan
        status = result.status + (", chosen" if result.label == chosen else "")
        gap = result.paired_gap(best) if best is not None and result is not best else None
        paired = f"{gap[0]:+.4f} ± {gap[1]:.4f}" if gap else "-"
        if result.fold_scores:
            figures = f"{result.mean:.4f} | {result.spread:.4f} | {paired} | {seconds:.1f} | {len(result.fold_scores)}"
        else:  # dropped in its first fold: nothing measured
            figures = "- | - | - | - | 0"
        lines.append(f"| {name} | {figures} | {status} |")
    return "\n".join(lines)
