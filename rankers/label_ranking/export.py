"""Label scorers and their export: raw features ``[N, F]`` -> label scores ``[N, d]``.

``export/scorer.pt`` (TorchScript) and ``export/scorer.onnx`` take the features of N instances
exactly as in the input file (``float32 [N, F]``; the training split's scaling is inside) and return
``float32 [N, d]`` scores, one per label in ``meta.json``'s ``labels`` order. Sorting a row's scores
gives the label ranking; the labels with score > 0 (above the calibration point ``w_0 = 0``) are the
predicted relevant set. ``python -m rankers.label_ranking.predict`` applies them to a data file.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from torch import Tensor, nn

from datamodules.multilabel import AffineScaler
from rankers.export import export_onnx
from rankers.outputs import save_torchscript


class LinearLabelScorer(nn.Module):
    """``x [N, F] -> x W^T + b`` ``[N, d]``: the calibrated linear sorting function (w_0 = 0 implicit)."""

    def __init__(self, weight: Tensor, bias: Tensor) -> None:
        super().__init__()
        self.register_buffer("weight", weight.float().clone())
        self.register_buffer("bias", bias.float().clone())

    def forward(self, x: Tensor) -> Tensor:
        return x @ self.weight.T + self.bias


class MLPLabelScorer(nn.Module):
    """An MLP ``[N, F] -> [N, d]`` (ReLU hidden layers with dropout; no hidden layer: linear)."""

    def __init__(self, n_features: int, n_labels: int, *, hidden: list[int], dropout: float = 0.0) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = n_features
        for size in hidden:
            layers += [nn.Linear(width, size), nn.ReLU(), nn.Dropout(dropout)]
            width = size
        layers.append(nn.Linear(width, n_labels))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class LabelScorer(nn.Module):
    """The exported module: raw ``[N, F]`` -> scaled -> ``core`` -> ``[N, d]``."""

    def __init__(self, scaler: AffineScaler, core: nn.Module) -> None:
        super().__init__()
        self.scaler = scaler
        self.core = core

    def forward(self, features: Tensor) -> Tensor:
        return self.core(self.scaler(features))


def export_label_scorer(
    scaler: AffineScaler, core: nn.Module, out_dir: str | Path, n_features: int, label_names: list[str]
) -> dict[str, str]:
    """Write ``scorer.pt``, ``scorer.onnx`` and ``meta.json`` into ``out_dir``; their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    module = copy.deepcopy(LabelScorer(scaler, core)).cpu().eval()
    paths = {"torchscript": str(out / "scorer.pt"), "onnx": str(out / "scorer.onnx"), "meta": str(out / "meta.json")}
    with torch.no_grad():
        save_torchscript(torch.jit.script(module), paths["torchscript"], "export")
        export_onnx(module, torch.randn(7, n_features), paths["onnx"], rows="instances")
    meta = {
        "kind": "label_ranking",
        "n_features": n_features,
        "labels": list(label_names),
        "scaling": scaler.kind,
        "input": "float32 [N, F] raw features",
        "output": "float32 [N, d] label scores; relevant when > 0 (the calibration point)",
    }
    Path(paths["meta"]).write_text(json.dumps(meta, indent=1))
    return paths
