"""Score a LETOR file with an exported scorer and write a TREC run file.

    python -m rankers.score --scorer OUT/export/scorer.pt --input test.txt --output run.txt

The run file (``qid Q0 docid rank score tag``) is read by trec_eval and ir_measures. Only
TorchScript and the data file are needed: the framework's models are not imported.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np
import torch

from datamodules.letor_io import read_doc_ids, read_letor


def score_file(scorer_path: str | Path, input_path: str | Path, *, zero_based: bool = False) -> tuple:
    """Scores of every document ``[N]``, with the split's qids ``[N]`` and offsets."""
    scorer = torch.jit.load(str(scorer_path)).eval()
    meta_path = Path(scorer_path).with_name("meta.json")
    data = read_letor(input_path, zero_based=zero_based)
    if meta_path.exists():
        data = data.with_num_features(json.loads(meta_path.read_text())["n_features"])
    scores = np.empty(len(data.labels), dtype=np.float32)
    features = torch.from_numpy(data.features)
    with torch.no_grad():
        for start, stop in zip(data.offsets[:-1], data.offsets[1:]):
            scores[start:stop] = scorer(features[start:stop]).numpy()
    return scores, data


def write_run(
    path: str | Path, scores: np.ndarray, qids: np.ndarray, offsets: np.ndarray, doc_ids: list[str], tag: str = "ltr"
) -> None:
    """TREC run format; within a query, ties keep file order (as the metrics do)."""
    with open(path, "w") as out:
        for start, stop in itertools.pairwise(offsets):
            order = start + np.argsort(-scores[start:stop], kind="stable")
            for rank, row in enumerate(order, 1):
                out.write(f"{qids[row]} Q0 {doc_ids[row]} {rank} {scores[row]:.6f} {tag}\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scorer", required=True, help="export/scorer.pt (TorchScript)")
    parser.add_argument("--input", required=True, help="LETOR-format file to score")
    parser.add_argument("--output", required=True, help="TREC run file to write")
    parser.add_argument("--tag", default="ltr")
    parser.add_argument("--zero-based", action="store_true")
    args = parser.parse_args(argv)
    scores, data = score_file(args.scorer, args.input, zero_based=args.zero_based)
    write_run(args.output, scores, data.qids, data.offsets, read_doc_ids(args.input), args.tag)


if __name__ == "__main__":
    main()
