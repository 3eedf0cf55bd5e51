"""Fresh LinkLearn training examples every epoch: (query, d, l+, l-_1 .. l-_K) in batches ``[B, 3 + K]``.

The rows of the training ``TermFeatures`` are ``kinds`` blocks of ``D`` rows: the articles themselves
(block 0, the paper's query side), then pseudo-queries drawn from them (titles, lead sentences). An
example picks a training article d with links, one of its query rows (kind uniform over
``query_kinds``), l+ uniform over L(d) and ``negatives`` l- that are neither d nor in L(d): uniform over
the training articles of d's own dump, and up to ``hard_negatives`` of them drawn from d's
precomputed hard list (BM25's best non-linked articles for d's pseudo-query).

Inverse-cloze examples (``cloze`` per training article with kept sentences, each epoch): the query is
one of d's sentences, l+ is d without that sentence, the l- are other training articles of d's dump
without their lead sentence (so that positive and negatives alike miss one sentence). They are
the same ``[3 + K]`` rows of features, mixed into the batches with the link examples.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from datamodules.wikipedia.task import REST

NEGATIVE_SAMPLING = ("uniform", "degree")


class LinkExamples:
    """Iterable of ``[B, 3 + K]`` long tensors ``(query row, d, l+, l-...)``, new draws each epoch.

    Args:
        train_docs: ``[N]`` training article ids; ``part``: ``[D]`` the dump of every article.
        offsets, neighbours: the CSR link graph (training edges only).
        n_docs: ``D``; ``query_kinds``: which row blocks serve as queries (0 = the article itself).
        hard: ``[D, H]`` hard negative candidates per article (-1 = none), or None.
        negatives: K; hard_negatives: how many of the K come from ``hard`` when it has them.
        sentence_owner: ``[S]`` the article of each kept sentence (ascending); cloze: inverse-cloze
            examples per training article with sentences and epoch (0: links only). Sentence ``j`` is
            row ``4 D + j``, its article without it row ``4 D + S + j``, article ``a`` without its lead
            ``3 D + a`` (``datamodules.wikipedia.task``).
    """

    def __init__(
        self,
        train_docs: torch.Tensor,
        part: torch.Tensor,
        offsets: torch.Tensor,
        neighbours: torch.Tensor,
        *,
        query_kinds: tuple[int, ...] = (0,),
        hard: torch.Tensor | None = None,
        negatives: int = 1,
        hard_negatives: int = 0,
        batch_size: int = 32,
        seed: int = 0,
        sentence_owner: torch.Tensor | None = None,
        cloze: int = 0,
        negative_sampling: str = "uniform",
    ) -> None:
        if negative_sampling not in NEGATIVE_SAMPLING:
            raise ValueError(f"negative_sampling must be one of {NEGATIVE_SAMPLING}, got {negative_sampling!r}")
        self.negative_sampling = negative_sampling
        self.offsets, self.neighbours, self.part = offsets, neighbours, part
        self.n_docs = len(offsets) - 1
        self.query_kinds = torch.as_tensor(query_kinds, dtype=torch.long)
        self.hard, self.negatives, self.hard_negatives = hard, negatives, hard_negatives if hard is not None else 0
        self.batch_size, self.seed, self.epoch = batch_size, seed, 0
        # negatives come from the training articles of the anchor's own dump: a contiguous run per part
        order = torch.sort(part[train_docs], stable=True).indices
        self.pool = train_docs[order]
        pool_parts = part[self.pool]
        n_parts = int(part.max()) + 1 if len(part) else 0
        self.pool_start = torch.searchsorted(pool_parts, torch.arange(n_parts))
        self.pool_size = torch.bincount(pool_parts, minlength=n_parts)
        degree = (offsets[1:] - offsets[:-1])[train_docs]
        # "degree": each training article as often as it has links (an endpoint of a random training
        # link), so that l+ and l- are equally popular and links cannot teach a popularity prior
        by_degree = torch.repeat_interleave(self.pool, (offsets[1:] - offsets[:-1])[self.pool])
        degree_parts = part[by_degree]
        self.degree_pool = by_degree
        self.degree_start = torch.searchsorted(degree_parts, torch.arange(n_parts))
        self.degree_size = torch.bincount(degree_parts, minlength=n_parts)
        # an article linked to every other one of its dump has no l- to rank below its links
        free = self.pool_size[part[train_docs]] - 1 - degree
        self.anchors = train_docs[(degree > 0) & (free > 0)]
        self.saturated = int(((degree > 0) & (free <= 0)).sum())
        sources = torch.repeat_interleave(torch.arange(self.n_docs), offsets.diff())
        self.edge_keys = sources * self.n_docs + neighbours  # sorted: rows ascending, neighbours sorted
        owner = torch.zeros(0, dtype=torch.long) if sentence_owner is None else sentence_owner
        self.n_sentences, self.cloze = len(owner), cloze
        self.sentence_start = torch.searchsorted(owner, torch.arange(self.n_docs))
        self.sentence_count = torch.bincount(owner, minlength=self.n_docs)
        is_train = torch.zeros(self.n_docs, dtype=torch.bool)
        is_train[train_docs] = True
        self.cloze_anchors = torch.nonzero(is_train & (self.sentence_count > 0)).flatten() if cloze else owner[:0]

    def __len__(self) -> int:
        return -(-(len(self.anchors) + self.cloze * len(self.cloze_anchors)) // self.batch_size)

    def linked(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Whether ``b[i]`` is in ``L(a[i])`` (any shape): one binary search of ``a * D + b`` in the edge keys."""
        if len(self.edge_keys) == 0:
            return torch.zeros_like(a, dtype=torch.bool)
        keys = a * self.n_docs + b
        position = torch.searchsorted(self.edge_keys, keys.flatten()).clamp_max(len(self.edge_keys) - 1)
        return (self.edge_keys[position] == keys.flatten()).view_as(a)

    def uniform_negatives(self, anchors: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
        """``[A, k]`` articles of each anchor's dump (training side) that are neither it nor linked to it."""
        parts = self.part[anchors].unsqueeze(1).expand(-1, k)

        if self.negative_sampling == "degree":
            pool, pool_start, pool_size = self.degree_pool, self.degree_start, self.degree_size
        else:
            pool, pool_start, pool_size = self.pool, self.pool_start, self.pool_size

        def draw(where: torch.Tensor) -> torch.Tensor:
            pick = (torch.rand(where.shape, generator=generator) * pool_size[where]).long()
            return pool[pool_start[where] + pick]

        negatives = draw(parts)
        column = anchors.unsqueeze(1).expand(-1, k)
        for _ in range(100):
            bad = (negatives == column) | self.linked(column, negatives)
            if not bad.any():
                return negatives
            negatives[bad] = draw(parts[bad])
        raise RuntimeError("could not sample negatives: some article is linked to almost every other of its dump")

    def cloze_examples(self, generator: torch.Generator) -> torch.Tensor:
        """``[C, 3 + K]`` inverse-cloze examples: ``(sentence row, d, d without it, other articles without
        their lead...)``, ``cloze`` per article with sentences, each a random one of its sentences."""
        anchors = self.cloze_anchors.repeat(self.cloze)
        pick = (torch.rand(len(anchors), generator=generator) * self.sentence_count[anchors]).long()
        sentence = self.sentence_start[anchors] + pick
        parts = self.part[anchors].unsqueeze(1).expand(-1, self.negatives)
        column = anchors.unsqueeze(1).expand(-1, self.negatives)

        def draw(where: torch.Tensor) -> torch.Tensor:
            offset = (torch.rand(where.shape, generator=generator) * self.pool_size[where]).long()
            return self.pool[self.pool_start[where] + offset]

        negatives = draw(parts)
        for _ in range(100):
            bad = negatives == column
            if not bad.any():
                break
            negatives[bad] = draw(parts[bad])
        else:
            raise RuntimeError("could not sample cloze negatives: a dump has a single training article")
        base = (REST + 1) * self.n_docs
        return torch.cat(
            [
                (base + sentence).unsqueeze(1),
                anchors.unsqueeze(1),
                (base + self.n_sentences + sentence).unsqueeze(1),
                REST * self.n_docs + negatives,
            ],
            1,
        )

    def sample(self, generator: torch.Generator) -> torch.Tensor:
        """All examples of one epoch, ``[A + C, 3 + K]`` (link examples, then cloze ones, in a new random order)."""
        anchors = self.anchors[torch.randperm(len(self.anchors), generator=generator)]
        kinds = self.query_kinds[torch.randint(len(self.query_kinds), (len(anchors),), generator=generator)]
        start, degree = self.offsets[anchors], self.offsets[anchors + 1] - self.offsets[anchors]
        positives = self.neighbours[start + (torch.rand(len(anchors), generator=generator) * degree).long()]
        negatives = self.uniform_negatives(anchors, self.negatives, generator)
        if self.hard_negatives and self.hard is not None:
            candidates = self.hard[anchors]  # [A, H], -1 padded
            score = torch.rand(candidates.shape, generator=generator).masked_fill(candidates < 0, -1.0)
            chosen = candidates.gather(1, score.topk(min(self.hard_negatives, candidates.shape[1]), dim=1).indices)
            columns = chosen.shape[1]
            negatives[:, :columns] = torch.where(chosen >= 0, chosen, negatives[:, :columns])
        examples = torch.cat(
            [(kinds * self.n_docs + anchors).unsqueeze(1), anchors.unsqueeze(1), positives.unsqueeze(1), negatives], 1
        )
        if not self.cloze or len(self.cloze_anchors) == 0:
            return examples
        examples = torch.cat([examples, self.cloze_examples(generator)])
        return examples[torch.randperm(len(examples), generator=generator)]

    def __iter__(self) -> Iterator[torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 100003 + self.epoch)
        self.epoch += 1
        yield from self.sample(generator).split(self.batch_size)


__all__ = ["NEGATIVE_SAMPLING", "LinkExamples"]
