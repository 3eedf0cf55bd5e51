"""Export a trained scorer so it runs without this framework: TorchScript and ONNX.

Both take the raw features of one query's documents exactly as in the input file,
``float32 [L, F]``, and return ``[L]`` scores. The feature normalization is inside.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import torch
from torch import Tensor, nn

from datamodules.normalization import FeatureNormalizer
from rankers.quiet import quiet_third_party

log = logging.getLogger(__name__)


class QueryScorer(nn.Module):
    """Raw features of one query ``[L, F]`` -> scores ``[L]``."""

    def __init__(self, normalizer: FeatureNormalizer, scorer: nn.Module) -> None:
        super().__init__()
        self.normalizer = normalizer
        self.scorer = scorer

    def forward(self, features: Tensor) -> Tensor:
        return self.scorer(self.normalizer(features.unsqueeze(0), None)).squeeze(0)


def export_scorer(
    normalizer: FeatureNormalizer, scorer: nn.Module, out_dir: str | Path, n_features: int
) -> dict[str, str]:
    """Write ``scorer.pt`` (TorchScript), ``scorer.onnx`` and ``meta.json`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    module = copy.deepcopy(QueryScorer(normalizer, scorer)).cpu().eval()
    example = torch.randn(7, n_features)
    paths = {"torchscript": str(out / "scorer.pt"), "onnx": str(out / "scorer.onnx"), "meta": str(out / "meta.json")}
    with torch.no_grad():
        torch.jit.save(torch.jit.script(module), paths["torchscript"])
        export_onnx(module, example, paths["onnx"])
    meta = {
        "n_features": n_features,
        "normalization": normalizer.kind,
        "input": "float32 [L, F] raw features",
        "output": "float32 [L] scores",
    }
    Path(paths["meta"]).write_text(json.dumps(meta, indent=1))
    return paths


def export_learner(learner: nn.Module, out_dir: str | Path, n_features: int) -> dict[str, str]:
    """A ``rankers.learner.Learner``'s export: ``scorer()`` (raw ``[L, F]`` -> ``[L]``, its normalizer
    inside) as ``scorer.pt`` / ``scorer.onnx``, ``meta.json`` with the family's entries
    (``export_meta``), and the family's own files (``export_extra``)."""
    scorer = learner.scorer().cpu().eval()
    paths = export_scorer(FeatureNormalizer("none", num_features=n_features), scorer, out_dir, n_features)
    meta_path = Path(paths["meta"])
    meta = json.loads(meta_path.read_text())
    normalizer = getattr(learner, "normalizer", None)
    meta.update(model=learner.name, normalization=getattr(normalizer, "kind", "none"), **learner.export_meta())
    meta_path.write_text(json.dumps(meta, indent=1))
    return {**paths, **learner.export_extra(str(out_dir))}


def export_onnx(module: nn.Module, example: Tensor, path: str, *, rows: str = "documents") -> None:
    """ONNX of ``module``: input ``features [rows, F]`` (``rows`` dynamic, named as given), output ``scores``."""
    quiet_third_party()  # the exporter's torchvision notices and torch's LeafSpec deprecation
    for name in ("onnx_ir", "onnxscript", "torch.onnx"):
        logging.getLogger(name).setLevel(logging.WARNING)
    documents = torch.export.Dim(rows, min=1, max=1 << 20)
    torch.onnx.export(
        module,
        (example,),
        path,
        input_names=["features"],
        output_names=["scores"],
        dynamic_shapes={"features": {0: documents}},
        dynamo=True,
        external_data=False,
        verbose=False,
    )
