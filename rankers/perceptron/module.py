"""The online ordinal rankers under ``train.py``: a streaming ``Learner``, one pass over the stream per epoch."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from datamodules.normalization import FeatureNormalizer
from rankers.learner import FitLog, Learner, Normalized, QuerySplit
from rankers.outputs import save_torchscript
from rankers.perceptron.ensemble import PRankEnsemble, WidrowHoff, rank_of, stream_device
from rankers.scorers import LinearScorer

# algorithm -> (combination rule used for predictions, keep the hypothesis history)
ALGORITHMS = {
    "prank": ("bpm", False),
    "prank_vp": ("voted", True),
    "oap_bpm": ("bpm", False),
    "oap_bagg": ("bagg", False),
    "oap_vp": ("vp", False),
    "widrow_hoff": (None, False),
}


class Grader(nn.Module):
    """Raw features ``[L, F]`` -> predicted 0-based grade ``[L]`` (averaged weights and thresholds)."""

    def __init__(self, normalizer: FeatureNormalizer, weights: Tensor, thresholds: Tensor) -> None:
        super().__init__()
        self.normalizer = normalizer
        self.register_buffer("weights", weights)
        self.register_buffer("thresholds", thresholds)

    def forward(self, features: Tensor) -> Tensor:
        score = self.normalizer(features.unsqueeze(0), None).squeeze(0) @ self.weights
        return (score.unsqueeze(-1) - self.thresholds >= 0).long().cumprod(-1).sum(-1)


class OnlineOrdinalModule(Learner):
    """PRank / PRank-VP / OAP-BPM / OAP-Bagg / OAP-VP / Widrow-Hoff trained on the stream in order.

    The training split is an ordinal stream (``data=ordinal_synthetic``, ratings: streamed in its
    order) or LETOR queries (each normalized within itself, queries in a new seeded order each epoch,
    their documents in file order), labels the ordinal ranks. Logs the online average rank loss
    ``1/T sum |y_hat_t - y_t|`` of the predictions made before each update (Harrington's Figure 2)
    every ``log_every`` examples; the harness evaluates rank loss (and NDCG when the data has queries).

    Device: the CPU always. One run streams example by example; the C++ loop there beat the H200's
    tensor path 12x on Table 1 (1.6 s against 19.3 s, docs/benchmarks.md); batching many runs is the
    experiments' business (``experiments.harrington2003``), not one trained model's.
    """

    streaming = True
    ranks_streams = False  # a stream's rank loss is its metric; NDCG only for query data

    def __init__(
        self,
        algorithm: str,
        *,
        n_features: int,
        n_ranks: int,
        n_perceptrons: int = 1,
        tau: float = 1.0,
        eta: float = 0.1,
        seed: int = 0,
        epochs: int = 1,
        normalizer: FeatureNormalizer | None = None,
        monitor: str = "val/rank_loss",
        log_every: int = 500,
    ) -> None:
        super().__init__(monitor=monitor)
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {sorted(ALGORITHMS)}, got {algorithm!r}")
        if epochs < 1 or log_every < 1:
            raise ValueError(f"model.epochs and model.log_every must be >= 1, got {epochs}, {log_every}")
        self.save_hyperparameters(ignore=["normalizer"])
        self.normalizer = normalizer if normalizer is not None else FeatureNormalizer("none", num_features=n_features)
        self.combine, keep_history = ALGORITHMS[algorithm]
        self.n_ranks, self.epochs, self.name = n_ranks, epochs, algorithm
        if algorithm == "widrow_hoff":
            self.learner: PRankEnsemble | WidrowHoff = WidrowHoff(n_features, n_ranks, eta=eta)
        else:
            single = algorithm in ("prank", "prank_vp")
            self.learner = PRankEnsemble(
                n_features,
                n_ranks,
                n_perceptrons=1 if single else n_perceptrons,
                tau=1.0 if single else tau,
                seed=seed,
                keep_history=keep_history,
            )
        # the online loss so far (every epoch's predictions before their updates)
        self.register_buffer("online_error", torch.zeros((), dtype=torch.float64))
        self.register_buffer("online_count", torch.zeros((), dtype=torch.long))

    def device_policy(self, available: torch.device) -> torch.device:
        """One run's stream: the CPU's C++ kernel (``stream_device``: on a GPU machine only thousands
        of perceptrons at once beat it, measured on an H200; Widrow-Hoff has no GPU kernel)."""
        if isinstance(self.learner, WidrowHoff):
            return WidrowHoff.stream_device(available)
        runs, perceptrons = self.learner.correct.shape  # [R, N]
        return stream_device(available, n_runs=runs, n_perceptrons=perceptrons, keep_history=self.learner.keep_history)

    def _stream(self, split: QuerySplit) -> tuple[Tensor, Tensor]:
        """``(features [N, d], labels [N] long)``: a stream's raw documents, queries' normalized."""
        features = split.features if split.stream else split.normalized(self.normalizer)
        labels = split.labels.long()
        if labels.numel() and int(labels.max()) >= self.n_ranks:
            raise ValueError(f"label {int(labels.max())} >= n_ranks={self.n_ranks}; set model.n_ranks")
        return features, labels

    def partial_fit(self, train: QuerySplit, *, epoch: int, log: FitLog) -> None:
        """One pass over the training split; the online rank loss every ``log_every`` examples."""
        features, labels = self._stream(train)
        if not train.stream:  # queries in a new order each epoch, as the shuffled training batches were
            order = torch.randperm(train.n_queries, generator=torch.Generator().manual_seed(self.hparams.seed + epoch))
            documents = torch.cat([torch.arange(train.offsets[q], train.offsets[q + 1]) for q in order.tolist()])
            features, labels = features[documents], labels[documents]
        online = self._online_predictions(features, labels)
        errors = (online - labels).abs().double().cumsum(0)
        seen, before = int(self.online_count), float(self.online_error)
        for end in [*range(self.hparams.log_every, len(labels), self.hparams.log_every), len(labels)]:
            count = seen + end
            log.scalar("train/online_rank_loss", (before + float(errors[end - 1])) / max(1, count), count)
            log.scalar("train/examples_seen", float(count), count)
        self.online_error.add_(errors[-1] if len(errors) else 0.0)
        self.online_count.add_(len(labels))

    def _online_predictions(self, features: Tensor, labels: Tensor) -> Tensor:
        """Stream the examples; the prediction of the combined model before each update, ``[T]``."""
        if isinstance(self.learner, WidrowHoff) or self.combine == "voted":
            # one model (Widrow-Hoff), or a rule that needs the whole history (voted): the current hypothesis
            return self.learner.partial_fit(features[None], labels[None])[0, 0]
        return self.learner.partial_fit(features[None], labels[None], combine=self.combine)[0]

    def predict_ranks(self, features: Tensor) -> Tensor:
        if isinstance(self.learner, WidrowHoff):
            return self.learner.predict(features[None])[0, 0]
        return self.learner.predict(features[None], self.combine)[0]

    def scores(self, features: Tensor) -> Tensor:
        """Ranking scores ``w . x`` of ``features [..., d]`` (averaged weights)."""
        return features @ self.linear_weights()

    def linear_weights(self) -> Tensor:
        if isinstance(self.learner, WidrowHoff):
            return self.learner.weights[0, 0]
        return self.learner.weights[0].mean(0)

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        """Raw features ``[B, L, F]`` (mask ``[B, L]``) -> scores ``[B, L]``."""
        return self.scores(self.normalizer(features, mask))

    def evaluate(self, split: QuerySplit, scores: Tensor | None, *, stage: str) -> dict[str, float]:
        """The rank loss of the predicted grades (mean ``|y_hat - y|`` over the documents)."""
        features, labels = self._stream(split)
        return {"rank_loss": float((self.predict_ranks(features) - labels).abs().float().mean())}

    def scorer(self) -> nn.Module:
        """``w . x`` of the normalized features as a ``LinearScorer`` (bias 0), for the standard export."""
        return Normalized(self.normalizer, LinearScorer.from_weights(self.linear_weights().detach()))

    def export_extra(self, out_dir: str) -> dict[str, str]:
        """``grader.pt``: raw features ``[L, F]`` -> predicted grade ``[L]`` (averaged weights and
        thresholds, the OAP-BPM rule); none for Widrow-Hoff."""
        if isinstance(self.learner, WidrowHoff):
            return {}
        path = Path(out_dir) / "grader.pt"
        grader = Grader(
            self.normalizer.cpu(),
            self.linear_weights().detach().cpu(),
            self.learner.thresholds[0].mean(0).detach().cpu(),
        )
        save_torchscript(torch.jit.script(grader), path, "export")
        return {"grader": str(path)}


__all__ = ["Grader", "OnlineOrdinalModule", "rank_of"]
