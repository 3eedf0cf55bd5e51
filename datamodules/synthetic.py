"""Seeded LETOR-like data, written as LETOR text files and read back through the real reader.

Documents have ``num_features`` features: a per-query offset (so raw features are not comparable
across queries, as in real LETOR data) plus document noise. The graded label 0-4 is a hidden
nonlinear function of the document's features (a random two-layer tanh network) plus noise,
cut at fixed quantiles so that most documents are irrelevant, as in LETOR and MSLR.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from datamodules.atomic import atomic_path
from datamodules.letor import LetorDataModule

# share of documents with label 0, 1, 2, 3, 4
LABEL_SHARES = (0.55, 0.25, 0.12, 0.06, 0.02)


class HiddenRelevance:
    """The seeded function that decides relevance: ``[N, F]`` -> graded labels ``[N]``."""

    def __init__(self, num_features: int, seed: int, noise: float = 0.35) -> None:
        rng = np.random.default_rng([seed, 1])
        self.w1 = rng.normal(size=(num_features, 16)) / np.sqrt(num_features)
        self.w2 = rng.normal(size=16)
        self.noise = noise
        calibration = self.latent(rng.normal(size=(20000, num_features)))
        self.cuts = np.quantile(calibration, np.cumsum(LABEL_SHARES)[:-1])

    def latent(self, x: np.ndarray) -> np.ndarray:
        return np.tanh(2 * x @ self.w1) @ self.w2 + 0.5 * x[:, 0] * x[:, 1]

    def labels(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        value = self.latent(x) + self.noise * rng.normal(size=len(x)) * self.latent(x).std()
        return np.searchsorted(self.cuts, value).astype(np.int64)


def write_split(
    path: Path,
    relevance: HiddenRelevance,
    n_queries: int,
    num_features: int,
    mean_docs: int,
    first_qid: int,
    rng: np.random.Generator,
) -> None:
    lengths = rng.integers(max(1, mean_docs // 4), 2 * mean_docs - mean_docs // 4 + 1, size=n_queries)
    lines = []
    for q, length in enumerate(lengths):
        docs = rng.normal(size=(length, num_features))
        labels = relevance.labels(docs, rng)
        offset = rng.normal(scale=1.5, size=num_features)  # query-level shift of the raw features
        raw = docs + offset
        qid = first_qid + q
        for i in range(length):
            values = " ".join(f"{j + 1}:{v:.5f}" for j, v in enumerate(raw[i]))
            lines.append(f"{labels[i]} qid:{qid} {values} # docid = Q{qid}-D{i}\n")
    with atomic_path(path) as partial:  # processes on several nodes may write the same file at once
        partial.write_text("".join(lines))


def generate_letor(
    directory: str | Path, *, n_queries: dict[str, int], num_features: int = 24, mean_docs: int = 40, seed: int = 0
) -> dict[str, str]:
    """Write (once) ``train.txt``, ``vali.txt``, ``test.txt`` under a folder named by the parameters."""
    params = {"n_queries": n_queries, "num_features": num_features, "mean_docs": mean_docs, "seed": seed}
    key = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    folder = Path(directory) / f"synthetic-{key}"
    folder.mkdir(parents=True, exist_ok=True)
    relevance = HiddenRelevance(num_features, seed)
    files = {}
    first_qid = 1
    for split, name in (("train", "train.txt"), ("val", "vali.txt"), ("test", "test.txt")):
        path = folder / name
        if not path.exists():
            write_split(
                path,
                relevance,
                n_queries[split],
                num_features,
                mean_docs,
                first_qid,
                np.random.default_rng([seed, first_qid]),
            )
        files[split] = str(path)
        first_qid += n_queries[split]
    with atomic_path(folder / "params.json") as partial:
        partial.write_text(json.dumps(params, indent=1))
    return files


class SyntheticDataModule(LetorDataModule):
    """``LetorDataModule`` over generated files; the default dataset of ``train.py``."""

    def __init__(
        self,
        directory: str,
        *,
        n_train_queries: int = 600,
        n_val_queries: int = 150,
        n_test_queries: int = 150,
        num_features: int = 24,
        mean_docs: int = 40,
        data_seed: int = 0,
        **letor_options,
    ) -> None:
        self.generator_options = dict(
            n_queries={"train": n_train_queries, "val": n_val_queries, "test": n_test_queries},
            num_features=num_features,
            mean_docs=mean_docs,
            seed=data_seed,
        )
        self.directory = directory
        files = generate_letor(directory, **self.generator_options)
        super().__init__(files["train"], files["val"], files["test"], **letor_options)
