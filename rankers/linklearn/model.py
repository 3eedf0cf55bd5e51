"""LinkLearn's math (Grangier & Bengio, NIPS'05 LTR workshop, eqs. 2-7), apart from its LightningModule.

- ``TermWeight``: the term weight ``f(tf, idf, len) = start(tf, idf, len) * MLP1(tf) * MLP2(idf) * MLP3(len)``
  (eq. 3 refining a fixed start), each ``MLP_k`` the ``exp`` of a tanh network (``Correction``) that
  is exactly 0 (a factor 1) at construction;
- ``entry_weights`` / ``weight_matrix``: f of every (document, term) entry of some rows, the MLPs run
  once per distinct value of their input (the paper's trick) and gathered back;
- ``pair_similarity``: ``sim(a, b) = sum_i f(a_i) f(b_i)`` (eq. 2's measure) of many pairs at once, a
  sparse intersection of sorted term lists;
- ``relative_hinge`` and ``link_loss``: eq. 7's hinge ``|m - sim(q, l+) + sim(q, l-)|_+`` on
  similarities relative to the start's, and the penalty pulling f to its start;
- ``collection_scores``: ``[Q, D]`` similarities of an ad-hoc collection (sparse products).

Tensors: ``corpus`` is a ``retrieval.terms.TermFeatures.tensors()`` dict (CSR entries and each
feature's distinct values with every entry's code into them).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from losses import linklearn_hinge
from retrieval.sparse import entry_index, inverted_index, rank, sparse_rows
from retrieval.terms import Corpus

STARTS = {"bm25": 0, "tfidf": 1, "ones": 2}


class Correction(nn.Module):
    """``log MLP_k``: ``1 -> hidden (tanh) -> 1`` on ``values [n]``, exactly 0 at construction.

    It runs once per distinct value of its input and gathers the result back to ``[n]``.
    """

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        with torch.no_grad():
            self.layers[2].weight.zero_()
            self.layers[2].bias.zero_()

    def forward(self, values: Tensor) -> Tensor:
        distinct, inverse = torch.unique(values, return_inverse=True)
        return self.layers(distinct.unsqueeze(-1)).squeeze(-1)[inverse]

    def on_values(self, values: Tensor) -> Tensor:
        """The network on ``values`` as given (already distinct)."""
        return self.layers(values.unsqueeze(-1)).squeeze(-1)


class TermWeight(nn.Module):
    """``f(tf, idf, len) = start(tf, idf, len) * MLP1(tf) * MLP2(idf) * MLP3(len)``: ``[n]`` inputs -> ``[n]``.

    ``tf`` raw counts, ``idf`` ``log(N / df)``, ``len`` the document's length over its collection's mean.
    Starts: ``bm25`` ``idf^p tf (k1 + 1) / (tf + k1 (1 - b + b len))``; ``tfidf``
    ``log(1 + tf) idf / sqrt(0.25 + 0.75 len)`` (pivoted, Singhal et al.); ``ones`` 1 (the paper's
    constant start, a count of shared terms). The MLPs read ``log(1 + tf)``, ``idf`` and ``log(1 + len)``.
    """

    def __init__(
        self, hidden: int = 8, *, start: str = "bm25", k1: float = 1.2, b: float = 0.75, idf_power: float = 0.75
    ) -> None:
        super().__init__()
        if start not in STARTS:
            raise ValueError(f"model.start must be one of {sorted(STARTS)}, got {start!r}")
        self.start_code, self.k1, self.b, self.idf_power = STARTS[start], float(k1), float(b), float(idf_power)
        self.tf_mlp, self.idf_mlp, self.len_mlp = Correction(hidden), Correction(hidden), Correction(hidden)

    def start(self, tf: Tensor, idf: Tensor, length: Tensor) -> Tensor:
        """The untrained weight of each entry, ``[n]``."""
        if self.start_code == 0:
            saturation = tf * (self.k1 + 1) / (tf + self.k1 * (1 - self.b + self.b * length))
            return idf.clamp_min(0).pow(self.idf_power) * saturation
        if self.start_code == 1:
            return torch.log1p(tf) * idf * torch.rsqrt(0.25 + 0.75 * length)
        return torch.ones_like(tf)

    def forward(self, tf: Tensor, idf: Tensor, length: Tensor) -> Tensor:
        log_correction = self.tf_mlp(torch.log1p(tf)) + self.idf_mlp(idf) + self.len_mlp(torch.log1p(length))
        return self.start(tf, idf, length) * torch.exp(log_correction)

    @torch.jit.unused
    def log_corrections(self, corpus: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """Each ``log MLP_k`` on the corpus's distinct values: ``[U_tf]``, ``[U_idf]``, ``[U_len]``."""
        return (
            self.tf_mlp.on_values(torch.log1p(corpus["tf_values"])),
            self.idf_mlp.on_values(corpus["idf_values"]),
            self.len_mlp.on_values(torch.log1p(corpus["length_values"])),
        )


def entry_weights(
    model: TermWeight, corpus: dict[str, Tensor], rows: Tensor, *, corrected: bool = True
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(owner, term, f, start)`` ``[n]`` of the entries of ``rows [P]`` of a ``TermFeatures.tensors``
    dict: the MLPs run on the corpus's distinct values only and every entry gathers its factors by code."""
    owner, index = entry_index(corpus["offsets"], rows)
    term = corpus["term_ids"][index]
    length_code = corpus["length_codes"][rows][owner]
    start = model.start(corpus["tfs"][index], corpus["idf"][term], corpus["length_values"][length_code])
    if not corrected:
        return owner, term, start, start
    tf_factor, idf_factor, length_factor = model.log_corrections(corpus)
    log_correction = tf_factor[corpus["tf_codes"][index]] + idf_factor[corpus["idf_codes"][term]]
    return owner, term, start * torch.exp(log_correction + length_factor[length_code]), start


def pair_similarity(
    a: tuple[Tensor, Tensor, Tensor], b: tuple[Tensor, Tensor, Tensor], n_pairs: int, vocabulary_size: int
) -> Tensor:
    """``sim [P]`` of pairs given each side's ``(owner, term, weight)`` entries (sorted by owner, term)."""
    a_key = a[0] * vocabulary_size + a[1]
    b_key = b[0] * vocabulary_size + b[1]
    if len(a_key) == 0 or len(b_key) == 0:
        return torch.zeros(n_pairs, device=a_key.device, dtype=a[2].dtype)
    position = torch.searchsorted(a_key, b_key).clamp_max(len(a_key) - 1)
    shared = a_key[position] == b_key
    products = a[2][position[shared]] * b[2][shared]
    return torch.zeros(n_pairs, device=products.device, dtype=products.dtype).index_add(0, b[0][shared], products)


def weight_matrix(
    model: TermWeight, corpus: dict[str, Tensor], rows: Tensor, size: int, *, corrected: bool = True
) -> Tensor:
    """Sparse COO ``[len(rows), size]`` matrix of term weights ``f`` (or the start's)."""
    owner, term, weight, _ = entry_weights(model, corpus, rows, corrected=corrected)
    return sparse_rows(owner, term, weight, (len(rows), size))


def relative_hinge(sims: Tensor, start_sims: Tensor, *, margin: float) -> tuple[Tensor, Tensor]:
    """Eq. 7 on similarities relative to the start's: ``(hinge [U * K], usable [B])``.

    ``sims``, ``start_sims`` ``[B, 1 + K]``: column 0 is ``sim(q, l+)``, the rest ``sim(q, l-)``.
    Each example is divided by the start's largest similarity among its candidates (relative sims
    start at most 1, so long and short queries weigh alike and scaling f cannot buy margin). An
    example whose l+ shares no term with its query (start sim 0) cannot be won under any f and is
    left out (``usable`` False): dividing by its zero similarity made such examples dominate.

    Example:
        >>> sims = torch.tensor([[2.0, 1.0, 3.0], [0.0, 1.0, 1.0]])
        >>> hinge, usable = relative_hinge(sims, sims, margin=0.5)
        >>> [round(h, 4) for h in hinge.tolist()], usable.tolist()
        ([0.1667, 0.8333], [True, False])
    """
    scale = start_sims.max(1).values
    usable = start_sims[:, 0] > 0
    relative = sims[usable] / scale[usable].unsqueeze(1)
    width = sims.shape[1]
    positive, negatives = relative[:, :1].expand(-1, width - 1).flatten(), relative[:, 1:].flatten()
    return linklearn_hinge(positive, negatives, margin=margin, reduction="none"), usable


def link_loss(
    model: TermWeight,
    corpus: dict[str, Tensor],
    examples: Tensor,
    vocabulary_size: int,
    *,
    margin: float,
    regularization: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Mean relative hinge over (example, negative) plus ``regularization`` x the mean squared log
    corrections (the pull of f to its start), for ``examples [B, 3 + K]`` long rows of ``corpus``:
    ``(query, d, l+, l-_1 .. l-_K)``. Returns the loss and its parts (hinge, penalty, the share of
    violated constraints (eq. 5) and of usable examples)."""
    queries, candidates = examples[:, 0], examples[:, 2:]  # candidates [B, 1 + K]: l+, then the l-
    n, width = candidates.shape
    owner, term, weight, start = entry_weights(model, corpus, torch.cat([queries, candidates.T.flatten()]))
    # rows are the B queries, then column j of the candidates as B rows: each a contiguous run of entries
    bounds = torch.searchsorted(owner, torch.arange(0, (width + 2) * n, n, device=owner.device)).tolist()

    def side(block: int, values: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        run = slice(bounds[block], bounds[block + 1])
        return owner[run] - block * n, term[run], values[run]

    sims = torch.stack(
        [pair_similarity(side(0, weight), side(j + 1, weight), n, vocabulary_size) for j in range(width)], 1
    )  # [B, 1 + K]
    with torch.no_grad():
        start_sims = torch.stack(
            [pair_similarity(side(0, start), side(j + 1, start), n, vocabulary_size) for j in range(width)], 1
        )
    hinges, usable = relative_hinge(sims, start_sims, margin=margin)
    hinge = hinges.mean() if len(hinges) else sims.sum() * 0
    penalty = sum(c.square().mean() for c in model.log_corrections(corpus))
    violated = (sims[:, :1] - sims[:, 1:] < 0).float().mean()
    parts = {"hinge": hinge, "penalty": penalty, "violations": violated, "usable": usable.float().mean()}
    return hinge + regularization * penalty, parts


def collection_scores(
    model: TermWeight, documents: Corpus, queries: Corpus, *, corrected: bool = True, device: torch.device | str = "cpu"
) -> Tensor:
    """``[Q, D]`` similarities of ``queries`` to ``documents`` under f (its start with ``corrected=False``).

    Queries are over the documents' vocabulary and use their idf; lengths are relative to each
    side's own mean (a query's own length factor does not change its ranking).
    """
    idf = documents.idf()
    with torch.no_grad():
        matrices = []
        for features in (documents.features(), queries.features(idf=idf)):
            corpus = features.tensors(device)
            rows = torch.arange(features.n_docs, device=device)
            matrices.append(weight_matrix(model, corpus, rows, len(idf), corrected=corrected))
        return rank(inverted_index(matrices[0]), matrices[1])


__all__ = [
    "STARTS",
    "Correction",
    "TermWeight",
    "collection_scores",
    "entry_weights",
    "link_loss",
    "pair_similarity",
    "relative_hinge",
    "weight_matrix",
]
