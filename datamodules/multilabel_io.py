"""Reading multilabel and top-label ranking data: MULAN ARFF + XML, SVMlight multilabel, top-label text.

Every reader returns a :class:`MultilabelData`: ``features [N, F] float32``, ``labels [N, d] float32``
(0 = not relevant; > 0 relevant, a larger value ranked higher: all relevant labels are 1 in
multilabel data, a top-label ranking of l labels gives them l, l-1, .., 1), the label names and what
was converted or skipped (``notes``, reported in results.json).

Formats, all documented in docs/data.md:

* **MULAN ARFF** (dense or sparse ``{index value, ...}`` rows), read with liac-arff. The labels are
  named by MULAN's XML file (``<labels xmlns="http://mulan.sourceforge.net/labels"><label name=..>``,
  nested ``<label>`` elements of a hierarchy included; the order in the XML does not matter, labels
  are taken in ARFF attribute order) or are the last ``n_labels`` attributes. Label attributes may
  stand anywhere in the attribute list; each must be nominal ``{0,1}`` or numeric with values 0/1.
  Other nominal attributes become one-hot columns (a two-valued one a single 0/1 column, in the
  order the header declares its values); string and date attributes are skipped and counted.
* **SVMlight multilabel**: ``l1,l2,l3 i:v i:v ...`` (labels are integers, an empty label field is an
  instance with no relevant label), read with scikit-learn's ``load_svmlight_file(multilabel=True)``.
* **top-label ranking** text (``.rank``): ``3>0>5 i:v i:v ...``: the relevant labels (0-based
  integers) from most to least preferred, ``-`` for none; features as SVMlight (1-based indices).
  An optional header line ``# labels: d`` fixes the label count (else the largest label + 1).

Errors are :class:`MultilabelFormatError` (a :class:`~datamodules.errors.DataError`) naming file,
line and the problem: a label value that is not 0/1, a row with the wrong number of values, an XML
label absent from the ARFF, a missing or non-finite feature value, a repeated label in a ranking.
"""

from __future__ import annotations

import logging
import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from datamodules.errors import DataError
from datamodules.letor_io import parser_input

log = logging.getLogger(__name__)


class MultilabelFormatError(DataError):
    """Multilabel input that cannot be used; the message names file, line and the problem."""


@dataclass
class MultilabelData:
    """One split: ``features [N, F]``, ``labels [N, d]`` (grades, 0 = not relevant), names, notes."""

    features: np.ndarray
    labels: np.ndarray
    label_names: list[str]
    feature_names: list[str]
    path: str = ""
    # what the reader converted or skipped: {"skipped_string_attributes": 2, ...}
    notes: dict[str, int] = field(default_factory=dict)
    # True when the labels carry a ranking among the relevant ones (top-label data)
    ranked: bool = False

    @property
    def n_labels(self) -> int:
        return self.labels.shape[1]


# -- MULAN XML -----------------------------------------------------------------------------------
def read_label_names(path: str | Path) -> list[str]:
    """The label names of a MULAN XML file (every ``<label name=...>``, nested ones too, document order)."""
    path = Path(path)
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as error:
        line = error.position[0] if error.position else "?"
        raise MultilabelFormatError(f"{path}:{line}: not a MULAN label XML file: {error}") from None
    except OSError as error:
        raise MultilabelFormatError(f"{path}: cannot read: {error.strerror}") from None
    names = [element.get("name") for element in root.iter() if element.tag.split("}")[-1] == "label"]
    if not names or any(name is None for name in names):
        raise MultilabelFormatError(f"{path}:1: no <label name=...> elements (a MULAN XML names its labels)")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise MultilabelFormatError(f"{path}:{_xml_line(path, repeated[0])}: label {repeated[0]!r} named twice")
    return [str(name) for name in names]


def _xml_line(path: Path, name: str) -> int | str:
    """The line of the XML file that names label ``name`` (for error messages)."""
    pattern = re.compile(r"name\s*=\s*[\"']" + re.escape(name) + r"[\"']")
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if pattern.search(line):
            return number
    return "?"


# -- ARFF ----------------------------------------------------------------------------------------
def read_arff(
    path: str | Path, *, labels: str | Path | list[str] | None = None, n_labels: int | None = None
) -> MultilabelData:
    """A MULAN ARFF file; the labels named by an XML file (or a list of names), else the last ``n_labels``.

    Example:
        >>> import tempfile, pathlib
        >>> text = ("@relation r\\n@attribute L1 {0,1}\\n@attribute x numeric\\n@attribute c {a,b,c}\\n"
        ...         "@attribute L2 {0,1}\\n@data\\n1,0.5,b,0\\n{1 2.0, 3 1}\\n")
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "t.arff"; _ = f.write_text(text)
        >>> data = read_arff(f, labels=["L1", "L2"])
        >>> data.label_names, data.feature_names
        (['L1', 'L2'], ['x', 'c=a', 'c=b', 'c=c'])
        >>> data.features.tolist(), data.labels.tolist()
        ([[0.5, 0.0, 1.0, 0.0], [2.0, 1.0, 0.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]])
    """
    import arff  # liac-arff

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="strict")
    except UnicodeDecodeError as error:
        raise MultilabelFormatError(f"{path}: not UTF-8 text (byte {error.start})") from None
    except OSError as error:
        raise MultilabelFormatError(f"{path}: cannot read: {error.strerror}") from None
    try:
        parsed = arff.loads(text)
    except arff.ArffException as error:
        line = getattr(error, "line", None)
        raise MultilabelFormatError(f"{path}:{line if line and line > 0 else '?'}: {_arff_problem(error)}") from None
    except (ValueError, IndexError, KeyError, TypeError) as error:
        # liac-arff lets some malformed headers through as bare exceptions (an ``@relation`` followed
        # by a tab splits on nothing): still the file's fault, so say which file and what
        raise MultilabelFormatError(f"{path}: not a readable ARFF file ({type(error).__name__}: {error})") from None
    attributes: list[tuple[str, object]] = parsed["attributes"]
    rows: list[list] = parsed["data"]
    if not rows:
        raise MultilabelFormatError(f"{path}: no data rows after @data")
    label_index = _label_columns(path, [name for name, _ in attributes], labels, n_labels)
    lines = _data_lines(text)
    label_values = _label_matrix(path, rows, attributes, label_index, lines)
    features, feature_names, notes = _feature_matrix(path, rows, attributes, set(label_index), lines)
    return MultilabelData(
        features, label_values, [_unescape(attributes[i][0]) for i in label_index], feature_names, str(path), notes
    )


def _arff_problem(error: Exception) -> str:
    """liac-arff's message without its own ``at line N`` (the file:line prefix says it)."""
    message = str(error)
    message = re.sub(r",? (at|in) line \d+\.?$", "", message)
    if "Bad @DATA instance format" in message:
        message = "a data row with the wrong number of values (or a malformed sparse row)"
    return message


def _label_columns(
    path: Path, names: list[str], labels: str | Path | list[str] | None, n_labels: int | None
) -> list[int]:
    """Attribute indices of the labels, in attribute order."""
    if labels is not None:
        xml = None if isinstance(labels, list | tuple) else Path(labels)
        wanted = list(labels) if xml is None else read_label_names(xml)
        position = {name: i for i, name in enumerate(names)}
        # an ARFF name quoted with escapes ('Swainson\\'s Thrush' in MULAN's birds) is named unescaped in the XML
        position.update({_unescape(name): i for i, name in enumerate(names) if _unescape(name) not in position})
        for name in wanted:
            if name not in position:
                where = f"{xml}:{_xml_line(xml, name)}" if xml is not None else "labels"
                raise MultilabelFormatError(f"{where}: label {name!r} is not an attribute of {path}")
        return sorted(position[name] for name in wanted)
    if n_labels is None:
        raise MultilabelFormatError(
            f"{path}: which attributes are labels? give the MULAN XML (data.labels=X.xml) or data.n_labels=k"
        )
    if not 0 < n_labels < len(names):
        raise MultilabelFormatError(f"{path}: n_labels={n_labels} but the file has {len(names)} attributes")
    return list(range(len(names) - n_labels, len(names)))


def _unescape(name: str) -> str:
    r"""An ARFF attribute name with its backslash escapes resolved (``Swainson\'s`` -> ``Swainson's``)."""
    return re.sub(r"\\(.)", r"\1", name)


def _data_lines(text: str) -> np.ndarray:
    """The 1-based file line of every data row (liac-arff skips blank and ``%`` lines)."""
    lines, in_data = [], False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not in_data:
            in_data = stripped.lower().startswith("@data")
            continue
        if stripped and not stripped.startswith("%"):
            lines.append(number)
    return np.asarray(lines)


def _label_matrix(path: Path, rows: list[list], attributes: list, index: list[int], lines: np.ndarray) -> np.ndarray:
    out = np.zeros((len(rows), len(index)), dtype=np.float32)
    for column, attribute in enumerate(index):
        name, kind = attributes[attribute]
        values = [row[attribute] for row in rows]
        if isinstance(kind, list) and set(kind) - {"0", "1"}:
            raise MultilabelFormatError(f"{path}: label attribute {name!r} is nominal {kind}, not {{0,1}}")
        for i, value in enumerate(values):
            if value is None or str(value) not in ("0", "1", "0.0", "1.0"):
                line = lines[i] if i < len(lines) else "?"
                raise MultilabelFormatError(f"{path}:{line}: label {name!r} is {value!r}, not 0 or 1")
        out[:, column] = [float(value) for value in values]
    return out


def _feature_matrix(
    path: Path, rows: list[list], attributes: list, label_set: set[int], lines: np.ndarray
) -> tuple[np.ndarray, list[str], dict[str, int]]:
    """The feature columns: numeric as they are, nominal one-hot, string/date skipped (counted)."""
    columns, names = [], []
    notes = {"skipped_string_attributes": 0, "nominal_attributes_one_hot": 0}
    for attribute, (name, kind) in enumerate(attributes):
        if attribute in label_set:
            continue
        values = [row[attribute] for row in rows]
        if isinstance(kind, list):  # nominal: one column per declared value (one 0/1 column for two)
            notes["nominal_attributes_one_hot"] += 1
            codes = {value: i for i, value in enumerate(kind)}
            hot = np.zeros((len(rows), len(kind)), dtype=np.float32)
            for i, value in enumerate(values):
                if value is not None:  # a missing nominal value: all zeros
                    hot[i, codes[value]] = 1.0
            if len(kind) == 2:
                columns.append(hot[:, 1:])
                names.append(name if set(kind) == {"0", "1"} else f"{name}={kind[1]}")
            else:
                columns.append(hot)
                names += [f"{name}={value}" for value in kind]
        elif str(kind).upper() in ("NUMERIC", "REAL", "INTEGER"):
            column = np.array([math.nan if v is None else float(v) for v in values], dtype=np.float64)
            bad = ~np.isfinite(column)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise MultilabelFormatError(
                    f"{path}:{lines[i] if i < len(lines) else '?'}: feature {name!r} is "
                    f"{'missing (?)' if values[i] is None else values[i]}: features must be finite numbers"
                )
            columns.append(column.astype(np.float32)[:, None])
            names.append(name)
        else:  # STRING, DATE: no numeric meaning here
            notes["skipped_string_attributes"] += 1
            log.warning("%s: attribute %r (%s) is not numeric or nominal: skipped", path, name, kind)
    features = np.concatenate(columns, 1) if columns else np.zeros((len(rows), 0), np.float32)
    return features, names, {k: v for k, v in notes.items() if v}


# -- SVMlight multilabel -------------------------------------------------------------------------
def read_svmlight_multilabel(
    path: str | Path, *, n_features: int | None = None, label_ids: list[int] | None = None
) -> tuple[MultilabelData, list[int]]:
    """``l1,l2 i:v ...`` lines; returns the data and the label ids its columns stand for (sorted, or
    ``label_ids`` when given, e.g. the training file's, so that test columns match).

    Example:
        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "t.svm"
        >>> _ = f.write_text("0,2 1:0.5 3:1\\n 2:2\\n2 1:1\\n")
        >>> data, ids = read_svmlight_multilabel(f)
        >>> ids, data.labels.tolist(), data.features.tolist()
        ([0, 2], [[1.0, 1.0], [0.0, 0.0], [0.0, 1.0]], [[0.5, 0.0, 1.0], [0.0, 2.0, 0.0], [1.0, 0.0, 0.0]])
    """
    from sklearn.datasets import load_svmlight_file

    path = Path(path)
    try:
        # a lone \r ends a line here as in the LETOR reader (sklearn splits on \n only and would join them)
        with parser_input(path) as source:
            x, y = load_svmlight_file(str(source), multilabel=True, n_features=n_features, zero_based=False)
    except (ValueError, OSError) as error:
        raise MultilabelFormatError(f"{path}:{_svmlight_bad_line(path)}: not SVMlight multilabel: {error}") from None
    if x.shape[0] == 0:
        raise MultilabelFormatError(f"{path}: no instances")
    ids = label_ids if label_ids is not None else sorted({int(v) for row in y for v in row})
    column = {label: i for i, label in enumerate(ids)}
    labels = np.zeros((x.shape[0], len(ids)), dtype=np.float32)
    for i, row in enumerate(y):
        for value in row:
            if value != int(value) or int(value) not in column:
                raise MultilabelFormatError(
                    f"{path}:{_nth_data_line(path, i)}: label {value:g} is not one of the training labels {ids[:10]}"
                )
            labels[i, column[int(value)]] = 1.0
    features = x.toarray().astype(np.float32)
    _refuse_non_finite(path, features)
    return MultilabelData(
        features, labels, [str(i) for i in ids], [str(j + 1) for j in range(x.shape[1])], str(path)
    ), ids


def _svmlight_bad_line(path: Path) -> int | str:
    """The first line that does not look like ``labels i:v ...`` (sklearn's reader names no line)."""
    token = re.compile(r"^\d+:[-+.\deE]+$|^(nan|inf)$")
    try:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            body = line.split("#", 1)[0].strip()
            if not body:
                continue
            parts = body.split()
            head_is_labels = re.fullmatch(r"[-+\d.,eE]*", parts[0]) is not None and ":" not in parts[0]
            rest = parts[1:] if head_is_labels else parts
            if not all(token.match(p) for p in rest):
                return number
    except OSError:
        pass
    return "?"


def _nth_data_line(path: Path, index: int) -> int | str:
    count = -1
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if line.split("#", 1)[0].strip() or line.startswith(" "):
            count += 1
        if count == index:
            return number
    return "?"


def _refuse_non_finite(path: Path, features: np.ndarray) -> None:
    bad = ~np.isfinite(features)
    if bad.any():
        row, col = (int(v) for v in np.argwhere(bad)[0])
        raise MultilabelFormatError(
            f"{path}:{_nth_data_line(path, row)}: feature {col + 1} is {features[row, col]}: features must be finite"
        )


# -- top-label rankings --------------------------------------------------------------------------
def read_top_label(path: str | Path, *, n_labels: int | None = None, n_features: int | None = None) -> MultilabelData:
    """Top-label rankings, ``3>0>5 i:v ...`` per line (``-``: no relevant label); see the module doc.

    Labels come back as grades: the first of l relevant labels gets l, the last 1, the others 0.

    Example:
        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "t.rank"
        >>> _ = f.write_text("# labels: 4\\n2>0 1:1.5\\n- 2:1\\n")
        >>> data = read_top_label(f)
        >>> data.labels.tolist(), data.features.tolist()
        ([[1.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0]], [[1.5, 0.0], [0.0, 1.0]])
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise MultilabelFormatError(f"{path}: cannot read: {error}") from None
    rankings, entries, numbers, declared = [], [], [], None
    for number, line in enumerate(text.splitlines(), 1):
        header = re.fullmatch(r"#\s*labels:\s*(\d+)\s*", line.strip())
        if header:
            declared = int(header.group(1))
            continue
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        head, *rest = body.split()
        rankings.append(_parse_ranking(path, number, head))
        entries.append(_parse_features(path, number, rest))
        numbers.append(number)
    if not rankings:
        raise MultilabelFormatError(f"{path}: no instances")
    d = n_labels or declared or 1 + max((max(r) for r in rankings if r), default=0)
    width = n_features or max((max(e) for e in entries if e), default=0)
    labels = np.zeros((len(rankings), d), dtype=np.float32)
    features = np.zeros((len(rankings), width), dtype=np.float32)
    for i, (ranking, entry, number) in enumerate(zip(rankings, entries, numbers, strict=True)):
        if ranking and max(ranking) >= d:
            raise MultilabelFormatError(f"{path}:{number}: label {max(ranking)} but there are {d} labels (0..{d - 1})")
        if entry and max(entry) > width:
            raise MultilabelFormatError(f"{path}:{number}: feature {max(entry)} but the scorer takes {width}")
        labels[i, ranking] = np.arange(len(ranking), 0, -1, dtype=np.float32)
        for index, value in entry.items():
            features[i, index - 1] = value
    return MultilabelData(
        features, labels, [str(i) for i in range(d)], [str(j + 1) for j in range(width)], str(path), ranked=True
    )


def _parse_ranking(path: Path, number: int, head: str) -> list[int]:
    if head == "-":
        return []
    try:
        ranking = [int(token) for token in head.split(">")]
    except ValueError:
        raise MultilabelFormatError(f"{path}:{number}: ranking {head!r} is not labels joined by '>'") from None
    if min(ranking) < 0 or len(set(ranking)) != len(ranking):
        raise MultilabelFormatError(f"{path}:{number}: ranking {head!r} repeats a label or has a negative one")
    return ranking


def _parse_features(path: Path, number: int, tokens: list[str]) -> dict[int, float]:
    entry = {}
    for token in tokens:
        index, _, value = token.partition(":")
        try:
            i, v = int(index), float(value)
        except ValueError:
            raise MultilabelFormatError(f"{path}:{number}: {token!r} is not index:value") from None
        if i < 1 or not math.isfinite(v):
            raise MultilabelFormatError(f"{path}:{number}: {token!r}: indices start at 1, values are finite")
        entry[i] = v
    return entry


def write_top_label(path: str | Path, features: np.ndarray, labels: np.ndarray) -> None:
    """Write ``features [N, F]``, grades ``labels [N, d]`` in the top-label text form (zeros omitted)."""
    with open(path, "w") as out:
        out.write(f"# labels: {labels.shape[1]}\n")
        for x, y in zip(features, labels, strict=True):
            relevant = np.flatnonzero(y > 0)
            order = relevant[np.argsort(-y[relevant], kind="stable")]
            head = ">".join(str(int(i)) for i in order) or "-"
            body = " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(x) if v != 0)
            out.write(f"{head} {body}\n")


def read_multilabel(
    path: str | Path,
    *,
    labels: str | Path | None = None,
    n_labels: int | None = None,
    reference: MultilabelData | None = None,
    label_ids: list[int] | None = None,
) -> tuple[MultilabelData, list[int] | None]:
    """Any of the formats by extension: ``.arff``, ``.rank`` (top-label), else SVMlight multilabel.

    ``reference`` (the training split) fixes a test split's feature width and label columns.
    """
    suffix = Path(path).suffix.lower()
    if suffix == ".arff":
        data = read_arff(path, labels=labels, n_labels=n_labels)
        if reference is not None and (
            data.label_names != reference.label_names or data.feature_names != reference.feature_names
        ):
            raise MultilabelFormatError(
                f"{path}: its attributes differ from {reference.path}'s (labels {data.label_names[:5]}.. "
                f"vs {reference.label_names[:5]}..); train and test files need the same header"
            )
        return data, None
    width = reference.features.shape[1] if reference is not None else None
    if suffix == ".rank":
        d = reference.n_labels if reference is not None else n_labels
        return read_top_label(path, n_labels=d, n_features=width), None
    return read_svmlight_multilabel(path, n_features=width, label_ids=label_ids)
