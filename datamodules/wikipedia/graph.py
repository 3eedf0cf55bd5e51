"""The link graph: the seeded train/validation split of section 4 and CSR neighbour lists."""

from __future__ import annotations

import numpy as np
import torch


def split_graph(n_docs: int, edges: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded train/validation assignment ``is_val [D]`` and the edges kept (both ends on one side):
    Grangier & Bengio remove "the hyperlinks which do not start and end in the same subset"."""
    is_val = np.zeros(n_docs, dtype=bool)
    n_val = round(val_fraction * n_docs)
    is_val[np.random.default_rng(seed).permutation(n_docs)[:n_val]] = True
    kept = edges[is_val[edges[:, 0]] == is_val[edges[:, 1]]] if len(edges) else edges
    return is_val, kept


def adjacency(n_docs: int, edges: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR neighbour lists of the undirected graph (a link counts in both directions, L(d) holds the
    articles d links to and those linking to d): ``offsets [D + 1]``, ``neighbours`` sorted per doc."""
    both = np.concatenate([edges, edges[:, ::-1]]) if len(edges) else np.zeros((0, 2), np.int64)
    both = both[np.lexsort((both[:, 1], both[:, 0]))]
    offsets = np.concatenate([[0], np.cumsum(np.bincount(both[:, 0], minlength=n_docs))])
    return torch.from_numpy(offsets.astype(np.int64)), torch.from_numpy(np.ascontiguousarray(both[:, 1]))


__all__ = ["adjacency", "split_graph"]
