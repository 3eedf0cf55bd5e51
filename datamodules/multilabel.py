"""Multilabel and top-label ranking data for label ranking: files (``data=multilabel``) or a planted
linear model (``data=label_ranking_synthetic``).

Batches are ``{"features": [B, F] float32 raw, "labels": [B, d] float32}`` (grades: 0 = not
relevant, larger = preferred; multilabel data has 0/1). The models scale features with the
:class:`AffineScaler` this module fits on the training split (``model_inputs()``), and carry it into
their export, so the exported scorer takes features exactly as in the input file.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from datamodules.multilabel_io import MultilabelData, MultilabelFormatError, read_multilabel

log = logging.getLogger(__name__)

SCALINGS = ("minmax", "zscore", "none")


def affine_parameters(kind: str, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``shift`` and ``scale`` ``[F]`` (float64) of ``minmax`` or ``zscore`` scaling fitted on
    ``features [N, F]``; a constant feature gets scale 1 (it becomes 0, never inf or NaN).

    Example:
        >>> affine_parameters("minmax", np.array([[0.0, 5.0], [2.0, 5.0]]))
        (array([0., 5.]), array([2., 1.]))
    """
    values = features.astype(np.float64)
    if kind == "minmax":
        shift, scale = values.min(0), values.max(0) - values.min(0)
    else:
        shift, scale = values.mean(0), values.std(0)
    scale[scale < 1e-12] = 1.0
    return shift, scale


class AffineScaler(nn.Module):
    """``(x - shift) / scale`` per feature, fitted on the training features.

    ``minmax`` maps the training range to [0, 1], ``zscore`` to mean 0 and standard deviation 1;
    a constant feature maps to 0. Raw ``[..., F]`` -> scaled ``[..., F]``.

    Example:
        >>> scaler = AffineScaler.fit("minmax", np.array([[0.0, 5.0], [2.0, 5.0]]))
        >>> scaler(torch.tensor([[1.0, 5.0]]))
        tensor([[0.5000, 0.0000]])
    """

    def __init__(self, shift: Tensor, scale: Tensor, kind: str = "none") -> None:
        super().__init__()
        self.kind = kind
        self.register_buffer("shift", shift.float())
        self.register_buffer("scale", scale.float())

    @classmethod
    def fit(cls, kind: str, features: np.ndarray) -> AffineScaler:
        if kind not in SCALINGS:
            raise ValueError(f"scaling must be one of {SCALINGS}, got {kind!r}")
        width = features.shape[1]
        if kind == "none" or len(features) == 0:
            return cls(torch.zeros(width), torch.ones(width), kind)
        shift, scale = affine_parameters(kind, features)
        return cls(torch.from_numpy(shift), torch.from_numpy(scale), kind)

    def forward(self, features: Tensor) -> Tensor:
        return (features - self.shift) / self.scale


def planted_label_ranking(
    n: int,
    n_features: int,
    n_labels: int,
    *,
    generator: torch.Generator,
    noise: float = 0.0,
    weights: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Instances from a planted calibrated linear sorting function (Definition 2.1 with a bias).

    ``x ~ N(0, I)``, true scores ``s = W x + b + noise * N(0, 1)`` with ``W [d, F] ~ N(0, 1)`` and
    ``b = -0.5``: the labels with ``s > 0`` are relevant, ranked by ``s`` (grades l..1, the top
    label-ranking of Definition 3.2). Returns ``features [n, F]``, ``labels [n, d]``, ``W [d, F+1]``
    (bias last); pass ``weights`` to draw more instances of the same model.

    Example:
        >>> x, y, w = planted_label_ranking(4, 3, 5, generator=torch.Generator().manual_seed(0))
        >>> x.shape, y.shape, w.shape, bool(((y > 0) == ((x @ w[:, :3].T + w[:, 3]) > 0)).all())
        (torch.Size([4, 3]), torch.Size([4, 5]), torch.Size([5, 4]), True)
    """
    if weights is None:
        weights = torch.cat(
            [torch.randn(n_labels, n_features, generator=generator), torch.full((n_labels, 1), -0.5)], 1
        )
    x = torch.randn(n, n_features, generator=generator)
    scores = x @ weights[:, :-1].T + weights[:, -1] + noise * torch.randn(n, n_labels, generator=generator)
    positive = scores > 0
    # grade = number of positive labels scored at or below it: l for the top, 1 for the lowest relevant
    below = (scores[:, None, :] <= scores[:, :, None]) & positive[:, None, :]
    labels = torch.where(positive, below.sum(2).float(), torch.zeros_like(scores))
    return x, labels, weights


class LabelRankingDataModule(pl.LightningDataModule):
    """Train/val/test splits of ``(x [F], y [d])`` in memory; subclasses fill ``self.data``."""

    def __init__(
        self,
        *,
        scaling: str = "minmax",
        val_fraction: float = 0.0,
        data_seed: int = 0,
        batch_size: int = 32,
        eval_batch_size: int = 1024,
        cv_folds: int | None = None,
        cv_fold: int = 0,
    ) -> None:
        super().__init__()
        if cv_folds is not None and not (cv_folds >= 2 and 0 <= cv_fold < cv_folds):
            raise ValueError(f"data.cv_fold must be in 0..cv_folds-1 with cv_folds >= 2, got {cv_fold} of {cv_folds}")
        self.cv_folds, self.cv_fold = cv_folds, cv_fold
        if scaling not in SCALINGS:
            raise ValueError(f"data.scaling must be one of {SCALINGS}, got {scaling!r}")
        if not 0.0 <= val_fraction < 1.0:
            raise ValueError(f"data.val_fraction must be in [0, 1), got {val_fraction}")
        self.scaling, self.val_fraction, self.data_seed = scaling, val_fraction, data_seed
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.data: dict[str, MultilabelData] = {}
        self.splits: dict[str, tuple[Tensor, Tensor]] = {}
        self.statistics: dict[str, dict] = {}

    # -- what subclasses provide -----------------------------------------------------------------
    def read(self) -> dict[str, MultilabelData]:
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        data = self.read()
        if self.cv_folds:
            # cross-validation on the training file: fold cv_fold tests, the others train; the test file is not read
            data["train"], data["test"] = _fold(data["train"], self.cv_folds, self.cv_fold, self.data_seed)
            data.pop("val", None)
        if self.val_fraction > 0 and "val" not in data:
            data["train"], data["val"] = _split(data["train"], self.val_fraction, self.data_seed)
        self.data = data
        self.splits = {name: (torch.from_numpy(d.features), torch.from_numpy(d.labels)) for name, d in data.items()}
        for name, split in data.items():
            relevant = split.labels > 0
            self.statistics[name] = {
                "instances": len(split.labels),
                "features": int(split.features.shape[1]),
                "labels": int(split.n_labels),
                "cardinality": round(float(relevant.sum(1).mean()), 4),
                "density": round(float(relevant.mean()), 4),
                "no_relevant_label": int((~relevant.any(1)).sum()),
                **split.notes,
            }
            log.info("%s: %s", name, self.statistics[name])
        self.statistics["scaling"] = self.scaling

    @property
    def train_data(self) -> MultilabelData:
        return self.data["train"]

    @property
    def has_validation(self) -> bool:
        return "val" in self.splits

    @property
    def has_test(self) -> bool:
        return "test" in self.splits

    @property
    def ranked(self) -> bool:
        """True for top-label ranking data (grades beyond 0/1 carry an order)."""
        return self.train_data.ranked

    def model_inputs(self) -> dict:
        """What a label ranker is built with: widths, the scaler it carries into its export, names."""
        train = self.train_data
        return {
            "n_features": int(train.features.shape[1]),
            "n_labels": int(train.n_labels),
            "scaler": AffineScaler.fit(self.scaling, train.features),
            "label_names": list(train.label_names),
            "ranked": bool(train.ranked),
        }

    def arrays(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """``features [N, F]``, ``labels [N, d]`` of a split as numpy (the baselines fit on these)."""
        return self.data[split].features, self.data[split].labels

    def _loader(self, split: str, batch_size: int, shuffle: bool) -> DataLoader:
        x, y = self.splits[split]
        generator = torch.Generator().manual_seed(self.data_seed)
        return DataLoader(
            TensorDataset(x, y), batch_size=batch_size, shuffle=shuffle, generator=generator, collate_fn=_as_batch
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", self.eval_batch_size, shuffle=False) if self.has_validation else []

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self.eval_batch_size, shuffle=False)


def _as_batch(items: list) -> dict[str, Tensor]:
    x, y = zip(*items, strict=True)
    return {"features": torch.stack(x), "labels": torch.stack(y)}


def _split(data: MultilabelData, fraction: float, seed: int) -> tuple[MultilabelData, MultilabelData]:
    order = np.random.default_rng(seed).permutation(len(data.labels))
    n_val = max(1, round(fraction * len(order)))
    return _parts(data, np.sort(order[n_val:]), np.sort(order[:n_val]))


def _fold(data: MultilabelData, folds: int, fold: int, seed: int) -> tuple[MultilabelData, MultilabelData]:
    """The training instances outside fold ``fold`` of ``folds`` (a seeded shuffle), and the fold."""
    order = np.random.default_rng(seed).permutation(len(data.labels))
    held = np.array_split(order, folds)[fold]
    return _parts(data, np.setdiff1d(order, held), np.sort(held))


def _parts(data: MultilabelData, *indices: np.ndarray) -> tuple[MultilabelData, ...]:
    parts = []
    for index in indices:
        parts.append(
            MultilabelData(
                data.features[index],
                data.labels[index],
                data.label_names,
                data.feature_names,
                data.path,
                dict(data.notes),
                data.ranked,
            )
        )
    return tuple(parts)


class MultilabelDataModule(LabelRankingDataModule):
    """``data=multilabel data.train=X-train.arff data.test=X-test.arff data.labels=X.xml``.

    Args:
        train, val, test: files (``.arff`` MULAN, ``.rank`` top-label, anything else SVMlight
            multilabel; see ``datamodules.multilabel_io``). ``val`` is optional (else ``val_fraction``
            of the training instances, or none); ``test`` is optional.
        labels: MULAN's XML file naming the label attributes (ARFF).
        n_labels: without ``labels``: the last ``n_labels`` ARFF attributes are the labels; for
            top-label files the label count (else the header's or the largest label + 1).
        scaling: ``minmax`` (default), ``zscore`` or ``none``, fitted on the training split and
            carried into the exported scorer.
        cv_folds, cv_fold: cross-validation on the training file (``data.cv_folds=5 data.cv_fold=0``):
            fold ``cv_fold`` of a ``data_seed`` shuffle is the test split, the rest trains; the test
            file is then not read. For choosing settings without touching the test file.
    """

    def __init__(
        self,
        *,
        train: str,
        test: str | None = None,
        val: str | None = None,
        labels: str | None = None,
        n_labels: int | None = None,
        **options,
    ) -> None:
        super().__init__(**options)
        self.paths = {"train": train, "val": val, "test": test}
        self.labels, self.n_labels = labels, n_labels

    def read(self) -> dict[str, MultilabelData]:
        if self.cv_folds:
            self.paths = {**self.paths, "test": None, "val": None}
        for name, path in self.paths.items():
            if path is not None and not Path(path).is_file():
                raise MultilabelFormatError(f"{path}: no such file (data.{name})")
        if self.labels is not None and Path(self.paths["train"]).suffix.lower() != ".arff":
            log.warning(
                "data.labels=%s names ARFF label attributes; %s is not ARFF: ignored", self.labels, self.paths["train"]
            )
        train, ids = read_multilabel(self.paths["train"], labels=self.labels, n_labels=self.n_labels)
        data = {"train": train}
        for name in ("val", "test"):
            if self.paths[name] is not None:
                data[name], _ = read_multilabel(
                    self.paths[name], labels=self.labels, n_labels=self.n_labels, reference=train, label_ids=ids
                )
        return data


class SyntheticLabelRankingDataModule(LabelRankingDataModule):
    """Top-label ranking data from a planted linear model (``planted_label_ranking``); for tests and demos."""

    def __init__(
        self,
        *,
        n_train: int = 2000,
        n_test: int = 1000,
        n_features: int = 10,
        n_labels: int = 6,
        noise: float = 0.0,
        ranked: bool = True,
        **options,
    ) -> None:
        options.setdefault("scaling", "none")
        super().__init__(**options)
        self.sizes = {"train": n_train, "test": n_test}
        self.n_features, self.n_labels, self.noise, self.is_ranked = n_features, n_labels, noise, ranked

    def read(self) -> dict[str, MultilabelData]:
        generator = torch.Generator().manual_seed(self.data_seed)
        weights, data = None, {}
        for name, size in self.sizes.items():
            x, y, weights = planted_label_ranking(
                size, self.n_features, self.n_labels, generator=generator, noise=self.noise, weights=weights
            )
            labels = y.numpy() if self.is_ranked else (y > 0).float().numpy()
            data[name] = MultilabelData(
                x.numpy(),
                labels,
                [str(i) for i in range(self.n_labels)],
                [str(j + 1) for j in range(self.n_features)],
                "planted linear model",
                ranked=self.is_ranked,
            )
        return data
