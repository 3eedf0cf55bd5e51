"""``model=rankboost``: RankBoost.B (``rankers.boosting.rankboost``) trained under ``train.py``.

    python train.py model=rankboost data=letor data.train=train.txt data.val=vali.txt data.test=test.txt
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import TensorBoardLogger
from torch import Tensor, nn

from datamodules.batching import pad_batch
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
from rankers.export import export_scorer
from rankers.list_metrics import ListMetrics
from rankers.threads import CpuThreads

log = logging.getLogger(__name__)

NEG_INF = float("-inf")


@dataclass
class _EvalSet:
    """Flat documents of an evaluation split and where they sit in the padded ``[B, L]`` layout."""

    features: Tensor  # [N, F] normalized
    unranked: Tensor | None  # [N, F]
    rows: Tensor  # [N] long, the query (row of the padded batch)
    cols: Tensor  # [N] long, the position in it
    labels: Tensor  # [B, L]
    mask: Tensor  # [B, L]

    def padded(self, flat: Tensor) -> Tensor:
        """``[..., N]`` per-document values -> ``[..., B, L]`` (0 where padded)."""
        out = flat.new_zeros(*flat.shape[:-1], *self.mask.shape)
        out[..., self.rows, self.cols] = flat
        return out


def _normalize_queries(normalizer: FeatureNormalizer, features: Tensor, offsets: Tensor, chunk: int = 256) -> Tensor:
    """Flat ``[N, F]`` raw features of queries ``offsets [Q + 1]`` -> normalized ``[N, F]``, each query
    normalized within itself (``query_zscore``) exactly as in evaluation and in the export."""
    if normalizer.kind != "query_zscore":
        return normalizer(features[None], None)[0]
    starts, lengths = offsets[:-1], offsets[1:] - offsets[:-1]
    parts = []
    for first in range(0, len(starts), chunk):  # setup only: bounded padded memory
        batch = pad_batch(
            features,
            torch.zeros(len(features), device=features.device),
            *(t[first : first + chunk] for t in (starts, lengths)),
        )
        parts.append(normalizer(batch["features"], batch["mask"])[batch["mask"]])
    return torch.cat(parts) if parts else features


METRIC_FUNCTIONS = {"ndcg": ndcg}


class RankBoostModule(CpuThreads, ListMetrics, pl.LightningModule):
    """RankBoost.B trained under ``train.py``: ``rounds_per_epoch`` boosting rounds per epoch.

    The training documents are taken once, whole (never list-sampled), from the trainer's training
    loader at the start of the fit and kept on the device with the per-feature sort; validation
    documents likewise, so that every round's validation metric is computed in the same step. Each
    epoch runs its rounds in its first training step (the epoch's other batches do nothing), logs
    the per-round curves to TensorBoard (``rounds/...``, x-axis = round: the training exponential
    loss ``prod Z_t``, the 0/1 ranking loss ``rloss_{D_1}``, ``Z_t``, ``r``, ``alpha``, the validation
    metric) and the epoch's last values as ``train/exp_loss``, ``train/rloss``.

    Args:
        n_features, normalizer: from ``datamodule.model_inputs()``.
        normalize: threshold the normalized features (the datamodule's ``normalization``) or the raw
            values (False, RankLib's way and ``model=rankboost``'s default). A global z-score changes
            no ranker, only float rounding; ``query_zscore`` changes the features themselves. A
            checkpoint saved before the option existed (before 2026-11-23) was trained on normalized
            features: load it with ``load_from_checkpoint(path, normalize=True)``.
        rounds: the most boosting rounds; rounds_per_epoch: rounds between Lightning validations.
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
        super().__init__()
        ks = [int(k) for k in ks]
        self.save_hyperparameters(ignore=["normalizer"])
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
        self.monitor, self.monitor_k = monitor, int(k)
        self.automatic_optimization = False
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
        # Lightning counts steps by optimizer steps: a no-op optimizer marks each epoch's step
        self.step_marker = nn.Parameter(torch.zeros(()), requires_grad=False)
        self.init_list_metrics(ks, gain=gain, empty=empty)
        self.learner: RankBoostLearner | None = None
        self.val_set: _EvalSet | None = None
        self._stream: dict[str, list[tuple[Tensor, Tensor]]] = {"val": [], "test": []}

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

    # -- data on the device ---------------------------------------------------------------------
    def _training_documents(self, loader: Any) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
        """Flat ``(normalized [N, F], unranked, labels [N], query [N])`` of the whole training split."""
        dataset = getattr(loader, "dataset", None)
        if all(hasattr(dataset, name) for name in ("features", "labels", "offsets")):  # QueryDataset
            features, labels, offsets = dataset.features, dataset.labels, dataset.offsets
        elif all(hasattr(loader, name) for name in ("features", "labels", "starts", "lengths")):  # DeviceBatches
            features, labels = loader.features, loader.labels
            offsets = torch.cat([loader.starts, loader.starts[-1:] + loader.lengths[-1:]])
        else:
            return self._batched_documents(loader)
        features, labels, offsets = (t.to(self.device) for t in (features, labels, offsets))
        query = torch.repeat_interleave(torch.arange(len(offsets) - 1, device=self.device), offsets.diff())
        normalized = _normalize_queries(self.normalizer, features, offsets)
        return normalized, self._unranked(features), labels.float(), query

    def _batched_documents(self, loader: Iterable) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
        """The same from iterated batches: LETOR batches (one query per row) or an ordinal stream
        ``{"features": [B, d], "labels": [B]}`` (the whole stream is one query, e.g. one user's items)."""
        parts: list[tuple[Tensor, Tensor | None, Tensor, Tensor]] = []
        next_query = 0
        for batch in loader:
            raw, labels = batch["features"].to(self.device), batch["labels"].to(self.device).float()
            if "mask" in batch:
                mask = batch["mask"].to(self.device)
                rows = torch.arange(mask.shape[0], device=self.device)[:, None].expand_as(mask)[mask]
                unranked = self._unranked(raw)
                parts.append(
                    (
                        self.normalizer(raw, mask)[mask],
                        None if unranked is None else unranked[mask],
                        labels[mask],
                        rows + next_query,
                    )
                )
                next_query += mask.shape[0]
            else:
                parts.append(
                    (
                        self.normalizer(raw[None], None)[0],
                        self._unranked(raw),
                        labels,
                        labels.new_zeros(len(labels), dtype=torch.long),
                    )
                )
        if not parts:
            raise ValueError("RankBoost needs training documents: the training loader is empty")
        unranked = None if parts[0][1] is None else torch.cat([p[1] for p in parts])
        return (
            torch.cat([p[0] for p in parts]),
            unranked,
            torch.cat([p[2] for p in parts]),
            torch.cat([p[3] for p in parts]),
        )

    def _eval_set(self, loader: Iterable) -> _EvalSet | None:
        """Validation documents for the per-round metric (LETOR batches or one stream query)."""
        feats, unranked, rows, cols, labels = [], [], [], [], []
        n_rows, width = 0, 1
        for batch in loader:
            raw, y = batch["features"].to(self.device), batch["labels"].to(self.device).float()
            if "mask" not in batch:  # an ordinal stream: one query, laid out as one row
                raw, y = raw[None], y[None]
                mask = torch.ones(y.shape, dtype=torch.bool, device=self.device)
                offset = sum(len(c) for c in cols)
                row = torch.zeros(y.shape[1], dtype=torch.long, device=self.device)
                col = torch.arange(y.shape[1], device=self.device) + offset
                n_rows = 1
            else:
                mask = batch["mask"].to(self.device)
                grid_rows = torch.arange(mask.shape[0], device=self.device)[:, None].expand_as(mask)
                grid_cols = torch.arange(mask.shape[1], device=self.device)[None, :].expand_as(mask)
                row, col = grid_rows[mask] + n_rows, grid_cols[mask]
                n_rows += mask.shape[0]
            u = self._unranked(raw)
            feats.append(self.normalizer(raw, mask)[mask])
            unranked.append(None if u is None else u[mask])
            rows.append(row)
            cols.append(col)
            labels.append(y[mask])
        if not feats:
            return None
        rows_t, cols_t = torch.cat(rows), torch.cat(cols)
        width = int(cols_t.max()) + 1 if len(cols_t) else 1
        padded_labels = torch.zeros(n_rows, width, device=self.device)
        padded_labels[rows_t, cols_t] = torch.cat(labels)
        mask = torch.zeros(n_rows, width, dtype=torch.bool, device=self.device)
        mask[rows_t, cols_t] = True
        return _EvalSet(
            torch.cat(feats), None if unranked[0] is None else torch.cat(unranked), rows_t, cols_t, padded_labels, mask
        )

    def on_fit_start(self) -> None:
        if self.trainer.world_size > 1:
            raise ValueError(f"RankBoost runs in one process (trainer.devices=1), not {self.trainer.world_size}")
        epochs = math.ceil(self.hparams.rounds / self.hparams.rounds_per_epoch)
        limit = self.trainer.max_epochs
        if limit is not None and 0 <= limit < epochs:
            raise ValueError(
                f"model.rounds={self.hparams.rounds} at model.rounds_per_epoch={self.hparams.rounds_per_epoch} "
                f"needs trainer.max_epochs >= {epochs} (it is {limit})"
            )

    def on_train_start(self) -> None:
        features, unranked, labels, query = self._training_documents(self.trainer.train_dataloader)
        data = prepare(
            features,
            labels,
            query,
            unranked=unranked,
            thresholds=self.hparams.thresholds,
            threshold_kind=self.hparams.threshold_kind,
            pair_weight=self.hparams.pair_weight,
        )
        t = int(self.n_rounds)  # resumed: D_t is a function of the training scores alone
        scores = self.ensemble_scores(features, unranked, rounds=t)
        self.learner = RankBoostLearner(
            data,
            q_def=self.hparams.q_def,
            allow_negative=self.hparams.allow_negative,
            alpha=self.hparams.alpha,
            smoothing=self.hparams.smoothing,
            scores=scores,
        )
        val = self.trainer.val_dataloaders
        self.val_set = self._eval_set(val) if val is not None else None
        if self.val_set is not None:
            self.val_scores = self.ensemble_scores(self.val_set.features, self.val_set.unranked, rounds=t)
        log.info(
            "RankBoost: %d documents, %d queries, %d crucial pairs, %d features x %d thresholds",
            len(labels),
            data.n_queries,
            data.n_pairs,
            features.shape[1],
            data.thresholds.shape[1],
        )

    def training_step(self, batch: Any, batch_idx: int) -> None:
        start = int(self.n_rounds)
        count = min(self.hparams.rounds_per_epoch, self.hparams.rounds - start)
        if batch_idx > 0:  # an epoch is one step of rounds; its other batches are not read
            return
        if count <= 0 or self.learner is None:
            self.trainer.should_stop = True
            return
        steps = []
        for i in range(count):
            step = self.learner.round()
            t = start + i + 1
            if t % self.hparams.rloss_every == 0 or i == count - 1:  # a sort per call: not every round
                step["rloss"] = ranking_loss(self.learner.scores, self.learner.data)
            self.ens_feature[start + i] = step["feature"]
            self.ens_threshold[start + i] = step["threshold"].float()
            self.ens_q_def[start + i] = step["q_def"].float()
            self.ens_alpha[start + i] = step["alpha"].float()
            steps.append(step)
        stats = {key: torch.stack([s[key] for s in steps]).float() for key in ("r", "alpha", "z", "log_loss")}
        rloss_rounds = [i for i, s in enumerate(steps) if "rloss" in s]
        stats["rloss"] = torch.stack([steps[i]["rloss"] for i in rloss_rounds]).float()
        curve = self._validation_curve(start, count)
        if curve is not None:
            stats["val"] = curve
        host = {key: value.cpu().tolist() for key, value in stats.items()}  # the epoch's one sync
        self.n_rounds.fill_(start + count)
        self._track_best(start, host.get("val"))
        self._log_rounds(start, host, rloss_rounds)
        self.log("train/exp_loss", math.exp(host["log_loss"][-1]), on_step=False, on_epoch=True, prog_bar=True)
        self.log("train/rloss", host["rloss"][-1], on_step=False, on_epoch=True)
        self.log("train/rounds", float(start + count), on_step=False, on_epoch=True)
        self.optimizers().step()
        patience = self.hparams.patience
        degenerate = max(abs(r) for r in host["r"][-1:]) < 1e-12  # no weak ranker says anything
        if start + count >= self.hparams.rounds or degenerate or (patience is not None and int(self.stale) >= patience):
            self.trainer.should_stop = True

    def _validation_curve(self, start: int, count: int) -> Tensor | None:
        """The monitored validation metric after each of the epoch's rounds, ``[count]``, in one go."""
        if self.val_set is None:
            return None
        v = self.val_set
        rounds = slice(start, start + count)
        h = weak_outputs(
            v.features, v.unranked, self.ens_feature[rounds], self.ens_threshold[rounds], self.ens_q_def[rounds]
        )
        after = self.val_scores[:, None] + (h * self.ens_alpha[rounds]).cumsum(1)  # [N, count]
        self.val_scores = after[:, -1]
        scores = v.padded(after.T)  # [count, B, L]
        b, length = v.mask.shape
        values = METRIC_FUNCTIONS["ndcg"](
            scores.reshape(count * b, length),
            v.labels.repeat(count, 1),
            v.mask.repeat(count, 1),
            k=self.monitor_k,
            gain=self.hparams.gain,
            empty=self.hparams.empty,
        )
        return values.view(count, b).mean(1)

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

    def _log_rounds(self, start: int, host: dict[str, list[float]], rloss_rounds: list[int]) -> None:
        """Per-round TensorBoard curves (x-axis: the round)."""
        for logger in self.loggers:
            if not isinstance(logger, TensorBoardLogger):
                continue
            writer = logger.experiment
            for i in range(len(host["r"])):
                t = start + i + 1
                writer.add_scalar("rounds/train_exp_loss", math.exp(host["log_loss"][i]), t)
                writer.add_scalar("rounds/z", host["z"][i], t)
                writer.add_scalar("rounds/r", host["r"][i], t)
                writer.add_scalar("rounds/alpha", host["alpha"][i], t)
                if "val" in host:
                    writer.add_scalar(f"rounds/{self.monitor}", host["val"][i], t)
            for i, value in zip(rloss_rounds, host["rloss"], strict=True):
                writer.add_scalar("rounds/train_rloss", value, start + i + 1)

    # -- evaluation ----------------------------------------------------------------------------
    def _evaluate(self, batch: Any, stage: str) -> None:
        if "mask" not in batch:  # an ordinal stream: one query, scored at the epoch's end
            raw = batch["features"]
            self._stream[stage].append(
                (
                    self.ensemble_scores(self.normalizer(raw[None], None)[0], self._unranked(raw)),
                    batch["labels"].float(),
                )
            )
            return
        self.log_list_metrics(self(batch["features"], batch["mask"]), batch, stage)

    def _evaluate_stream(self, stage: str) -> None:
        parts, self._stream[stage] = self._stream[stage], []
        if not parts:
            return
        scores, labels = (torch.cat(t)[None] for t in zip(*parts, strict=True))
        metrics = self.val_metrics if stage == "val" else self.test_metrics
        for name, metric in metrics.items():
            metric.update(scores, labels, None)
            self.log(f"{stage}/{name}", metric.compute(), prog_bar=name == "ndcg@10")
            metric.reset()
        self.log(f"{stage}/pairwise_error", pairwise_error(scores, labels).mean())

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._evaluate_stream("val")
        self.log("val/rounds", float(self.active_rounds()))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def on_test_epoch_end(self) -> None:
        self._evaluate_stream("test")

    def predict_step(self, batch: Any, batch_idx: int) -> Tensor:
        return self(batch["features"], batch.get("mask"))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD([self.step_marker], lr=0.0)

    # -- export ---------------------------------------------------------------------------------
    def export_model(self, out_dir: str | Path) -> dict[str, str]:
        """``scorer.pt`` / ``scorer.onnx`` (raw ``[L, F]`` -> ``[L]``) and ``ensemble.json`` (the weak rankers)."""
        scorer = self.scorer().eval()
        n_features = self.hparams.n_features
        paths = export_scorer(FeatureNormalizer("none", num_features=n_features), scorer, out_dir, n_features)
        meta_path = Path(paths["meta"])
        meta = json.loads(meta_path.read_text())
        meta.update(normalization=self.normalizer.kind, model="rankboost", rounds=int(scorer.alpha.numel()))
        meta_path.write_text(json.dumps(meta, indent=1))
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
        return {**paths, "ensemble": str(path)}
