"""A trained LinkLearn model as a search engine over your own documents.

    python -m rankers.linklearn.search --model OUT/export --collection DIR --output run.txt
    python -m rankers.linklearn.search --model OUT/export --docs docs.tsv --queries topics.tsv --qrels qrels.txt
    python -m rankers.linklearn.search --model OUT/export --collection DIR --query "free text"

``DIR`` is a ``datamodules.adhoc`` folder (``docs.tsv`` ``id<TAB>text``, ``queries.tsv``, optional
``qrels.txt``). The documents are indexed with the exported term weight (``term_weight.pt``); the index
is built once and cached beside the model (``export/index/<key>.npz``, written atomically, the key the
SHA-256 of the documents file and of the model), so a second search skips tokenizing and weighting.
Queries are ranked, the top ``--depth`` documents of each written as a TREC run, and with qrels the run
is evaluated by ``retrieval.evaluate`` on the whole ranking: MAP, P@10, R-precision and nDCG@10 equal
to what the training run reports for that collection (``results.json["adhoc"]``), which builds the same
corpora (``datamodules.adhoc``) and scores them with the same ``collection_scores`` steps (on the same
kind of device: a GPU's sums may round differently from a CPU's).

Bad input (a folder that is no LinkLearn export, an empty or malformed documents file, duplicate ids)
is refused with the file and line, exit status 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from datamodules.adhoc import CollectionFormatError, read_tsv
from datamodules.atomic import atomic_path, private_sibling
from datamodules.errors import DataError
from rankers.linklearn.model import STARTS, TermWeight, weight_matrix
from retrieval.evaluation import evaluate
from retrieval.sparse import inverted_index, rank
from retrieval.terms import Corpus, CorpusBuilder, load_corpus, save_corpus, tokenize
from retrieval.trec import TrecFormatError, read_qrels

log = logging.getLogger(__name__)

EXIT_BAD_INPUT = 2
# the largest [Q, D] score matrix evaluated in one piece (as the training run does); larger ones by chunks
WHOLE_SCORES = 1 << 28
INDEX_VERSION = 1  # part of the cache key: a change of the index layout invalidates old files


class SearchInputError(DataError):
    """Input the search cannot use; the message names the file (and line)."""


# -- the model ------------------------------------------------------------------------------------
def load_term_weight(export_dir: str | Path) -> TermWeight:
    """The exported ``TermWeight`` (``term_weight.pt`` + ``meta.json`` of a ``model=linklearn`` run) as the
    Python module the training run scored with (hidden width, start and its constants read from the file)."""
    folder = Path(export_dir)
    weights, meta_path = folder / "term_weight.pt", folder / "meta.json"
    if not folder.is_dir():
        raise SearchInputError(f"{folder}: no such model folder (give a model=linklearn run's OUT/export)")
    for path in (weights, meta_path):
        if not path.is_file():
            raise SearchInputError(f"{path}: missing; {folder} is not a model=linklearn export")
    try:
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        line = getattr(error, "lineno", 1)
        raise SearchInputError(f"{meta_path}:{line}: not JSON ({error})") from None
    if not isinstance(meta, dict) or meta.get("model") != "linklearn":
        raise SearchInputError(
            f"{meta_path}:1: model is {meta.get('model') if isinstance(meta, dict) else meta!r}, not linklearn"
        )
    try:
        scripted = torch.jit.load(str(weights), map_location="cpu")
    except RuntimeError as error:
        raise SearchInputError(f"{weights}: not a TorchScript term weight ({str(error).splitlines()[0]})") from None
    state = scripted.state_dict()
    hidden = state["tf_mlp.layers.0.weight"].shape[0]
    start = next(name for name, code in STARTS.items() if code == int(scripted.start_code))
    model = TermWeight(hidden, start=start, k1=scripted.k1, b=scripted.b, idf_power=scripted.idf_power)
    model.load_state_dict(state)
    return model.eval()


def file_digest(*paths: Path) -> str:
    """SHA-256 of the files' bytes, in order (the cache key)."""
    digest = hashlib.sha256(f"linklearn-index-v{INDEX_VERSION}".encode())
    for path in paths:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


# -- the index ------------------------------------------------------------------------------------
@dataclass
class Index:
    """The documents: ids, their ``Corpus`` (vocabulary, df: the queries are read over them) and the
    inverted index ``[V, D]`` (sparse CSR) of their LinkLearn weights."""

    doc_ids: list[str]
    corpus: Corpus
    postings: torch.Tensor

    def to(self, device: torch.device) -> Index:
        return Index(self.doc_ids, self.corpus, self.postings.to(device))


def _progress(rows: list, desc: str):
    """A progress bar over ``rows`` on a terminal when there are many (indexing is a Python loop)."""
    if len(rows) < 2000 or not sys.stderr.isatty():
        return rows
    from tqdm import tqdm

    return tqdm(rows, desc=desc, unit="doc", mininterval=1.0)


def build_index(docs: list[tuple[str, str]], model: TermWeight, device: torch.device) -> Index:
    """Tokenize the documents as ``datamodules.adhoc.read_collection`` does and weight them with ``model``
    (the document side of ``rankers.linklearn.model.collection_scores``)."""
    builder = CorpusBuilder()
    for _, text in _progress(docs, "indexing"):
        builder.add(tokenize(text))
    corpus = builder.build()
    idf = corpus.idf()
    with torch.no_grad():
        features = corpus.features().tensors(device)
        rows = torch.arange(corpus.n_docs, device=device)
        postings = inverted_index(weight_matrix(model, features, rows, len(idf)))
    return Index([doc_id for doc_id, _ in docs], corpus, postings)


def save_index(path: Path, index: Index) -> None:
    """The index as one ``.npz`` (no pickles), published atomically (``datamodules.atomic``)."""
    postings = index.postings.cpu()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as partial:
        save_corpus(
            partial,
            index.corpus,
            doc_ids=np.frombuffer("\n".join(index.doc_ids).encode(), dtype=np.uint8),
            crow=postings.crow_indices().numpy(),
            col=postings.col_indices().numpy(),
            values=postings.values().numpy(),
            shape=np.asarray(postings.shape, dtype=np.int64),
        )


def load_index(path: Path) -> Index:
    corpus, extra = load_corpus(path)
    with warnings.catch_warnings():  # "sparse CSR support is in beta": retrieval.sparse uses it throughout
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        postings = torch.sparse_csr_tensor(
            torch.from_numpy(extra["crow"]),
            torch.from_numpy(extra["col"]),
            torch.from_numpy(extra["values"]),
            tuple(int(n) for n in extra["shape"]),
            check_invariants=True,  # a damaged cache file fails here, not as a wrong product
        )
    return Index(extra["doc_ids"].tobytes().decode().split("\n"), corpus, postings)


def cached_index(
    docs_path: Path, model_dir: Path, model: TermWeight, device: torch.device, *, use_cache: bool = True
) -> tuple[Index, bool]:
    """The index of ``docs_path`` under the model: from ``model_dir/index/<key>.npz`` when there, else
    built (and saved there). Returns it and whether it came from the cache."""
    key = file_digest(docs_path, model_dir / "term_weight.pt")[:24]
    path = model_dir / "index" / f"{key}.npz"
    if use_cache and path.is_file():
        try:
            return load_index(path).to(device), True
        except (OSError, ValueError, KeyError, RuntimeError, zipfile.BadZipFile) as error:
            log.warning("unreadable cached index %s (%s: %s): building it again", path, type(error).__name__, error)
    docs = read_documents(docs_path)
    index = build_index(docs, model, device)
    if use_cache:
        try:
            save_index(path, index)
        except OSError as error:  # a read-only model folder: search anyway, say why nothing was cached
            log.warning("index not cached at %s: %s", path, error)
    return index, False


# -- reading the inputs ---------------------------------------------------------------------------
def read_documents(path: Path) -> list[tuple[str, str]]:
    try:
        return read_tsv(path)
    except (CollectionFormatError, TrecFormatError) as error:
        raise SearchInputError(str(error)) from None


read_queries = read_documents  # the same format, and the same refusals (duplicate ids name both lines)


def query_corpus(index: Index, texts: list[str]) -> Corpus:
    """Queries over the documents' vocabulary (terms the documents lack dropped), as ``read_collection``."""
    vocabulary = {term: i for i, term in enumerate(index.corpus.vocabulary) if term}
    builder = CorpusBuilder(vocabulary, grow=False)
    for text in texts:
        builder.add(tokenize(text))
    return builder.build(len(index.corpus.vocabulary))


def read_labels(path: Path, query_ids: list[str], doc_ids: list[str]) -> tuple[torch.Tensor, dict[str, int]]:
    """``labels [Q, D]`` from a TREC qrels file, counted as ``datamodules.adhoc.read_collection`` counts:
    judgments of unknown queries or documents are counted, negative judgments are 0."""
    try:
        qrels, counts = read_qrels(path)
    except TrecFormatError as error:
        raise SearchInputError(str(error)) from None
    doc_index = {doc_id: i for i, doc_id in enumerate(doc_ids)}
    query_index = {qid: i for i, qid in enumerate(query_ids)}
    labels = torch.zeros(len(query_ids), len(doc_ids))
    counts.update(judgments_unknown_query=0, judgments_docs_missing=0)
    for qid, judged in qrels.items():
        if qid not in query_index:
            counts["judgments_unknown_query"] += len(judged)
            continue
        for doc_id, relevance in judged.items():
            if doc_id not in doc_index:
                counts["judgments_docs_missing"] += 1
                continue
            labels[query_index[qid], doc_index[doc_id]] = max(relevance, 0)
    if not (labels.amax(1) > 0).any():
        raise SearchInputError(f"{path}: no query of the query file has a relevant document in the documents")
    return labels, counts


# -- ranking --------------------------------------------------------------------------------------
def score(index: Index, queries: Corpus, model: TermWeight, rows: slice | None = None) -> torch.Tensor:
    """``[Q, D]`` similarities (the query side of ``collection_scores``), on the index's device."""
    device = index.postings.device
    idf = index.corpus.idf()
    with torch.no_grad():
        features = queries.features(idf=idf).tensors(device)
        picked = torch.arange(queries.n_docs, device=device)[rows or slice(None)]
        return rank(index.postings, weight_matrix(model, features, picked, len(idf)))


def ranked(index: Index, queries: Corpus, model: TermWeight, *, chunk: int = 256):
    """``(rows, scores [q, D])`` chunks of queries, so memory stays ``chunk x D``."""
    for start in range(0, queries.n_docs, chunk):
        rows = slice(start, min(start + chunk, queries.n_docs))
        yield rows, score(index, queries, model, rows).cpu()


def search(
    model_dir: Path,
    docs_path: Path,
    queries_path: Path,
    *,
    output: Path | None,
    qrels_path: Path | None = None,
    depth: int = 1000,
    device: torch.device | None = None,
    use_cache: bool = True,
) -> dict:
    """Rank every query, write the TREC run, evaluate it with qrels; returns what it measured."""
    device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = load_term_weight(model_dir).to(device)
    index, from_cache = cached_index(docs_path, model_dir, model, device, use_cache=use_cache)
    rows = read_queries(queries_path)
    query_ids = [qid for qid, _ in rows]
    queries = query_corpus(index, [text for _, text in rows])
    labels, counts = read_labels(qrels_path, query_ids, index.doc_ids) if qrels_path else (None, {})
    # with qrels the whole [Q, D] matrix is ranked in one product, as the training run does, so the
    # measures are the very floats it reports; otherwise (or when too big) chunks of queries
    whole = labels is not None and len(query_ids) * len(index.doc_ids) <= WHOLE_SCORES
    chunk = max(len(query_ids), 1) if whole else 256
    parts: list = []
    writer = open_run(output)
    try:
        for rows_, scores in ranked(index, queries, model, chunk=chunk):
            write_top(writer, scores, query_ids[rows_], index.doc_ids, depth)
            if labels is not None:
                parts.append(scores if whole else _chunk_measures(scores, labels[rows_]))
    except BaseException:
        close_run(writer, None)  # no half-written run under the output's name
        raise
    close_run(writer, output)
    result = {
        "documents": len(index.doc_ids),
        "queries": len(query_ids),
        "index_cached": from_cache,
        "device": str(device),
        **({"run": str(output)} if output else {}),
    }
    if labels is not None:
        measures = evaluate(torch.cat(parts), labels) if whole else _mean_measures(parts)
        result.update(measures=measures, qrels=counts)
    return result


def _chunk_measures(scores: torch.Tensor, labels: torch.Tensor) -> dict | None:
    return evaluate(scores, labels) if (labels.amax(1) > 0).any() else None


def _mean_measures(parts: list[dict | None]) -> dict:
    """Query-weighted mean of per-chunk ``evaluate`` results (a collection too big for one matrix)."""
    parts = [p for p in parts if p]
    total = sum(p["queries"] for p in parts)
    out = {k: sum(p[k] * p["queries"] for p in parts) / total for k in ("map", "p@10", "r_precision", "ndcg@10")}
    return {**out, "queries": total, "queries_without_relevant": sum(p["queries_without_relevant"] for p in parts)}


def open_run(output: Path | None):
    """``(file, partial path)`` of the run being written (renamed onto ``output`` when complete)."""
    if output is None:
        return None
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = private_sibling(output)
    return open(partial, "w"), partial


def close_run(writer, output: Path | None) -> None:
    """Publish the written run as ``output`` (atomic rename), or discard it (``output`` None)."""
    if writer is None:
        return
    handle, partial = writer
    handle.close()
    if output is not None:
        partial.replace(output)
    else:
        partial.unlink(missing_ok=True)


def write_top(writer, scores: torch.Tensor, query_ids: list[str], doc_ids: list[str], depth: int) -> None:
    """The top ``depth`` documents of each query, ranked as ``retrieval.evaluate`` ranks them (score, ties
    in document order) and as ``retrieval.trec.write_run`` lists them; see ``untied`` for the scores."""
    if writer is None:
        return
    top = torch.sort(scores.float(), dim=1, descending=True, stable=True)
    values, documents = untied(top.values[:, :depth].numpy()).tolist(), top.indices[:, :depth].tolist()
    handle = writer[0]
    for qid, row_values, row_documents in zip(query_ids, values, documents):
        handle.writelines(
            f"{qid} Q0 {doc_ids[d]} {r} {v:.9g} linklearn\n"
            for r, (v, d) in enumerate(zip(row_values, row_documents), 1)
        )


def untied(values: np.ndarray) -> np.ndarray:
    """Descending float32 scores ``[Q, k]`` made strictly decreasing: each score that is not below the
    one before it is lowered to the next float32 below that one (a run of tied zeros, documents sharing
    no term with the query, becomes 0, -1.4e-45, -2.8e-45, ...). trec_eval reads scores as float32 and
    orders tied documents by id; without ties it ranks the run in the order written, the order of
    ``retrieval.evaluate`` (ties by document position), so its MAP is the MAP this module reports.

    Example:
        >>> untied(np.array([[2.0, 1.0, 1.0, 0.0, 0.0]], dtype=np.float32))[0].tolist()
        [2.0, 1.0, 0.9999999403953552, 0.0, -1.401298464324817e-45]
    """
    out = values.astype(np.float32, copy=True)
    for row in np.flatnonzero((out[:, 1:] >= out[:, :-1]).any(1)):  # the rows with a tie (few)
        scores = out[row]
        for i in range(1, len(scores)):
            if scores[i] >= scores[i - 1]:
                scores[i] = np.nextafter(scores[i - 1], np.float32(-np.inf))
    return out


def free_text(
    model_dir: Path,
    docs_path: Path,
    text: str,
    *,
    k: int = 10,
    device: torch.device | None = None,
    use_cache: bool = True,
) -> list[tuple[str, float, str]]:
    """``(doc id, score, title)`` of the ``k`` best documents for ``text``; the title is the start of the
    document's text (Wikispeedia's articles start with theirs), cut to 80 characters."""
    device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = load_term_weight(model_dir).to(device)
    index, _ = cached_index(docs_path, model_dir, model, device, use_cache=use_cache)
    scores = score(index, query_corpus(index, [text]), model)[0].cpu()
    top = torch.sort(scores, descending=True, stable=True)
    texts = dict(read_documents(docs_path))
    hits = []
    for value, position in zip(top.values[:k].tolist(), top.indices[:k].tolist()):
        doc_id = index.doc_ids[position]
        hits.append((doc_id, value, " ".join(texts[doc_id].split())[:80]))
    return hits


# -- the command line -----------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rankers.linklearn.search",
        description="Rank documents with a trained LinkLearn model (a model=linklearn run's OUT/export).",
    )
    parser.add_argument("--model", required=True, type=Path, help="the run's export folder (term_weight.pt, meta.json)")
    parser.add_argument("--collection", type=Path, help="a folder with docs.tsv, queries.tsv and optionally qrels.txt")
    parser.add_argument("--docs", type=Path, help="id<TAB>text documents (instead of DIR/docs.tsv)")
    parser.add_argument("--queries", type=Path, help="id<TAB>text queries (instead of DIR/queries.tsv)")
    parser.add_argument("--qrels", type=Path, help="TREC qrels (instead of DIR/qrels.txt): evaluate the run")
    parser.add_argument("--output", type=Path, help="the TREC run file to write")
    parser.add_argument("--depth", type=int, default=1000, help="documents per query in the run (default 1000)")
    parser.add_argument("--query", help="free text: print its top 10 documents instead of ranking a query file")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda when present)")
    parser.add_argument("--no-cache", action="store_true", help="build the index without reading or writing the cache")
    args = parser.parse_args(argv)
    folder = args.collection
    if folder is not None and not folder.is_dir():
        parser.error(f"--collection {folder}: no such folder")
    args.docs = args.docs or (folder / "docs.tsv" if folder else None)
    if args.docs is None:
        parser.error("give --collection DIR or --docs FILE")
    if args.query is None:
        args.queries = args.queries or (folder / "queries.tsv" if folder else None)
        if args.queries is None:
            parser.error("give --collection DIR, --queries FILE or --query TEXT")
        if args.qrels is None and folder is not None and (folder / "qrels.txt").is_file():
            args.qrels = folder / "qrels.txt"
    if args.depth < 1:
        parser.error("--depth must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse_args(argv)
    device = torch.device(args.device) if args.device else None
    try:
        if args.query is not None:
            for rank_, (doc_id, value, title) in enumerate(
                free_text(args.model, args.docs, args.query, device=device, use_cache=not args.no_cache), 1
            ):
                print(f"{rank_:2d}  {value:10.4f}  {doc_id}  {title}")
            return 0
        result = search(
            args.model,
            args.docs,
            args.queries,
            output=args.output,
            qrels_path=args.qrels,
            depth=args.depth,
            device=device,
            use_cache=not args.no_cache,
        )
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
