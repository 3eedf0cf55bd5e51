"""Rank the labels of a data file with an exported label scorer (``OUT/export/scorer.pt`` or ``.onnx``).

    python -m rankers.label_ranking.predict --scorer OUT/export/scorer.pt --input X-test.arff \
        --labels X.xml --output predictions.tsv

Writes one line per instance: ``index<TAB>relevant labels (score > 0)<TAB>all labels by score``,
label names comma-separated, and, when the file has labels, prints the label ranking metrics as JSON.
A label scorer maps ``[N, F]`` to ``[N, d]`` (one score per label) where ``rankers.score``'s
document scorers map ``[L, F]`` to ``[L]``: that tool's TREC run format has no place for it.
"""

from __future__ import annotations

import argparse
import json
import zipfile
from pathlib import Path

import numpy as np
import torch

from datamodules.multilabel_io import read_multilabel
from metrics.label_ranking import LABEL_RANKING_METRICS, TOP_LABEL_METRICS
from rankers.outputs import atomic_file


def load_label_scorer(path: str | Path):
    """``features [N, F] float32 -> scores [N, d]`` for a TorchScript (zip) or ONNX export."""
    path = Path(path)
    if zipfile.is_zipfile(path):
        module = torch.jit.load(str(path)).eval()

        def score(features: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return module(torch.from_numpy(features)).numpy()

        return score
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda features: session.run(None, {name: features})[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scorer", required=True, help="export/scorer.pt (TorchScript) or export/scorer.onnx")
    parser.add_argument("--input", required=True, help=".arff (MULAN), .rank (top-label) or SVMlight multilabel")
    parser.add_argument("--labels", default=None, help="MULAN XML naming the label attributes (ARFF)")
    parser.add_argument("--n-labels", type=int, default=None, help="without --labels: the last k ARFF attributes")
    parser.add_argument("--output", default=None, help="predictions file (default: none, metrics only)")
    args = parser.parse_args(argv)
    meta_path = Path(args.scorer).with_name("meta.json")
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    data, _ = read_multilabel(
        args.input, labels=args.labels, n_labels=args.n_labels or len(meta.get("labels", [])) or None
    )
    width = meta.get("n_features", data.features.shape[1])
    features = np.zeros((len(data.features), width), dtype=np.float32)
    features[:, : min(width, data.features.shape[1])] = data.features[:, :width]
    scores = load_label_scorer(args.scorer)(np.ascontiguousarray(features))
    names = meta.get("labels") or data.label_names
    if args.output:
        with atomic_file(args.output, "predictions file") as partial, open(partial, "w") as out:
            for i, row in enumerate(scores):
                order = np.argsort(-row, kind="stable")
                relevant = ",".join(names[j] for j in order if row[j] > 0)
                out.write(f"{i}\t{relevant}\t{','.join(names[j] for j in order)}\n")
    if data.labels.shape[1] == scores.shape[1]:
        s, y = torch.from_numpy(scores), torch.from_numpy(data.labels)
        fns = {**LABEL_RANKING_METRICS, **(TOP_LABEL_METRICS if data.ranked else {})}
        print(json.dumps({name: round(float(fn(s, y).mean()), 6) for name, fn in fns.items()}))


if __name__ == "__main__":
    main()
