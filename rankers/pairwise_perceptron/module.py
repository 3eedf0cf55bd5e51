"""The pairwise perceptron family (Elsas, Carvalho & Carbonell) as a streaming ``Learner``: train.py's
``model=committee_perceptron`` and ``model=pairwise_perceptron variant=plain|pocket|averaged|voted|committee``.

One epoch (``partial_fit``) is one pass of the pseudo-code over every preference pair of the whole
training split (normalized as evaluation and the export normalize them, one query at a time), in a
seeded order that changes with each pass; the harness validates after each pass and keeps the best.

Several runs (seeds times committee sizes) advance as one ``[R, d]`` tensor; each run is scored
alone, or (``pool_runs``) the seeds of a committee size as one ensemble; validation scores every
such scorer, and the one with the best monitored metric is logged, tested and exported.
"""

from __future__ import annotations

import copy
import itertools
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from datamodules.feature_maps import RAW_COLUMNS, QuantileThresholds, ThresholdInputs
from datamodules.normalization import FeatureNormalizer
from metrics import higher_is_better, ranking_metrics
from rankers.export import export_scorer
from rankers.learner import FitLog, Learner, Normalized, QuerySplit
from rankers.pairwise_perceptron.perceptron import PairwisePerceptron, pass_orders, preference_pairs, rank_vote_scores
from rankers.scorers import LinearScorer

# variant -> the read-out it is scored by (None: the configured ``combine``)
VARIANTS = {"plain": "last", "pocket": "weight", "averaged": "average", "voted": "vote", "committee": None}
FEATURE_MAPS = ("none", "thresholds")


class RankVoteScorer(nn.Module):
    """Rank voting of a committee: features ``[..., L, F]`` -> ``[..., L]`` mean rank votes.

    ``committee [K, F]`` weights and ``votes [K]`` success counts. Each member ranks the list;
    a document scores ``sum_k c_k rank_k / sum_k c_k`` with rank counted from the bottom (ties
    count one half), as ``rankers.pairwise_perceptron.rank_vote_scores``. O(K L^2) per list.
    """

    def __init__(self, committee: Tensor, votes: Tensor) -> None:
        super().__init__()
        self.register_buffer("committee", committee.detach().float().clone())
        self.register_buffer("votes", votes.detach().float().clone())

    def forward(self, features: Tensor) -> Tensor:
        scores = features @ self.committee.t()  # [..., L, K]
        below = (scores.unsqueeze(-3) < scores.unsqueeze(-2)).to(scores.dtype).sum(-2)
        equal = (scores.unsqueeze(-3) == scores.unsqueeze(-2)).to(scores.dtype).sum(-2)
        ranks = below + 0.5 * (equal - 1.0)
        return ranks @ (self.votes / self.votes.sum().clamp_min(1e-12))


class PairwisePerceptronModule(Learner):
    """The pairwise perceptron (plain, pocket, averaged, voted) and the Committee Perceptron.

    Args:
        variant: ``plain``, ``pocket`` (K = 1), ``averaged``, ``voted`` (K = ``max_hypotheses``,
            rank voting) or ``committee``.
        n_features, normalizer: from the datamodule (the normalizer is part of the export).
        committee_size: K for ``committee``; a list runs one committee per size in the same pass.
        combine: the committee's rule, ``weight`` (one linear scorer) or ``vote`` (rank voting).
        n_runs: seeds per committee size (run r uses ``seed + r``, its own pair order).
        pool_runs: score each committee size's ``n_runs`` runs as one ensemble (rank voting over
            all their members, each voting its count; the mean of their linear scorers for the
            linear read-outs), which averages out the pair order. Without it each run is scored
            alone. Validation picks the best scorer (a run, or a pooled committee size), which is
            the one logged, tested and exported.
        epochs: passes T over the pairs.
        query_balance: ``eta_q = 1 / |S_q|`` (else 1).
        feature_map: ``none`` (the normalized features, the slides' linear perceptron) or
            ``thresholds`` (``datamodules.feature_maps.QuantileThresholds``: each feature plus the
            indicators of its training quantiles, fitted on the first pass's documents and
            exported with the scorer; every variant learns the same way over them).
        bins, threshold_scale: the thresholds map's quantile bins per feature and indicator value.
        raw_columns: the thresholds map's first F columns: ``features`` (the normalized features) or
            ``cdf`` (``datamodules.feature_maps.QuantileCDF``: each feature's training CDF, bounded
            and unmoved by increasing maps of the feature); with ``feature_map=none`` the features
            are read as given. A checkpoint saved before the option existed (before 2026-11-24) used
            ``features``: load it with ``load_from_checkpoint(path, raw_columns="features")``.
        include_current: offer the running hypothesis to the committee at read-out time.
        max_hypotheses: the voted perceptron's capacity (its committee size).
        ks, gain, empty, monitor: as ``rankers.RankerModule``.

    Device: the trainer's (the pass is a C++ loop over the pairs on CPU, the tensor path elsewhere;
    GPU unmeasured here).
    """

    streaming = True

    def __init__(
        self,
        variant: str = "plain",
        *,
        n_features: int,
        normalizer: FeatureNormalizer | None = None,
        committee_size: int | Sequence[int] = 20,
        combine: str = "weight",
        n_runs: int = 1,
        pool_runs: bool = False,
        epochs: int = 1,
        query_balance: bool = True,
        feature_map: str = "thresholds",
        bins: int = 32,
        threshold_scale: float = 0.25,
        raw_columns: str = "cdf",
        include_current: bool = True,
        max_hypotheses: int = 4096,
        seed: int = 0,
        ks: Sequence[int] = (1, 5, 10),
        gain: str = "exp2",
        empty: float = 0.0,
        monitor: str = "val/ndcg@10",
    ) -> None:
        super().__init__(ks=ks, gain=gain, empty=empty, monitor=monitor)
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}")
        if combine not in ("weight", "vote"):
            raise ValueError(f"combine must be 'weight' or 'vote', got {combine!r}")
        if feature_map not in FEATURE_MAPS:
            raise ValueError(f"feature_map must be one of {FEATURE_MAPS}, got {feature_map!r}")
        if raw_columns not in RAW_COLUMNS:
            raise ValueError(f"raw_columns must be one of {RAW_COLUMNS}, got {raw_columns!r}")
        if n_runs < 1 or epochs < 1:
            raise ValueError(f"n_runs and epochs must be >= 1, got {n_runs} and {epochs}")
        ks = [int(k) for k in ks]
        sizes = [int(k) for k in (committee_size if isinstance(committee_size, Sequence) else [committee_size])]
        self.save_hyperparameters(ignore=["normalizer"])
        self.epochs, self.name = epochs, f"{variant}_perceptron"
        self.normalizer = normalizer if normalizer is not None else FeatureNormalizer("none", num_features=n_features)
        self.readout = VARIANTS[variant] or combine
        if variant == "voted":
            sizes = [max_hypotheses]
        elif variant != "committee":
            sizes = [1]
        self.feature_map = (
            QuantileThresholds(n_features, bins=bins, scale=threshold_scale, raw_columns=raw_columns)
            if feature_map == "thresholds"
            else None
        )
        width = self.feature_map.out_features if self.feature_map is not None else n_features
        self.runs = list(itertools.product(sizes, range(n_runs)))  # (K, seed offset) per run
        self.learner = PairwisePerceptron(width, committee_size=[k for k, _ in self.runs], n_runs=len(self.runs))
        self.seeds = [seed + offset for _, offset in self.runs]
        # the runs each scorer combines [G, n]: a committee size's runs when pooled, else one run each
        groups = [[r for r, (k, _) in enumerate(self.runs) if k == size] for size in sizes] if pool_runs else None
        self.groups = torch.tensor(groups) if groups else torch.arange(len(self.runs)).unsqueeze(1)
        self.register_buffer("selected_run", torch.zeros((), dtype=torch.long))
        self.register_buffer("best_value", torch.tensor(float("-inf")))
        names = sorted(ranking_metrics(ks, gain=gain, empty=empty))
        if monitor.removeprefix("val/") not in names:
            raise ValueError(f"monitor must be val/<one of {names}>, got {monitor!r}")
        self._truncation_announced = False  # the voted perceptron's capacity warning, said once
        self._unvalidated_announced = False

    # -- training -------------------------------------------------------------------------------
    def device_policy(self, available: torch.device) -> torch.device:
        """The CPU, always: the committee perceptron's pair stream on one H200 ran 3,395 pairs/s for one
        run on CUDA's tensor path and 62,059 for 16 runs as one tensor, against 135,402 for one run of
        the numpy loop on the CPU (``python -m bench.committee_perceptron --device cuda``,
        docs/benchmarks.md, 2026-11-28): each pair is a data-dependent step, one launch each on a GPU."""
        return torch.device("cpu")

    def partial_fit(self, train: QuerySplit, *, epoch: int, log: FitLog, chunk: int = 256) -> None:
        """Every pair of the training queries, each run in its own seeded order for this pass."""
        batches = []
        for first in range(0, train.n_queries, chunk):  # bounded padded memory
            batch = train.padded(slice(first, first + chunk))
            mask = batch["mask"]
            batches.append((self.normalizer(batch["features"], mask), batch["labels"], mask))
        features, pairs, eta = self._pair_stream(batches)
        columns = None
        if self.feature_map is not None:
            if not self.feature_map.fitted:
                self.feature_map.fit(features)  # the first pass's documents: every training query
            # most indicator columns are +inf thresholds (0 for every finite input): stream the rest
            columns = self.feature_map.live_columns()
            features = self.feature_map.live_forward(features)
        order = pass_orders(len(pairs), self.seeds, epoch, device=self.device)
        mistakes = self.learner.fit_pairs(features, pairs, eta, order, columns=columns)
        # per pass: the fraction of pairs mis-ranked while streaming, over the runs
        log.scalar("train/mistake_rate", float(mistakes.float().mean()) / max(1, len(pairs)), epoch + 1)
        log.scalar("train/pairs", float(len(pairs)), epoch + 1)
        log.scalar("train/hypotheses", float(self.learner.hypotheses.float().mean()), epoch + 1)
        self._warn_if_voting_is_truncated()

    def _warn_if_voting_is_truncated(self) -> None:
        """The voted perceptron votes with every hypothesis only while they fit ``max_hypotheses``:
        beyond, the committee keeps the longest-surviving ones. Said once, not done silently."""
        capacity = self.hparams.max_hypotheses
        if self.hparams.variant != "voted" or self._truncation_announced:
            return
        made = int(self.learner.hypotheses.max()) + int(self.hparams.include_current)
        if made > capacity:
            self._truncation_announced = True
            warnings.warn(
                f"the voted perceptron made {made} hypotheses, more than model.max_hypotheses={capacity}: it "
                f"votes with the {capacity} that survived longest (a committee of that size); raise "
                f"model.max_hypotheses to vote with all (memory: {capacity} x {self.learner.d} floats per run now)",
                stacklevel=2,
            )

    @staticmethod
    def _pair_stream(batches: list[tuple[Tensor, Tensor, Tensor]]) -> tuple[Tensor, Tensor, Tensor]:
        """``features [N, d]`` of the batches' real documents (padding left out: a feature map
        multiplies the width), ``pairs [P, 2]`` indices into them (preferred first) and ``eta [P]``:
        the preference pairs of every query, query by query."""
        flat, pairs, etas, offset = [], [], [], 0
        for features, labels, mask in batches:
            found, eta = preference_pairs(labels, mask)
            row = mask.flatten().cumsum(0) - 1  # a real slot's row among the batch's real documents
            slot = found[:, 0] * labels.shape[1]
            pairs.append(offset + torch.stack([row[slot + found[:, 1]], row[slot + found[:, 2]]], 1))
            etas.append(eta)
            flat.append(features[mask])
            offset += len(flat[-1])
        return torch.cat(flat), torch.cat(pairs), torch.cat(etas)

    def run_scores(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        """Every scorer's scores ``[G, B, L]`` of raw features ``[B, L, F]`` under the read-out
        (G scorers: one per run, or one per pooled committee size)."""
        mapped = self.normalizer(features, mask)
        if self.feature_map is not None:
            mapped = self.feature_map(mapped)
        include = self.hparams.include_current
        return self.learner.scores(mapped, mask, self.readout, include_current=include, groups=self.groups)

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        """The selected scorer's scores ``[B, L]`` of raw features ``[B, L, F]``."""
        return self.run_scores(features, mask)[self.selected_run]

    def select_on(self, val: QuerySplit | None) -> None:
        """Score every scorer (run or pooled committee size) on validation and keep the best."""
        if val is None:
            if len(self.groups) > 1 and not self._unvalidated_announced:
                # scorers are chosen by validation only: without it the first is kept, said so
                self._unvalidated_announced = True
                warnings.warn(
                    f"{len(self.groups)} runs but no validation split (data.val_fraction=0?): run 0 is kept",
                    stacklevel=2,
                )
            return
        name = self.monitor.removeprefix("val/")
        metrics = [ranking_metrics(self.ks, gain=self.gain, empty=self.empty)[name] for _ in self.groups]
        for first in range(0, val.n_queries, 256):
            batch = val.padded(slice(first, first + 256))
            mask = batch["mask"].to(self.device)
            scores = self.run_scores(batch["features"].to(self.device), mask)
            for run, metric in enumerate(metrics):
                metric.update(scores[run], batch["labels"].to(self.device), mask)
        sign = 1.0 if higher_is_better(name) else -1.0
        monitored = torch.stack([metric.compute() for metric in metrics]) * sign
        self.selected_run.fill_(int(monitored.argmax()))
        self.best_value.fill_(max(float(self.best_value), float(monitored.max())))

    def evaluate(self, split: QuerySplit, scores: Tensor | None, *, stage: str) -> dict[str, float]:
        """Validation names the selected scorer when there are several."""
        return {"selected_run": float(self.selected_run)} if stage == "val" and len(self.groups) > 1 else {}

    def export_inputs(self) -> nn.Module:
        """What the exported scorer reads its input through: the normalizer, then the feature
        map's live columns only (its other columns are 0 for every finite input, and their weights 0)."""
        normalizer = copy.deepcopy(self.normalizer).cpu()
        if self.feature_map is None:
            return normalizer
        return ThresholdInputs.from_thresholds(normalizer, copy.deepcopy(self.feature_map).cpu())

    def scorer_for(self, readout: str) -> nn.Module:
        """The selected scorer ``[..., L, c] -> [..., L]`` on ``export_inputs()``' columns: a
        ``LinearScorer`` (bias 0) for linear read-outs, a ``RankVoteScorer`` for ``vote``."""
        chosen, include = int(self.selected_run), self.hparams.include_current
        live = self.feature_map.live_columns() if self.feature_map is not None else slice(None)
        if readout == "vote":
            committee, votes = self.learner.members(include_current=include, groups=self.groups)
            keep = votes[chosen] > 0  # empty and zero-count members vote nothing
            return RankVoteScorer(committee[chosen][keep][:, live].cpu(), votes[chosen][keep].cpu())
        weights = self.learner.linear_weights(readout, include_current=include, groups=self.groups)
        return LinearScorer.from_weights(weights[chosen][live])

    def scorer(self) -> nn.Module:
        """The configured read-out of the selected scorer on raw features (what is exported)."""
        return Normalized(self.export_inputs(), self.scorer_for(self.readout))

    def export_model(self, out_dir: str | Path) -> dict[str, str]:
        """``scorer.pt`` / ``scorer.onnx`` of the configured read-out; a committee also exports its
        other rule under ``weight/`` or ``vote/`` (same files)."""
        inputs = self.export_inputs()
        exported = export_scorer(inputs, self.scorer_for(self.readout), out_dir, self.hparams.n_features)
        if self.hparams.variant == "committee":
            other = "vote" if self.readout == "weight" else "weight"
            extra = export_scorer(inputs, self.scorer_for(other), Path(out_dir) / other, self.hparams.n_features)
            exported.update({f"{other}_{key}": path for key, path in extra.items()})
        return exported


__all__ = ["VARIANTS", "PairwisePerceptronModule", "RankVoteScorer", "rank_vote_scores"]
