"""LinkLearn's hinge cost (Grangier & Bengio, eq. 7)."""

from __future__ import annotations

import torch
from torch import Tensor

from losses._common import Reduction, compute_dtype, reduce


def linklearn_hinge(sim_pos: Tensor, sim_neg: Tensor, *, margin: float = 1.0, reduction: Reduction = "mean") -> Tensor:
    """``|margin - sim(d, l+) + sim(d, l-)|_+`` for each (d, l+, l-) triple.

    Args: sim_pos, sim_neg ``[N]`` similarities of d to a linked and to a non-linked document;
    ``reduction`` ``"mean"`` over triples, ``"sum"`` or ``"none"`` (``[N]``). Returns a scalar or ``[N]``.
    """
    if sim_pos.shape != sim_neg.shape:
        raise ValueError(f"sim_pos {tuple(sim_pos.shape)} and sim_neg {tuple(sim_neg.shape)} differ")
    dtype = compute_dtype(sim_pos)
    hinge = torch.relu(margin - sim_pos.to(dtype) + sim_neg.to(dtype))
    return reduce(hinge, reduction, hinge.numel())
