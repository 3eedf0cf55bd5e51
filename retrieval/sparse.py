"""Sparse term-weight matrices over CSR corpora and their scoring (LinkLearn, its validation, BM25).

Documents become a sparse ``[D, V]`` matrix of term weights, turned into an inverted index (CSR
``[V, D]``: each term's postings); queries are sparse ``[Q, V]``; a sparse-sparse product touches only
the postings of the query terms (``bench/linklearn.py`` times it against a dense query matrix).
"""

from __future__ import annotations

import warnings

import torch


def entry_index(offsets: torch.Tensor, docs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The CSR entries of rows ``docs [P]``: ``owner [n]`` (0..P-1) and their positions ``[n]``.

    Entries are ordered by owner, then as stored (a corpus keeps terms sorted per document).
    """
    start, count = offsets[docs], offsets[docs + 1] - offsets[docs]
    owner = torch.repeat_interleave(torch.arange(len(docs), device=docs.device), count)
    shift = torch.repeat_interleave(start - (torch.cumsum(count, 0) - count), count)
    return owner, torch.arange(len(owner), device=docs.device) + shift


def sparse_rows(
    rows: torch.Tensor, columns: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]
) -> torch.Tensor:
    """Coalesced sparse COO matrix ``shape`` with ``values`` at ``(rows, columns)`` (all ``[n]``)."""
    indices = torch.stack([rows, columns])
    return torch.sparse_coo_tensor(indices, values, shape, check_invariants=False).coalesce()


def inverted_index(documents: torch.Tensor) -> torch.Tensor:
    """Sparse COO ``[D, V]`` document weights -> sparse CSR ``[V, D]``: each term's postings."""
    with warnings.catch_warnings():  # "sparse CSR support is in beta": the product we use is stable
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return documents.t().coalesce().to_sparse_csr()


def rank(index: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """``[Q, D]`` dense similarities of sparse ``queries [Q, V]`` against an ``inverted_index [V, D]``."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse.mm(queries.to_sparse_csr(), index).to_dense()


def top_k(index: torch.Tensor, queries: torch.Tensor, k: int, *, chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` best documents of sparse ``queries [Q, V]`` against ``index [V, D]``: ``values [Q, k]``
    and ``indices [Q, k]``, computed in chunks of queries so memory stays ``chunk x D``."""
    values, indices = [], []
    k = min(k, index.shape[1])
    for start in range(0, queries.shape[0], chunk):
        rows = queries.index_select(0, torch.arange(start, min(start + chunk, queries.shape[0]), device=queries.device))
        top = rank(index, rows).topk(k, dim=1)
        values.append(top.values)
        indices.append(top.indices)
    if not values:
        return torch.zeros(0, k), torch.zeros(0, k, dtype=torch.long)
    return torch.cat(values), torch.cat(indices)


def csr_contains(
    offsets: torch.Tensor, columns: torch.Tensor, rows: torch.Tensor, candidates: torch.Tensor
) -> torch.Tensor:
    """``[Q, C]`` bool: whether ``candidates[c]`` is among the columns of CSR row ``rows[q]``
    (``offsets [N + 1]``, ``columns [nnz]``: a graph's neighbour lists), on ``rows``' device, no loop."""
    column = torch.full((len(offsets) - 1,), -1, dtype=torch.long, device=rows.device)
    column[candidates] = torch.arange(len(candidates), device=rows.device)
    owner, index = entry_index(offsets, rows)
    hit = column[columns[index]]
    keep = hit >= 0
    out = torch.zeros(len(rows), len(candidates), dtype=torch.bool, device=rows.device)
    out[owner[keep], hit[keep]] = True
    return out


__all__ = ["csr_contains", "entry_index", "inverted_index", "rank", "sparse_rows", "top_k"]
