"""``model=auto``'s blend: when the CV cannot tell the top candidates apart, one scorer that combines them.

Two ways to put scores of different scales on one footing within a query (a list ``[L]``):

- ``zscore``: each member's scores standardized over the query's documents (mean 0, standard deviation 1;
  a constant list gives 0), then the mean over members;
- ``rank``: each member's mid-ranks (``#{j: s_j < s_i} + (#{j: s_j = s_i} - 1) / 2``) over ``L - 1``,
  in ``[0, 1]``, then the mean (ties share their rank: no dependence on list order).

Which one is chosen by the same CV folds the candidates were compared on (``rankers.selection.run``).
``BlendScorer`` is one ``nn.Module`` (the members' own exported modules inside); ``blend_onnx`` joins the
members' ONNX graphs and the combination into one ONNX file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

__all__ = ["METHODS", "BlendScorer", "blend_onnx", "combine", "combine_flat"]

METHODS = ("zscore", "rank")


def combine(stacked: Tensor, method: str) -> Tensor:
    """Members' scores of one query ``[M, L]`` -> the blend's ``[L]`` (float32)."""
    s = stacked.float()
    if method == "zscore":
        centred = s - s.mean(dim=1, keepdim=True)
        std = centred.pow(2).mean(dim=1, keepdim=True).sqrt()
        z = centred / torch.where(std > 0, std, torch.ones_like(std))
        return z.mean(dim=0)
    below = (s[:, None, :] < s[:, :, None]).float().sum(-1)  # [M, L]: documents scored below each
    equal = (s[:, None, :] == s[:, :, None]).float().sum(-1) - 1.0
    width = (torch.ones_like(s[0]).sum() - 1.0).clamp(min=1.0)  # a tensor: L stays dynamic in exports
    return ((below + 0.5 * equal) / width).mean(dim=0)


class _Combine(nn.Module):
    def __init__(self, method: str) -> None:
        super().__init__()
        self.method = method

    def forward(self, stacked: Tensor) -> Tensor:
        return combine(stacked, self.method)


class BlendScorer(nn.Module):
    """Raw features of one query ``[L, F]`` -> the blend of the members' scores ``[L]``."""

    def __init__(self, members: list[nn.Module], method: str) -> None:
        super().__init__()
        if method not in METHODS:
            raise ValueError(f"blend method must be one of {METHODS}, got {method!r}")
        self.members = nn.ModuleList(members)
        self.combine = _Combine(method)

    def forward(self, features: Tensor) -> Tensor:
        scores = [member(features) for member in self.members]
        return self.combine(torch.stack(scores))


def combine_flat(member_scores: list[np.ndarray], offsets: np.ndarray, method: str) -> np.ndarray:
    """The blend of flat per-document scores ``[N]`` of queries ``offsets [Q + 1]`` (the CV's view)."""
    out = np.empty(len(member_scores[0]), np.float32)
    for q in range(len(offsets) - 1):
        start, stop = int(offsets[q]), int(offsets[q + 1])
        stacked = torch.from_numpy(np.stack([m[start:stop] for m in member_scores]).astype(np.float32))
        out[start:stop] = combine(stacked, method).numpy()
    return out


def blend_onnx(member_paths: list[str | Path], method: str, path: str | Path) -> None:
    """One ONNX file: every member's graph reads ``features [L, F]``, their ``[L]`` outputs are stacked
    ``[M, L]`` and combined (the combination exported from ``combine`` by torch's exporter)."""
    import onnx
    from onnx import compose, helper

    tail_path = Path(path).with_suffix(".combine.onnx")
    example = torch.randn(len(member_paths), 5)
    documents = torch.export.Dim("documents", min=1, max=1 << 20)
    torch.onnx.export(
        _Combine(method).eval(),
        (example,),
        str(tail_path),
        input_names=["stacked"],
        output_names=["scores"],
        dynamic_shapes={"stacked": {1: documents}},
        dynamo=True,
        external_data=False,
        verbose=False,
    )
    tail = onnx.load(str(tail_path))
    tail_path.unlink()
    members = [compose.add_prefix(onnx.load(str(p)), f"m{i}_") for i, p in enumerate(member_paths)]
    tail = compose.add_prefix(tail, "tail_")
    nodes, initializers, functions = [], [], []
    for i, member in enumerate(members):
        graph = member.graph
        source = graph.input[0].name
        for node in graph.node:
            node.input[:] = ["features" if name == source else name for name in node.input]
            nodes.append(node)
        initializers += list(graph.initializer)
        functions += list(member.functions)
        axes = helper.make_tensor(f"m{i}_axes", onnx.TensorProto.INT64, [1], [0])
        initializers.append(axes)
        nodes.append(helper.make_node("Unsqueeze", [graph.output[0].name, f"m{i}_axes"], [f"m{i}_row"]))
    nodes.append(helper.make_node("Concat", [f"m{i}_row" for i in range(len(members))], ["tail_stacked"], axis=0))
    nodes += list(tail.graph.node)
    initializers += list(tail.graph.initializer)
    functions += list(tail.functions)
    features = members[0].graph.input[0]
    features.name = "features"
    output = tail.graph.output[0]
    output.name = "tail_scores"
    graph = helper.make_graph(nodes, "blend", [features], [output], initializer=initializers)
    opsets = {}
    for model in [*members, tail]:
        for opset in model.opset_import:
            opsets[opset.domain] = max(opsets.get(opset.domain, 0), opset.version)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()], functions=functions
    )
    model.ir_version = max(m.ir_version for m in [*members, tail])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
