"""``model=rankboost``: RankBoost.B (``rankers.boosting.rankboost``) trained under ``train.py``.

python train.py model=rankboost data=letor data.train=train.txt data.val=vali.txt data.test=test.txt
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from datamodules.normalization import FeatureNormalizer
from metrics.functional import ndcg, pairwise_error
from rankers.boosting.rankboost import (
    ALPHAS,
    PAIR_WEIGHTS,
    THRESHOLD_KINDS,
    RankBoostLearner,
    RankBoostScorer,
    prepare,
    ranking_loss,
    weak_outputs,
)
from rankers.learner import FitLog, Learner, QuerySplit

logger = logging.getLogger(__name__)

NEG_INF = float("-inf")


METRIC_FUNCTIONS = {"ndcg": ndcg}


class RankBoostModule(Learner):
    """RankBoost.B trained under ``train.py`` (``rankers.harness``): chunks of ``rounds_per_epoch`` rounds.

    The whole training split (never list-sampled) is prepared once with the per-feature sort, and the
    whole validation split likewise, so that every round's validation metric is computed with the
    chunk's rounds in one go. Each chunk logs the per-round curves to TensorBoard (``rounds/...``,
    x-axis = round: the training exponential loss ``prod Z_t``, the 0/1 ranking loss ``rloss_{D_1}``,
    ``Z_t``, ``r``, ``alpha``, the validation metric) and its last values as ``train/exp_loss``,
    ``train/rloss``; between chunks the fit stops early (patience, a degenerate round, a signal).

    Args:
        n_features, normalizer: from ``datamodule.model_inputs()``.
        normalize: threshold the normalized features (the datamodule's ``normalization``) or the raw
            values (False, RankLib's way and ``model=rankboost``'s default). A global z-score changes
            no ranker, only float rounding; ``query_zscore`` changes the features themselves. A
            checkpoint saved before the option existed (before 2026-11-23) was trained on normalized
            features: load it with ``load_from_checkpoint(path, normalize=True)``.
        rounds: the most boosting rounds; rounds_per_epoch: rounds per chunk (one host sync, one
            validation curve, a safe point to stop at).
        thresholds, threshold_kind: candidate thresholds per feature (``quantile`` or ``uniform``).
        missing: the raw feature value that means "unranked" (the paper's abstention, 0 for
            unrated items in collaborative filtering); None: every value is ranked.
        q_def, allow_negative, alpha, smoothing: see ``RankBoostLearner``.
        pair_weight: ``pairs`` (D_1 uniform over crucial pairs) or ``queries`` (each query equal).
        patience: stop after this many rounds without a better validation ``monitor`` (None: never).
        keep_best: score with the ensemble's prefix that was best on validation (RankLib's rule),
            else with every round.
        ks, gain, empty, monitor: metric conventions (``metrics.functional``); ``monitor`` must be
            ``val/ndcg@k`` (the metric computed per round).
        cpu_threads: torch threads while fitting / evaluating on CPU (None: leave as is).
        rloss_every: log the 0/1 training ranking loss every this many rounds (and at each epoch's
            end); the exponential loss ``prod Z_t`` is logged every round.

    Device: the trainer's (``device_policy`` keeps it): on one H200 a round over 5.3M crucial pairs
    took 0.00179 s, against 0.044 s on the 2-core CPU (``python -m bench.rankboost --train
    synthetic:100,400,136 --device cuda``, docs/benchmarks.md). A pairwise formulation (D per crucial
    pair) ran 3.0x faster still on the H200 but 5x slower on the CPU; it is bench/rankboost.py's
    reference, not yet a path the learner takes on CUDA.
    """

    def __init__(
        self,
        *,
        n_features: int,
        normalizer: FeatureNormalizer | None = None,
        normalize: bool = False,
        rounds: int = 300,
        rounds_per_epoch: int = 50,
        thresholds: int = 10,
        threshold_kind: str = "ranklib",
        missing: float | None = None,
        q_def: str | int = "best",
        allow_negative: bool = False,
        alpha: str = "approx",
        smoothing: float = 1e-6,
        pair_weight: str = "pairs",
        patience: int | None = None,
        keep_best: bool = True,
        ks: Sequence[int] = (1, 5, 10),
        gain: str = "exp2",
        empty: float = 0.0,
        monitor: str = "val/ndcg@10",
        cpu_threads: int | None = 1,
        rloss_every: int = 10,
    ) -> None:
        super().__init__(ks=ks, gain=gain, empty=empty, monitor=monitor)
        ks = [int(k) for k in ks]
        self.save_hyperparameters(ignore=["normalizer"])
        self.cpu_threads = cpu_threads
        if threshold_kind not in THRESHOLD_KINDS:
            raise ValueError(f"model.threshold_kind must be one of {THRESHOLD_KINDS}, got {threshold_kind!r}")
        if pair_weight not in PAIR_WEIGHTS:
            raise ValueError(f"model.pair_weight must be one of {PAIR_WEIGHTS}, got {pair_weight!r}")
        if alpha not in ALPHAS:
            raise ValueError(f"model.alpha must be one of {ALPHAS}, got {alpha!r}")
        if min(rounds, rounds_per_epoch, thresholds, rloss_every) < 1:
            raise ValueError("model.rounds, rounds_per_epoch, thresholds and rloss_every must be >= 1")
        name, _, k = monitor.removeprefix("val/").partition("@")
        if name not in METRIC_FUNCTIONS or not k.isdigit():
            raise ValueError(f"model.monitor must be val/ndcg@k (computed every round), got {monitor!r}")
        self.monitor_k = int(k)
        if normalizer is None or not normalize:
            normalizer = FeatureNormalizer("none", num_features=n_features)
        self.normalizer = normalizer
        # the ensemble, preallocated: checkpoints have one shape whatever the round
        self.register_buffer("ens_feature", torch.zeros(rounds, dtype=torch.long))
        self.register_buffer("ens_threshold", torch.zeros(rounds))
        self.register_buffer("ens_q_def", torch.zeros(rounds))
        self.register_buffer("ens_alpha", torch.zeros(rounds))
        self.register_buffer("n_rounds", torch.zeros((), dtype=torch.long))
        self.register_buffer("n_best", torch.zeros((), dtype=torch.long))
        self.register_buffer("best_value", torch.tensor(NEG_INF))
        self.register_buffer("stale", torch.zeros((), dtype=torch.long))

    # -- the ensemble ---------------------------------------------------------------------------
    def active_rounds(self) -> int:
        """How many rounds score: the best validation prefix (``keep_best``) or all of them."""
        if self.hparams.keep_best and int(self.n_best) > 0:
            return int(self.n_best)
        return int(self.n_rounds)

    def _unranked(self, raw: Tensor) -> Tensor | None:
        missing = self.hparams.missing
        return None if missing is None else raw == float(missing)

    def ensemble_scores(self, normalized: Tensor, unranked: Tensor | None, rounds: int | None = None) -> Tensor:
        """``H(x)`` of the first ``rounds`` rounds: ``[..., F]`` -> ``[...]``."""
        t = self.active_rounds() if rounds is None else rounds
        h = weak_outputs(normalized, unranked, self.ens_feature[:t], self.ens_threshold[:t], self.ens_q_def[:t])
        return (h * self.ens_alpha[:t].to(h.dtype)).sum(-1)

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        """Raw features ``[B, L, F]`` (mask ``[B, L]``) -> scores ``[B, L]``."""
        return self.ensemble_scores(self.normalizer(features, mask), self._unranked(features))

    def scorer(self) -> RankBoostScorer:
        """The active ensemble as a standalone scorer of raw features (CPU)."""
        t = self.active_rounds()
        return RankBoostScorer(
            self.normalizer,
            self.ens_feature[:t],
            self.ens_threshold[:t],
            self.ens_q_def[:t],
            self.ens_alpha[:t],
            self.hparams.missing,
        ).cpu()

    # -- the learner contract -------------------------------------------------------------------
    name = "rankboost"

    def _documents(self, split: QuerySplit) -> tuple[Tensor, Tensor | None]:
        """``(normalized [N, F], unranked [N, F] | None)`` of a split's documents, each query
        normalized within itself as in evaluation and in the export."""
        return split.normalized(self.normalizer), self._unranked(split.features)

    def fit(self, train: QuerySplit, val: QuerySplit | None, *, log: FitLog) -> None:
        """Boost up to ``rounds`` rounds on the whole training split (a resumed fit goes on from its
        rounds: ``D_t`` is a function of the training scores alone), ``rounds_per_epoch`` at a time."""
        features, unranked = self._documents(train)
        data = prepare(
            features,
            train.labels.float(),
            train.query,
            unranked=unranked,
            thresholds=self.hparams.thresholds,
            threshold_kind=self.hparams.threshold_kind,
            pair_weight=self.hparams.pair_weight,
        )
        t = int(self.n_rounds)
        learner = RankBoostLearner(
            data,
            q_def=self.hparams.q_def,
            allow_negative=self.hparams.allow_negative,
            alpha=self.hparams.alpha,
            smoothing=self.hparams.smoothing,
            scores=self.ensemble_scores(features, unranked, rounds=t),
        )
        logger.info(
            "RankBoost: %d documents, %d queries, %d crucial pairs, %d features x %d thresholds",
            len(train.labels),
            data.n_queries,
            data.n_pairs,
            features.shape[1],
            data.thresholds.shape[1],
        )
        validation = None
        if val is not None:
            v_features, v_unranked = self._documents(val)
            validation = (v_features, v_unranked, val.padded(), self.ensemble_scores(v_features, v_unranked, rounds=t))
        while int(self.n_rounds) < self.hparams.rounds and not log.should_stop():
            validation, done = self._chunk(learner, validation, log)
            if done:
                break

    def _chunk(self, learner: RankBoostLearner, validation: tuple | None, log: FitLog) -> tuple[tuple | None, bool]:
        """``rounds_per_epoch`` rounds, their curves logged with one host sync; True when the fit is done."""
        start = int(self.n_rounds)
        count = min(self.hparams.rounds_per_epoch, self.hparams.rounds - start)
        steps = []
        for i in range(count):
            step = learner.round()
            if (start + i + 1) % self.hparams.rloss_every == 0 or i == count - 1:  # a sort per call
                step["rloss"] = ranking_loss(learner.scores, learner.data)
            self.ens_feature[start + i] = step["feature"]
            self.ens_threshold[start + i] = step["threshold"].float()
            self.ens_q_def[start + i] = step["q_def"].float()
            self.ens_alpha[start + i] = step["alpha"].float()
            steps.append(step)
        stats = {key: torch.stack([s[key] for s in steps]).float() for key in ("r", "alpha", "z", "log_loss")}
        rloss_rounds = [i for i, s in enumerate(steps) if "rloss" in s]
        stats["rloss"] = torch.stack([steps[i]["rloss"] for i in rloss_rounds]).float()
        if validation is not None:
            stats["val"], validation = self._validation_curve(start, count, validation)
        host = {key: value.cpu().tolist() for key, value in stats.items()}  # the chunk's one sync
        self.n_rounds.fill_(start + count)
        self._track_best(start, host.get("val"))
        self._log_rounds(start, host, rloss_rounds, log)
        patience = self.hparams.patience
        degenerate = max(abs(r) for r in host["r"][-1:]) < 1e-12  # no weak ranker says anything
        stale = patience is not None and int(self.stale) >= patience
        return validation, start + count >= self.hparams.rounds or degenerate or stale

    def _validation_curve(self, start: int, count: int, validation: tuple) -> tuple[Tensor, tuple]:
        """The monitored validation metric after each of the chunk's rounds, ``[count]``, in one go."""
        features, unranked, batch, scores = validation
        rounds = slice(start, start + count)
        h = weak_outputs(
            features, unranked, self.ens_feature[rounds], self.ens_threshold[rounds], self.ens_q_def[rounds]
        )
        after = scores[:, None] + (h * self.ens_alpha[rounds]).cumsum(1)  # [N, count]
        mask = batch["mask"]
        padded = after.new_zeros(count, *mask.shape)
        padded[:, mask] = after.T
        b, length = mask.shape
        values = METRIC_FUNCTIONS["ndcg"](
            padded.reshape(count * b, length),
            batch["labels"].repeat(count, 1),
            mask.repeat(count, 1),
            k=self.monitor_k,
            gain=self.hparams.gain,
            empty=self.hparams.empty,
        )
        return values.view(count, b).mean(1), (features, unranked, batch, after[:, -1])

    def _track_best(self, start: int, curve: list[float] | None) -> None:
        if curve is None:
            self.n_best.fill_(0)
            return
        best, n_best, stale = float(self.best_value), int(self.n_best), int(self.stale)
        for i, value in enumerate(curve):
            if value > best:
                best, n_best, stale = value, start + i + 1, 0
            else:
                stale += 1
        self.best_value.fill_(best)
        self.n_best.fill_(n_best)
        self.stale.fill_(stale)

    def _log_rounds(self, start: int, host: dict[str, list[float]], rloss_rounds: list[int], log: FitLog) -> None:
        """Per-round TensorBoard curves (x-axis: the round) and the chunk's last values."""
        for i in range(len(host["r"])):
            t = start + i + 1
            log.scalar("rounds/train_exp_loss", math.exp(host["log_loss"][i]), t)
            log.scalar("rounds/z", host["z"][i], t)
            log.scalar("rounds/r", host["r"][i], t)
            log.scalar("rounds/alpha", host["alpha"][i], t)
            if "val" in host:
                log.scalar(f"rounds/{self.monitor}", host["val"][i], t)
        for i, value in zip(rloss_rounds, host["rloss"], strict=True):
            log.scalar("rounds/train_rloss", value, start + i + 1)
        last = start + len(host["r"])
        log.scalar("train/exp_loss", math.exp(host["log_loss"][-1]), last)
        log.scalar("train/rloss", host["rloss"][-1], last)
        log.scalar("train/rounds", float(last), last)

    def evaluate(self, split: QuerySplit, scores: Tensor | None, *, stage: str) -> dict[str, float]:
        """An ordinal stream (one query) adds its pairwise error; validation, the rounds that score."""
        extra = {}
        if split.stream and scores is not None:
            extra["pairwise_error"] = float(pairwise_error(scores[None], split.labels[None].float()).mean())
        if stage == "val":
            extra["rounds"] = float(self.active_rounds())
        return extra

    def fit_results(self) -> dict:
        """``epochs``: the chunks of ``rounds_per_epoch`` rounds fitted."""
        return {"epochs": math.ceil(int(self.n_rounds) / self.hparams.rounds_per_epoch)}

    # -- export ---------------------------------------------------------------------------------
    def export_meta(self) -> dict:
        return {"rounds": self.active_rounds()}

    def export_extra(self, out_dir: str) -> dict[str, str]:
        """``ensemble.json``: the weak rankers that score."""
        scorer = self.scorer()
        ensemble = {
            "missing": self.hparams.missing,
            "weak_rankers": [
                {"feature": int(f), "threshold": float(t), "q_def": float(q), "alpha": float(a)}
                for f, t, q, a in zip(
                    scorer.feature.tolist(),
                    scorer.threshold.tolist(),
                    scorer.q_def.tolist(),
                    scorer.alpha.tolist(),
                    strict=True,
                )
            ],
            "note": "h(x) = 1 if normalized x[feature] > threshold, 0 if not, q_def if raw x[feature] == missing",
        }
        path = Path(out_dir) / "ensemble.json"
        path.write_text(json.dumps(ensemble, indent=1))
        return {"ensemble": str(path)}
