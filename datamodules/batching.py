"""Batches of whole queries: ``features [B, L, F]``, ``labels [B, L]``, ``mask [B, L]``.

Two paths share the batch sampler and the list sampling:

* ``QueryDataset`` + ``collate_queries`` for a ``DataLoader`` (CPU memory, optional workers);
* ``DeviceBatches``, which keeps the whole split on one device (the GPU) and builds each padded
  batch with a single gather, so no per-query Python work runs in the training loop and the host
  never waits for the device: the epoch's batch plan goes to the device in one copy, and list
  widths come from host-side lengths.

``pad_multiple`` rounds each batch's width up (e.g. 256 for MSLR's lists of at most 251): fewer
distinct shapes, which ``torch.compile`` and CUDA graphs need; padding is masked, so results do
not change.

The batch sampler yields ``(query_index, batch_seed)`` pairs. The seed depends only on (seed, epoch,
batch number), so the random list sampling of a resumed run is the same as an uninterrupted one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import TypedDict

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, Sampler
from typing_extensions import NotRequired


class Batch(TypedDict):
    """A batch of whole queries, the one type every producer and consumer of query data uses.

    Padding is marked by ``mask`` only: what a padded entry of ``features`` or ``labels`` holds
    never reaches a value or a gradient.
    """

    features: Tensor  # [B, L, F] float32, raw (normalization happens inside the model)
    labels: Tensor  # [B, L] float32 graded relevance, 0 = not relevant
    mask: Tensor  # [B, L] bool, True = a real document
    query_index: NotRequired[Tensor]  # [B] long, the query's index in its split


# The query index of a padding batch: a rank with fewer evaluation batches than the others gets
# batches of one empty (all-masked) query, which every metric skips, so under DDP each rank runs the
# same number of batches and each real query is still counted exactly once.
PADDING_QUERY = -1


class StreamBatch(TypedDict):
    """A slice of an ordinal stream (PRank, OAP, Widrow-Hoff), in stream order."""

    features: Tensor  # [B, d] float32
    labels: Tensor  # [B] long, 0-based ranks


def sample_lists(batch: Batch, max_list_length: int | None, generator: torch.Generator) -> Batch:
    """Keep at most ``max_list_length`` random documents of each list, at least one relevant.

    Vectorized over the batch: every real document gets a uniform key, one random relevant
    document per list gets the smallest key, and the ``max_list_length`` smallest keys are kept
    (in their original list order). Lists already short enough are unchanged.
    """
    mask = batch["mask"]
    if max_list_length is None or mask.shape[1] <= max_list_length:
        return batch
    keys = torch.rand(mask.shape, generator=generator, device=generator.device).to(mask.device)
    relevant = (batch["labels"] > 0) & mask
    # the relevant document with the smallest key is forced to key -1: always kept
    forced = torch.where(relevant, keys, torch.full_like(keys, 2.0)).argmin(1, keepdim=True)
    keys = keys.scatter(1, forced, torch.where(relevant.gather(1, forced), -1.0, keys.gather(1, forced)))
    keys = keys.masked_fill(~mask, float("inf"))
    keep = keys.topk(max_list_length, dim=1, largest=False).indices.sort(1).values
    return {
        **batch,
        "features": batch["features"].gather(1, keep[..., None].expand(-1, -1, batch["features"].shape[2])),
        "labels": batch["labels"].gather(1, keep),
        "mask": mask.gather(1, keep),
    }


def padded_width(longest: int, pad_multiple: int = 1) -> int:
    """``longest`` rounded up to a multiple of ``pad_multiple``."""
    return -(-longest // pad_multiple) * pad_multiple


def pad_batch(features: Tensor, labels: Tensor, starts: Tensor, lengths: Tensor, width: int | None = None) -> Batch:
    """Gather queries ``[starts, starts + lengths)`` of flat ``features [N, F]`` into a padded batch.

    ``width`` (the longest length) can be passed in to avoid reading ``lengths`` back from a GPU.
    """
    if width is None:
        width = int(lengths.max()) if len(lengths) else 0
    positions = torch.arange(width, device=features.device)
    mask = positions[None, :] < lengths[:, None]
    rows = torch.where(mask, starts[:, None] + positions[None, :], torch.zeros_like(mask, dtype=torch.long))
    # index_select on the flat rows, then zeroing the padding in place: one tensor where features[rows] * mask
    # made two, padding 0 whatever row 0 holds (NaN * 0 is NaN). On CPU only the padding rows are written
    # (their indices: no second pass over the real rows); elsewhere masked_fill_, as nonzero would be a sync
    gathered = features.index_select(0, rows.reshape(-1))
    padding = ~mask.reshape(-1)
    if gathered.device.type == "cpu":
        gathered.index_fill_(0, padding.nonzero().squeeze(1), 0)
    else:
        gathered.masked_fill_(padding[:, None], 0)
    return {
        "features": gathered.view(*rows.shape, *features.shape[1:]),
        "labels": labels[rows] * mask,
        "mask": mask,
    }


class QueryDataset(Dataset):
    """Queries of one split; an item is the query's ``(features [n, F], labels [n], seed)``."""

    def __init__(self, features: Tensor, labels: Tensor, offsets: Tensor) -> None:
        self.features, self.labels, self.offsets = features, labels, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, item: int | tuple[int, int]) -> tuple[Tensor, Tensor, int, int]:
        index, seed = item if isinstance(item, tuple) else (item, -1)
        if index == PADDING_QUERY:  # one document, masked out by collate
            return self.features.new_zeros(1, self.features.shape[1]), self.labels.new_zeros(1), index, seed
        start, stop = int(self.offsets[index]), int(self.offsets[index + 1])
        return self.features[start:stop], self.labels[start:stop], index, seed


def make_collate(max_list_length: int | None, pad_multiple: int = 1) -> Callable[[list], Batch]:
    """Collate for ``QueryDataset`` items: pad, then sample long lists with the batch's seed."""

    def collate(items: list) -> Batch:
        sizes = [len(labels) for _, labels, _, _ in items]
        lengths = torch.tensor(sizes)
        features = torch.cat([f for f, _, _, _ in items])
        labels = torch.cat([y for _, y, _, _ in items])
        starts = torch.cumsum(lengths, 0) - lengths
        batch = pad_batch(features, labels, starts, lengths, padded_width(max(sizes, default=0), pad_multiple))
        batch["query_index"] = torch.tensor([index for _, _, index, _ in items])
        batch["mask"] &= (batch["query_index"] != PADDING_QUERY)[:, None]
        seed = items[0][3] if items else -1
        if seed >= 0:
            batch = sample_lists(batch, max_list_length, torch.Generator().manual_seed(seed))
        return batch

    return collate


class QueryOrderSampler(Sampler[int]):
    """Query indices in a seeded order that changes with the epoch (``set_epoch``).

    It is the ``.sampler`` of ``QueryBatchSampler``, which is where Lightning looks for
    ``set_epoch`` (it calls ``dataloader.sampler`` and ``dataloader.batch_sampler.sampler``).
    """

    def __init__(self, num_queries: int, *, shuffle: bool, seed: int = 0) -> None:
        self.num_queries, self.shuffle, self.seed, self.epoch = num_queries, shuffle, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def rng(self, *extra: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, self.epoch, *extra])

    def __iter__(self) -> Iterator[int]:
        order = self.rng().permutation(self.num_queries) if self.shuffle else np.arange(self.num_queries)
        return iter(order.tolist())

    def __len__(self) -> int:
        return self.num_queries


class QueryBatchSampler(Sampler[list]):
    """Batches of query indices from ``QueryOrderSampler``, optionally bucketed by list length.

    Bucketing sorts queries by length inside windows of ``50 * batch_size`` so that a batch pads
    little, then shuffles the order of batches. With ``with_seeds`` each index comes with a batch
    seed for the list sampling. With ``torch.distributed`` initialized, each rank takes every
    ``world_size``-th batch (so set ``use_distributed_sampler=False`` in the trainer), and every
    rank gets the same number of batches: in training the list is padded by repeating its first
    batches (as ``DistributedSampler`` repeats samples); in evaluation (``shuffle=False``) by
    padding batches of one empty query (``PADDING_QUERY``), so each real query counts once.
    """

    def __init__(
        self,
        lengths: np.ndarray,
        batch_size: int,
        *,
        shuffle: bool,
        bucket: bool = False,
        seed: int = 0,
        with_seeds: bool = False,
    ) -> None:
        self.lengths = np.asarray(lengths)
        self.sampler = QueryOrderSampler(len(self.lengths), shuffle=shuffle, seed=seed)
        self.batch_size, self.bucket, self.with_seeds = batch_size, bucket, with_seeds

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def batches(self) -> list[np.ndarray]:
        order = np.fromiter(self.sampler, dtype=np.int64, count=len(self.sampler))
        if self.bucket:
            window = 50 * self.batch_size
            chunks = np.array_split(order, max(1, math.ceil(len(order) / window)))
            order = np.concatenate([chunk[np.argsort(self.lengths[chunk], kind="stable")] for chunk in chunks])
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        if self.sampler.shuffle and self.bucket:
            batches = [batches[i] for i in self.sampler.rng(1).permutation(len(batches))]
        rank, world = _rank_and_world()
        return _pad_to_multiple(batches, world, repeat=self.sampler.shuffle)[rank::world]

    def batch_seed(self, number: int) -> int:
        return int(self.sampler.rng(2, number).integers(2**62))

    def __iter__(self) -> Iterator[list]:
        for number, batch in enumerate(self.batches()):
            if self.with_seeds:
                seed = self.batch_seed(number)
                yield [(int(i), seed) for i in batch]
            else:
                yield [int(i) for i in batch]

    def __len__(self) -> int:
        _, world = _rank_and_world()
        return math.ceil(math.ceil(len(self.lengths) / self.batch_size) / world)


def _pad_to_multiple(batches: list[np.ndarray], world: int, *, repeat: bool) -> list[np.ndarray]:
    """``batches`` lengthened to a multiple of ``world``: by its first batches (``repeat``), else by
    padding batches."""
    missing = -len(batches) % world
    if not missing or not batches:
        return batches
    if repeat:
        return batches + [batches[i % len(batches)] for i in range(missing)]
    return batches + [np.array([PADDING_QUERY])] * missing


def _rank_and_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class DeviceBatches:
    """An iterable of padded batches built on the device that holds the whole split.

    (Its batch sampler is ``batch_plan``, not ``sampler``: Lightning treats any object with a
    ``sampler`` attribute as a DataLoader.)

    ``epoch_fn`` returns the trainer's current epoch, so that shuffling and list sampling follow
    the same seeds as the DataLoader path (and a resumed run). No step reads anything back from the
    device (tested): the query indices of the whole epoch are copied once, and widths are computed
    from the host-side lengths, rounded up to ``pad_multiple``. ``steps_per_batch`` > 1: yields lists
    of that many consecutive batches (the last list may be shorter), for a module that takes one
    optimizer step per batch of a list (``RankerModule(step_graphs=True)``).
    """

    def __init__(
        self,
        features: Tensor,
        labels: Tensor,
        offsets: Tensor,
        batch_plan: QueryBatchSampler,
        max_list_length: int | None,
        epoch_fn: Callable[[], int],
        pad_multiple: int = 1,
        *,
        steps_per_batch: int = 1,
    ) -> None:
        self.features, self.labels = features, labels
        self.starts, self.lengths = offsets[:-1], offsets[1:] - offsets[:-1]
        self.batch_plan, self.max_list_length, self.epoch_fn = batch_plan, max_list_length, epoch_fn
        self.pad_multiple, self.steps_per_batch = pad_multiple, steps_per_batch

    def __len__(self) -> int:
        return -(-len(self.batch_plan) // self.steps_per_batch)

    def __iter__(self) -> Iterator[Batch | list[Batch]]:
        if self.steps_per_batch == 1:
            yield from self._batches()
            return
        batches = self._batches()
        while group := list(itertools.islice(batches, self.steps_per_batch)):
            yield group

    def _batches(self) -> Iterator[Batch]:
        self.batch_plan.set_epoch(self.epoch_fn())
        device = self.features.device
        plan = self.batch_plan.batches()
        if not plan:
            return
        # one host-to-device copy per epoch (a copy per batch would wait for the device each time)
        flat = torch.from_numpy(np.concatenate(plan).astype(np.int64)).to(device)
        bounds = np.cumsum([0] + [len(indices) for indices in plan]).tolist()
        for number, indices in enumerate(plan):
            index = flat[bounds[number] : bounds[number + 1]]
            real = indices != PADDING_QUERY  # host-side: no device sync
            longest = int(self.batch_plan.lengths[indices[real]].max()) if real.any() else 1
            width = padded_width(longest, self.pad_multiple)
            safe = index.clamp_min(0)
            batch = pad_batch(self.features, self.labels, self.starts[safe], self.lengths[safe], width)
            batch["mask"] &= (index != PADDING_QUERY)[:, None]
            batch["query_index"] = index
            if self.batch_plan.with_seeds and self.max_list_length is not None:  # else nothing to draw
                generator = torch.Generator(device=device).manual_seed(self.batch_plan.batch_seed(number))
                batch = sample_lists(batch, self.max_list_length, generator)
            yield batch
