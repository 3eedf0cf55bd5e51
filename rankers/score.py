"""Score a LETOR file with an exported scorer and write a TREC run file.

    python -m rankers.score --scorer OUT/export/scorer.pt --input test.txt --output run.txt
    python -m rankers.score --scorer OUT/export/scorer.onnx --input test.txt --output run.txt

The run file (``qid Q0 docid rank score tag``) is read by trec_eval and ir_measures. Only the
exported scorer (TorchScript or ONNX) and the data file are needed: the framework's models are not
imported.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from datamodules.letor_io import LetorData, read_doc_ids, read_letor
from rankers.outputs import EXIT_OUTPUT_ERROR, OutputError, atomic_file

log = logging.getLogger(__name__)

QueryScorer = Callable[[np.ndarray], np.ndarray]


class ScorerFormatError(ValueError):
    """A ``--scorer`` file that is neither a TorchScript nor an ONNX scorer."""


def load_scorer(path: str | Path) -> tuple[QueryScorer, int | None]:
    """The scorer ``[L, F] float32 -> [L]`` and its feature width (``meta.json``, or the ONNX input's
    shape), for a TorchScript archive (a zip file) or an ONNX model (anything else)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"scorer not found: {path}")
    meta = path.with_name("meta.json")
    width = json.loads(meta.read_text())["n_features"] if meta.exists() else None
    if zipfile.is_zipfile(path):
        try:
            module = torch.jit.load(str(path)).eval()
        except RuntimeError as error:
            raise ScorerFormatError(f"{path}: a zip file but not a TorchScript scorer ({error})") from None

        def score(features: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return module(torch.from_numpy(features)).numpy()

        return score, width
    import onnxruntime

    try:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime raises its own exception types for every malformed model
        raise ScorerFormatError(
            f"{path}: neither a TorchScript scorer (export/scorer.pt) nor an ONNX scorer (export/scorer.onnx): "
            f"{str(error)[:200]}"
        ) from None
    declared = session.get_inputs()[0].shape[-1]
    name = session.get_inputs()[0].name
    return (lambda features: session.run(None, {name: features})[0]), width or (
        declared if isinstance(declared, int) else None
    )


def fit_width(data: LetorData, width: int | None) -> LetorData:
    """The features at the scorer's width. SVMlight files omit zero values, so a file whose largest
    index is below the width is read with the missing columns as 0 (and says so); a file with an
    index above it is an error."""
    if width is None or data.num_features == width:
        return data
    if data.num_features < width:
        log.warning(
            "%s: largest feature index is %d but the scorer takes %d features; features %d..%d are read as 0 "
            "(SVMlight omits zero values)",
            data.path,
            data.num_features,
            width,
            data.num_features + 1,
            width,
        )
    return data.with_num_features(width)


def score_file(scorer_path: str | Path, input_path: str | Path, *, zero_based: bool = False) -> tuple:
    """Scores of every document ``[N]``, with the split's data (qids, offsets)."""
    scorer, width = load_scorer(scorer_path)
    data = fit_width(read_letor(input_path, zero_based=zero_based), width)
    scores = np.empty(len(data.labels), dtype=np.float32)
    for start, stop in itertools.pairwise(data.offsets):
        scores[start:stop] = scorer(np.ascontiguousarray(data.features[start:stop]))
    return scores, data


def write_run(
    path: str | Path, scores: np.ndarray, qids: np.ndarray, offsets: np.ndarray, doc_ids: list[str], tag: str = "ltr"
) -> None:
    """TREC run format; within a query, ties keep file order (as the metrics do)."""
    bad = np.flatnonzero(~np.isfinite(scores))
    if len(bad):  # a run file with "nan" scores ranks nothing and trec_eval reads it without a word
        raise ValueError(
            f"the scorer gave {len(bad)} non-finite scores (first: document row {bad[0]}, query {qids[bad[0]]})"
        )
    with atomic_file(path, "run file") as partial, open(partial, "w") as out:
        for start, stop in itertools.pairwise(offsets):
            order = start + np.argsort(-scores[start:stop], kind="stable")
            for rank, row in enumerate(order, 1):
                out.write(f"{qids[row]} Q0 {doc_ids[row]} {rank} {scores[row]:.6f} {tag}\n")


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scorer", required=True, help="export/scorer.pt (TorchScript) or export/scorer.onnx")
    parser.add_argument("--input", required=True, help="LETOR-format file to score")
    parser.add_argument("--output", required=True, help="TREC run file to write")
    parser.add_argument("--tag", default="ltr")
    parser.add_argument("--zero-based", action="store_true")
    args = parser.parse_args(argv)
    try:
        scores, data = score_file(args.scorer, args.input, zero_based=args.zero_based)
        write_run(args.output, scores, data.qids, data.offsets, read_doc_ids(args.input), args.tag)
    except OutputError as error:  # one line naming the file, as train.py ends a run that cannot write
        raise _exit(error, EXIT_OUTPUT_ERROR) from error
    except ValueError as error:  # the readers' DataError, scores that are not finite
        raise _exit(error, 2) from error


def _exit(error: Exception, code: int) -> SystemExit:
    logging.getLogger(__name__).error("%s", error)
    return SystemExit(code)


if __name__ == "__main__":
    main()
