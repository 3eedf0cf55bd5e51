"""One tensorized tree-ensemble scorer for random forests and gradient-boosted trees.

Every tree is node arrays ``feature, threshold, left, value, route [T, M]``, numbered so that the two
children of a node are adjacent (the right child of ``n`` is ``left[n] + 1``); a leaf points to itself
with threshold ``+inf``. ``depth`` steps of one gather over every tree at once bring each document to
its leaf::

    node <- left[node] + (x_route[feature[node]] > threshold[node])

Left is ``x <= threshold``: an engine whose rule differs stores the float32 threshold that makes it so
(XGBoost's ``x < t`` is ``x <= nextafter(t, -inf)`` in float32; a float64 threshold ``t`` becomes the
largest float32 ``<= t``). What a NaN (or, for LightGBM's zero-as-missing splits, a zero) does is the
node's *route*: which copy of the features the node reads.

========  ==========================================================  =====================================
route     the feature as the node reads it                             whose rule
========  ==========================================================  =====================================
0         NaN -> -inf (NaN goes left)                                  sklearn, XGBoost default left,
                                                                       LightGBM ``missing_type=NaN`` left
1         NaN -> +inf (NaN goes right)                                 the same, right
2         NaN -> 0 (then compared)                                     LightGBM ``missing_type=None``
3         NaN and zero (``|x| <= 1e-35``) -> -inf                      LightGBM ``missing_type=Zero`` left
4         NaN and zero -> +inf                                         LightGBM ``missing_type=Zero`` right
========  ==========================================================  =====================================

Only the routes some node uses are built (``[N, V * F]``). The score is ``bias + scale * sum of the
leaves`` (forests: ``scale = 1 / T``; boosting: 1 and the engine's base score), summed in float64 and
returned as float32. Every operation is a tensor op on the input's device: the scorer runs on CUDA as
on CPU, and scripts (TorchScript) and exports (ONNX) as it is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

__all__ = [
    "NAN_LEFT",
    "NAN_RIGHT",
    "NAN_ZERO",
    "ZERO_LEFT",
    "ZERO_RIGHT",
    "EnsembleArrays",
    "RawTree",
    "TreeEnsembleScorer",
    "float32_at_most",
    "float32_below",
    "pack",
]

NAN_LEFT, NAN_RIGHT, NAN_ZERO, ZERO_LEFT, ZERO_RIGHT = 0, 1, 2, 3, 4
ROUTES = (NAN_LEFT, NAN_RIGHT, NAN_ZERO, ZERO_LEFT, ZERO_RIGHT)
# LightGBM's kZeroThreshold (1e-35f): a value within it counts as zero for missing_type=Zero
ZERO_THRESHOLD = float(np.float32(1e-35))


def float32_at_most(threshold: np.ndarray) -> np.ndarray:
    """The largest float32 ``<=`` each float64: for a float32 ``x``, ``x <= t`` iff ``x <= result``."""
    threshold = np.asarray(threshold, dtype=np.float64)
    with np.errstate(over="ignore"):  # LightGBM's 1e300 (its stand-in for inf) -> inf -> the largest float32
        down = threshold.astype(np.float32)
    above = down.astype(np.float64) > threshold
    down[above] = np.nextafter(down[above], np.float32(-np.inf))
    return down


def float32_below(threshold: np.ndarray) -> np.ndarray:
    """For float32 ``t``: the float32 ``s`` with ``x < t`` iff ``x <= s`` (XGBoost's left rule)."""
    t = np.asarray(threshold, dtype=np.float32)
    return np.nextafter(t, np.float32(-np.inf))


@dataclass
class RawTree:
    """One tree in its engine's numbering: node ``i`` is a leaf when ``left[i] < 0``.

    Arrays ``[n_nodes]``: ``feature`` (int), ``threshold`` (float32, left is ``x <= threshold``),
    ``left`` / ``right`` (child ids, -1 at leaves), ``value`` (float64 leaf outputs), ``route`` (int,
    the table above); ``root`` is the root's id."""

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray
    route: np.ndarray
    root: int = 0


@dataclass
class EnsembleArrays:
    """Trees as node arrays ``[T, M]`` (numpy) with siblings adjacent (right child = ``left + 1``)."""

    feature: np.ndarray  # int64, 0 at leaves and padding
    threshold: np.ndarray  # float32, +inf at leaves and padding
    left: np.ndarray  # int64 local index of the left child; a leaf's is itself
    value: np.ndarray  # float64 leaf outputs, 0 at internal nodes
    route: np.ndarray  # int64 route code (0 at leaves)
    depth: int  # the deepest leaf's depth: traversal steps


def _breadth_first(tree: RawTree) -> tuple[np.ndarray, int]:
    """Engine ids in breadth-first order with each node's children consecutive (``order[new] = old``)
    and the deepest leaf's depth."""
    order, depths, head = [tree.root], [0], 0
    while head < len(order):
        old = order[head]
        if tree.left[old] >= 0:
            order += [int(tree.left[old]), int(tree.right[old])]
            depths += [depths[head] + 1] * 2
        head += 1
    return np.asarray(order), max(depths)


def pack(trees: Sequence[RawTree], max_nodes: int | None = None) -> EnsembleArrays:
    """Engine trees -> ``EnsembleArrays`` with ``M = max_nodes`` columns (default: the largest tree).

    Example:
        >>> stump = RawTree(np.array([0, 0, 0]), np.array([0.5, 0, 0], np.float32), np.array([1, -1, -1]),
        ...                 np.array([2, -1, -1]), np.array([0.0, -1.0, 1.0]), np.array([NAN_RIGHT, 0, 0]))
        >>> arrays = pack([stump])
        >>> arrays.left.tolist(), arrays.value.tolist(), arrays.route.tolist(), arrays.depth
        ([[1, 1, 2]], [[0.0, -1.0, 1.0]], [[1, 0, 0]], 1)
    """
    layouts = [_breadth_first(tree) for tree in trees]
    sizes = [len(order) for order, _ in layouts]
    width = max(sizes, default=1) if max_nodes is None else max_nodes
    if sizes and max(sizes) > width:
        raise ValueError(f"a tree has {max(sizes)} nodes, more than the {width} the arrays hold")
    shape = (len(trees), width)
    arrays = EnsembleArrays(
        feature=np.zeros(shape, np.int64),
        threshold=np.full(shape, np.inf, np.float32),
        left=np.broadcast_to(np.arange(width), shape).copy(),
        value=np.zeros(shape, np.float64),
        route=np.zeros(shape, np.int64),
        depth=max((depth for _, depth in layouts), default=0),
    )
    for i, (tree, (order, _)) in enumerate(zip(trees, layouts, strict=True)):
        n = len(order)
        new_id = np.zeros(max(int(order.max()) + 1, len(tree.left)), np.int64)
        new_id[order] = np.arange(n)
        old_left = np.asarray(tree.left)[order]
        internal = old_left >= 0
        arrays.feature[i, :n] = np.where(internal, np.asarray(tree.feature)[order], 0)
        arrays.threshold[i, :n] = np.where(internal, np.asarray(tree.threshold, np.float32)[order], np.inf)
        arrays.left[i, :n] = np.where(internal, new_id[np.maximum(old_left, 0)], np.arange(n))
        arrays.value[i, :n] = np.where(internal, 0.0, np.asarray(tree.value, np.float64)[order])
        arrays.route[i, :n] = np.where(internal, np.asarray(tree.route)[order], 0)
    if np.isin(arrays.route, ROUTES, invert=True).any():
        raise ValueError(f"route codes must be among {ROUTES}")
    return arrays


class TreeEnsembleScorer(nn.Module):
    """``bias + scale * (sum of the trees' leaves)``: raw features ``[..., F]`` -> scores ``[...]``.

    Node arrays ``[T, M]`` are buffers flattened to ``[T * M]`` so that one gather indexes every tree at
    once. ``route`` (``[T, M]`` codes, or a bool ``nan_right``: ``False`` = 0, ``True`` = 1) says which
    copy of the features each node reads (module docstring). ``n_trees`` of the ``T`` rows score (the
    rest are unused preallocated rows). ``scale`` None: the trees' mean (a forest).
    """

    def __init__(
        self,
        feature: Tensor,
        threshold: Tensor,
        left: Tensor,
        value: Tensor,
        route: Tensor,
        *,
        depth: int,
        n_features: int,
        n_trees: int | None = None,
        scale: float | None = None,
        bias: float = 0.0,
    ) -> None:
        super().__init__()
        t = feature.shape[0] if n_trees is None else int(n_trees)
        width = feature.shape[1]
        codes = route[:t].long()
        # a non-empty list of ints: TorchScript infers List[int] (a class annotation would not resolve here)
        # the routes splits use (leaves and padding, threshold +inf, stay put whatever they read)
        split = threshold[:t] < math.inf
        self.routes = sorted({int(c) for c in codes[split].unique().tolist()}) or [NAN_LEFT]
        if any(c not in ROUTES for c in self.routes):
            raise ValueError(f"route codes must be among {ROUTES}, got {self.routes}")
        position = torch.zeros(max(ROUTES) + 1, dtype=torch.long)
        position[torch.tensor(self.routes)] = torch.arange(len(self.routes))
        base = torch.arange(t, dtype=torch.long)[:, None] * width  # [T, 1]: each tree's first flat node
        offset = torch.where(split, position[codes], 0) * n_features
        self.register_buffer("feature", (feature[:t].long() + offset).reshape(-1))
        self.register_buffer("threshold", threshold[:t].reshape(-1).float())
        self.register_buffer("left", (left[:t].long() + base).reshape(-1))  # flat indices
        self.register_buffer("value", value[:t].reshape(-1).double())
        self.register_buffer("roots", base.reshape(1, -1))
        self.depth = int(depth)
        self.n_trees = int(t)
        self.n_features = int(n_features)
        self.scale = float(1.0 / max(t, 1) if scale is None else scale)
        self.bias = float(bias)
        self.zero_threshold = ZERO_THRESHOLD

    @classmethod
    def from_arrays(
        cls, arrays: EnsembleArrays, n_features: int, *, scale: float | None = None, bias: float = 0.0
    ) -> TreeEnsembleScorer:
        """A scorer of packed arrays (``pack``, ``rankers.trees.forest.pack_trees``)."""
        tensors = (arrays.feature, arrays.threshold, arrays.left, arrays.value, arrays.route)
        return cls(
            *(torch.from_numpy(np.ascontiguousarray(a)) for a in tensors),
            depth=arrays.depth,
            n_features=n_features,
            scale=scale,
            bias=bias,
        )

    def _routed(self, x: Tensor) -> Tensor:
        """``[N, F]`` -> ``[N, V * F]``: the features as each used route reads them."""
        nan = torch.isnan(x)
        parts: list[Tensor] = []
        for code in self.routes:  # literal codes: TorchScript reads no module globals (see ROUTES)
            if code == 0:  # NAN_LEFT
                parts.append(x.masked_fill(nan, -math.inf))
            elif code == 1:  # NAN_RIGHT
                parts.append(x.masked_fill(nan, math.inf))
            elif code == 2:  # NAN_ZERO
                parts.append(x.masked_fill(nan, 0.0))
            else:  # ZERO_LEFT (3) / ZERO_RIGHT (4)
                missing = nan | (x.abs() <= self.zero_threshold)
                parts.append(x.masked_fill(missing, -math.inf if code == 3 else math.inf))
        return torch.cat(parts, 1)

    def forward(self, features: Tensor) -> Tensor:
        shape = features.shape[:-1]
        x = features.reshape(-1, features.shape[-1]).float()  # [N, F]
        node = self.roots.expand(x.shape[0], self.n_trees)  # [N, T] flat node index
        if self.depth > 0:
            table = self._routed(x)
            for _ in range(self.depth):
                right = table.gather(1, self.feature[node]) > self.threshold[node]
                node = self.left[node] + right  # bool promotes to 0 / 1
        scores = self.value[node].sum(-1) * self.scale + self.bias
        return scores.float().reshape(shape)
