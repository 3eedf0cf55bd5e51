"""The learner contract: everything that is not trained by gradient steps (boosting, forests, GBDT
engines, perceptron streams, Gaussian processes, label rankers) is a ``Learner``, run by one harness
(``rankers.harness``) that owns split collection, metrics, checkpoints, resume and export.

A family implements ``fit`` (a whole split) or, for a stream, ``partial_fit`` (one epoch), plus
``scorer()`` (what is exported) and ``device_policy`` (where its hot loop runs, measured). All of its
state is parameters and buffers (or ``get_extra_state``), so ``.to()``, ``state_dict`` and
``load_state_dict`` are ``nn.Module``'s.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

import torch
from pytorch_lightning.core.mixins import HyperparametersMixin
from torch import Tensor, nn

from datamodules.batching import Batch, pad_batch
from rankers.export import export_learner


@dataclass
class QuerySplit:
    """A whole split, flat: the documents of Q queries, query q owning rows ``offsets[q]:offsets[q+1]``.

    ``features [N, F]`` float32 raw as in the file (the learner applies its normalizer), ``labels [N]``
    float32 graded relevance, ``offsets [Q + 1]`` long.
    """

    features: Tensor
    labels: Tensor
    offsets: Tensor
    stream: bool = False  # an ordinal stream without query structure, held as one query in stream order

    def __post_init__(self) -> None:
        n = self.features.shape[0]
        if self.labels.shape != (n,) or self.offsets.ndim != 1 or len(self.offsets) < 1:
            raise ValueError(
                f"QuerySplit needs features [N, F], labels [N], offsets [Q + 1]; got {tuple(self.features.shape)}, "
                f"{tuple(self.labels.shape)}, {tuple(self.offsets.shape)}"
            )
        if int(self.offsets[0]) != 0 or int(self.offsets[-1]) != n or bool((self.offsets.diff() < 0).any()):
            raise ValueError(f"QuerySplit offsets must rise from 0 to N={n}")

    @property
    def n_queries(self) -> int:
        return len(self.offsets) - 1

    @property
    def query(self) -> Tensor:
        """``[N]`` long: each document's query."""
        lengths = self.offsets.diff()
        return torch.repeat_interleave(torch.arange(len(lengths), device=lengths.device), lengths)

    def padded(self, queries: slice = slice(None)) -> Batch:
        """The queries (all by default, or a slice of them) as one padded ``Batch``: features
        ``[Q, L, F]``, labels ``[Q, L]``, mask ``[Q, L]``."""
        starts, ends = self.offsets[:-1][queries], self.offsets[1:][queries]
        return pad_batch(self.features, self.labels, starts, ends - starts)

    def normalized(self, normalizer: nn.Module, chunk: int = 256) -> Tensor:
        """The flat features ``[N, F]`` through ``normalizer`` as evaluation and the export apply it:
        a per-query normalizer (``query_zscore``) within each query, any other one document-wise."""
        if getattr(normalizer, "kind", "none") != "query_zscore":
            return normalizer(self.features[None], None)[0]
        parts = []
        for first in range(0, self.n_queries, chunk):  # bounded padded memory
            batch = self.padded(slice(first, first + chunk))
            parts.append(normalizer(batch["features"], batch["mask"])[batch["mask"]])
        return torch.cat(parts) if parts else self.features

    def to(self, device: torch.device | str) -> QuerySplit:
        moved = (t.to(device) for t in (self.features, self.labels, self.offsets))
        return QuerySplit(*moved, stream=self.stream)


@dataclass
class LabelSplit:
    """A multilabel split (label ranking): ``features [N, F]`` float32 and ``labels [N, K]`` bool
    (instance n has label k). Its "queries" are the instances, each ranking the K labels."""

    features: Tensor
    labels: Tensor

    def __post_init__(self) -> None:
        if self.features.ndim != 2 or self.labels.ndim != 2 or len(self.features) != len(self.labels):
            raise ValueError(
                f"LabelSplit needs features [N, F] and labels [N, K]; got {tuple(self.features.shape)}, "
                f"{tuple(self.labels.shape)}"
            )

    @property
    def n_queries(self) -> int:
        return len(self.features)

    def to(self, device: torch.device | str) -> LabelSplit:
        return LabelSplit(self.features.to(device), self.labels.to(device))


Split = QuerySplit | LabelSplit


class Normalized(nn.Module):
    """``scorer(normalizer(features))``: a scorer of normalized features as one of raw features
    ``[..., L, F] -> [..., L]`` (the form ``Learner.scorer`` returns and the export takes)."""

    def __init__(self, normalizer: nn.Module, scorer: nn.Module) -> None:
        super().__init__()
        self.normalizer, self.scorer = normalizer, scorer

    def forward(self, features: Tensor) -> Tensor:
        return self.scorer(self.normalizer(features, None))


class FitLog(Protocol):
    """What a learner reports to and asks of the harness while it fits."""

    def scalar(self, name: str, value: float, step: int) -> None:
        """A TensorBoard scalar (per round or epoch: ``step`` is the x-axis)."""

    def should_stop(self) -> bool:
        """True when the learner should stop at its next safe point (a signal or a budget)."""


class Learner(HyperparametersMixin, nn.Module):
    """Everything not trained by gradient steps. All state is parameters/buffers (or
    ``get_extra_state``), so ``.to()``, ``state_dict`` and ``load_state_dict`` are ``nn.Module``'s.

    A family records its constructor arguments with ``self.save_hyperparameters(...)`` (Lightning's
    mixin: ``hparams``), so that checkpoints rebuild it (``load_from_checkpoint``).

    ``ks``, ``gain``, ``empty`` and ``monitor`` are the metric conventions the harness evaluates
    with; ``forward(features [..., L, F], mask [..., L] | None) -> [..., L]`` scores in the framework
    (the default calls ``scorer()``; a family whose normalizer is per query passes the mask on).
    """

    streaming: ClassVar[bool] = False  # True: the harness calls partial_fit once per epoch
    name: ClassVar[str] = "learner"  # the model's name in export metadata
    ranks_streams: ClassVar[bool] = True  # list metrics of an ordinal stream held as one query
    cpu_threads: int | None = None  # torch threads while fitting / evaluating on CPU (None: as is)

    def __init__(
        self,
        *,
        ks: Sequence[int] = (1, 5, 10),
        gain: str = "exp2",
        empty: float = 0.0,
        monitor: str = "val/ndcg@10",
    ) -> None:
        super().__init__()
        self.ks, self.gain, self.empty, self.monitor = [int(k) for k in ks], gain, float(empty), monitor

    def fit(self, train: Split, val: Split | None, *, log: FitLog) -> None:
        raise NotImplementedError(f"{type(self).__name__} streams: the harness calls partial_fit")

    def partial_fit(self, train: Split, *, epoch: int, log: FitLog) -> None:
        raise NotImplementedError(f"{type(self).__name__} fits whole splits: the harness calls fit")

    def select_on(self, val: Split | None) -> None:
        """Choose among the learner's own candidates on validation after a streaming epoch (the
        pairwise perceptron's runs); ``val`` is None without a validation split (default: nothing)."""

    def scorer(self) -> nn.Module:
        """Raw features ``[..., L, F]`` -> scores ``[..., L]``; TorchScript and ONNX exportable."""
        raise NotImplementedError

    def device_policy(self, available: torch.device) -> torch.device:
        """Where the hot loop runs given the trainer's device (default: there)."""
        return available

    @classmethod
    def load_from_checkpoint(cls, path: str, map_location: str | torch.device = "cpu", **overrides: object) -> Learner:
        """The learner a harness checkpoint holds: built from its ``hyper_parameters`` (``overrides``
        replace some, e.g. the datamodule's ``normalizer``), then its ``state_dict`` loaded."""
        checkpoint = torch.load(path, map_location=map_location, weights_only=False)
        learner = cls(**{**checkpoint.get("hyper_parameters", {}), **overrides})
        learner.load_state_dict(checkpoint["state_dict"])
        return learner.eval()

    @property
    def device(self) -> torch.device:
        """Where the state is (the first parameter or buffer; CPU without state)."""
        for tensor in itertools.chain(self.parameters(), self.buffers()):
            return tensor.device
        return torch.device("cpu")

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        return self.scorer()(features)

    def evaluate(self, split: Split, scores: Tensor | None, *, stage: str) -> dict[str, float]:
        """Metrics of the family's own on ``stage`` (``val``/``test``) beyond the harness's list
        metrics; ``scores [N]`` are the learner's flat scores of a query split (default: none)."""
        return {}

    def fit_results(self) -> dict:
        """What the fit reports in ``results.json`` beyond the metrics (default: nothing)."""
        return {}

    def export_model(self, out_dir: str | Path) -> dict[str, str]:
        """``scorer.pt`` / ``scorer.onnx`` / ``meta.json`` and the family's files (``rankers.export``)."""
        return export_learner(self, out_dir, int(self.hparams.n_features))

    def export_meta(self) -> dict:
        """Entries for the export's ``meta.json`` (default: none)."""
        return {}

    def export_extra(self, out_dir: str) -> dict[str, str]:
        """Files a family exports beside ``scorer.pt`` / ``scorer.onnx`` (default: none)."""
        return {}
