"""Self-made held-out English ad-hoc collections from text on this machine (never public test collections).

    python -m bench.linklearn_heldout OUT_DIR     # writes OUT_DIR/{man,manv,doc,docv}/{docs,queries,qrels}

``man``: the DESCRIPTION of each installed man page (first 250 words, gcloud pages left out: near
duplicates) is a document; the NAME line's short description of 300 sampled pages is a query whose
one relevant document is its page (short keyword-like queries, a known-item task). ``doc``: the same
from Python docstrings (summary line -> the docstring's body) of the stdlib, numpy, scipy, sklearn
and torch. ``manv`` / ``docv``: verbose variants, the first sentence of the relevant document is the
query and is removed from the document (sentence-long queries full of stop words, like the queries
of classic test collections). Used to choose LinkLearn's defaults (docs/linklearn.md).
"""

import gzip
import importlib
import inspect
import random
import re
import sys
from pathlib import Path


def roff_to_text(src):
    out = []
    for line in src.splitlines():
        if line.startswith(('.\\"', "'\\\"")):
            continue
        if line.startswith("."):
            parts = line.split(None, 1)
            macro = parts[0][1:]
            if macro in (
                "SH",
                "SS",
                "B",
                "I",
                "BR",
                "IR",
                "RB",
                "RI",
                "BI",
                "IB",
                "TP",
                "IP",
                "PP",
                "P",
                "LP",
                "Nm",
                "Nd",
                "Sh",
                "It",
                "Xr",
                "Fl",
                "Ar",
                "Pa",
            ):
                line = parts[1] if len(parts) > 1 else ""
                line = "\n@@" + line if macro in ("SH", "Sh") else line
            else:
                continue
        out.append(line)
    text = "\n".join(out)
    text = re.sub(r"\\f[BIRPC]|\\f\(..|\\f\[[^\]]*\]", "", text)
    text = re.sub(r"\\\(..|\\\*\(..|\\\*.|\\\[[^\]]*\]", " ", text)
    text = text.replace("\\-", "-").replace("\\&", "").replace("\\e", "\\").replace("\\ ", " ").replace("\\c", "")
    text = re.sub(r"\\.", " ", text)
    return text


def sections(text):
    secs = {}
    for chunk in text.split("\n@@")[1:]:
        head, _, body = chunk.partition("\n")
        secs[head.strip().strip('"').upper()] = body
    return secs


def manpages(out, n_queries=300, max_words=250, seed=0):
    docs, names = {}, {}
    for sec in ("1", "3", "5", "7", "8"):
        for path in sorted(Path(f"/usr/share/man/man{sec}").glob("*.gz")):
            try:
                text = roff_to_text(gzip.decompress(path.read_bytes()).decode(errors="replace"))
            except Exception:
                continue
            s = sections(text)
            name = " ".join(s.get("NAME", "").split())
            desc = " ".join(s.get("DESCRIPTION", "").split()[:max_words])
            m = re.match(r"(.+?)\s+-+\s+(.+)", name)
            if not m or len(desc.split()) < 30:
                continue
            key = path.name.removesuffix(".gz")
            if key.startswith("gcloud"):
                continue
            docs[key] = desc
            names[key] = m.group(2)
    rng = random.Random(seed)
    keys = sorted(docs)
    qkeys = rng.sample(keys, n_queries)
    write(out, docs, {k: names[k] for k in qkeys}, {k: {k: 1} for k in qkeys})


def docstrings(out, n_queries=300, seed=0):
    docs, summ = {}, {}
    mods = [
        "numpy",
        "scipy.stats",
        "scipy.linalg",
        "scipy.signal",
        "scipy.optimize",
        "scipy.sparse",
        "scipy.special",
        "scipy.interpolate",
        "scipy.integrate",
        "scipy.spatial",
        "scipy.ndimage",
        "sklearn.metrics",
        "sklearn.linear_model",
        "sklearn.ensemble",
        "sklearn.cluster",
        "sklearn.decomposition",
        "sklearn.preprocessing",
        "sklearn.model_selection",
        "sklearn.feature_extraction.text",
        "sklearn.neighbors",
        "sklearn.svm",
        "sklearn.tree",
        "os",
        "os.path",
        "shutil",
        "subprocess",
        "json",
        "csv",
        "re",
        "string",
        "textwrap",
        "collections",
        "itertools",
        "functools",
        "datetime",
        "calendar",
        "math",
        "statistics",
        "random",
        "socket",
        "ssl",
        "http.client",
        "urllib.parse",
        "email",
        "smtplib",
        "ftplib",
        "zipfile",
        "tarfile",
        "gzip",
        "bz2",
        "sqlite3",
        "threading",
        "multiprocessing",
        "asyncio",
        "logging",
        "argparse",
        "unittest",
        "doctest",
        "pdb",
        "inspect",
        "ast",
        "tokenize",
        "locale",
        "gettext",
        "decimal",
        "fractions",
        "heapq",
        "bisect",
        "array",
        "struct",
        "codecs",
        "io",
        "tempfile",
        "glob",
        "fnmatch",
        "pathlib",
        "pickle",
        "shelve",
        "copy",
        "pprint",
        "xml.dom.minidom",
        "xml.etree.ElementTree",
        "html.parser",
        "mailbox",
        "imaplib",
        "poplib",
        "uuid",
        "hashlib",
        "hmac",
        "secrets",
        "base64",
        "binascii",
        "quopri",
        "wave",
        "colorsys",
        "turtle",
        "tkinter",
        "curses",
        "platform",
        "sysconfig",
        "signal",
        "select",
        "selectors",
        "mmap",
        "ctypes",
        "concurrent.futures",
        "queue",
        "sched",
        "contextlib",
        "abc",
        "typing",
        "dataclasses",
        "enum",
        "numbers",
        "cmath",
        "operator",
        "weakref",
        "types",
        "gc",
        "traceback",
        "warnings",
        "timeit",
        "trace",
        "cProfile",
        "pstats",
        "difflib",
        "unicodedata",
        "stringprep",
        "readline",
        "rlcompleter",
        "zlib",
        "lzma",
        "configparser",
        "netrc",
        "plistlib",
        "getpass",
        "telnetlib",
        "webbrowser",
        "wsgiref.util",
        "http.server",
        "http.cookies",
        "urllib.request",
        "ipaddress",
        "graphlib",
        "zoneinfo",
        "torch",
        "torch.nn.functional",
    ]
    seen = set()
    for modname in mods:
        try:
            mod = importlib.import_module(modname)
        except Exception:
            continue
        for name, obj in vars(mod).items():
            if name.startswith("_") or id(obj) in seen:
                continue
            if not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj)):
                continue
            seen.add(id(obj))
            doc = inspect.getdoc(obj) or ""
            paras = doc.strip().split("\n\n")
            if len(paras) < 2:
                continue
            head = " ".join(paras[0].split())
            body = []
            for p in paras[1:]:
                if re.match(
                    r"\s*(Parameters|Returns|Examples|See Also|Notes|References|Args|Raises|Attributes|Yields|\.\. )", p
                ):
                    break
                body.append(" ".join(p.split()))
            body = " ".join(body)
            if len(body.split()) < 25 or len(head.split()) < 3 or "(" in head[: len(name) + 2]:
                continue
            key = f"{modname}.{name}"
            docs[key] = " ".join(body.split()[:250])
            summ[key] = head
    rng = random.Random(seed)
    keys = sorted(docs)
    qkeys = rng.sample(keys, min(n_queries, len(keys)))
    write(out, docs, {k: summ[k] for k in qkeys}, {k: {k: 1} for k in qkeys})


def clean(text):
    return " ".join(text.replace("\t", " ").split())


def write(out, docs, queries, qrels):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "docs.tsv").write_text("".join(f"{k}\t{clean(v)}\n" for k, v in docs.items()))
    (out / "queries.tsv").write_text("".join(f"q_{k}\t{clean(v)}\n" for k, v in queries.items()))
    (out / "qrels.txt").write_text("".join(f"q_{q} 0 {d} {r}\n" for q, rel in qrels.items() for d, r in rel.items()))
    print(out, len(docs), "docs", len(queries), "queries")


def verbose_variant(src, out, seed=0):
    """Query = the first sentence of the relevant document's text (removed from it) + the short query."""
    src, out = Path(src), Path(out)
    docs = dict(line.split("\t", 1) for line in (src / "docs.tsv").read_text().splitlines())
    qrels = {}
    for line in (src / "qrels.txt").read_text().splitlines():
        q, _, d, r = line.split()
        qrels.setdefault(q, {})[d] = int(r)
    newq = {}
    for q, rel in qrels.items():
        d = next(iter(rel))
        sents = re.split(r"(?<=[.!?])\s+", docs[d], maxsplit=1)
        if len(sents) < 2 or len(sents[1].split()) < 20:
            continue
        newq[q[2:]] = sents[0]
        docs[d] = sents[1]
    write(out, docs, newq, {q: qrels["q_" + q] for q in newq})


def lead_section(body, max_words=200):
    """The paragraphs before the first heading (a line that is not indented) of a Wikispeedia body: an abstract."""
    kept = []
    for line in body.split("\n"):
        if line.strip() and not line.startswith(" "):
            if kept:
                break
            continue
        kept.append(line)
    return " ".join(" ".join(kept).split()[:max_words])


def wikispeedia(src, out, *, fraction=0.2, n_queries=150, min_relevant=3, seed=0):
    """Classic-like collections from Wikispeedia articles held out of training, and the training corpus without them.

    ``out/wikispeedia_train``: the Wikispeedia layout without the held-out articles and their links
    (texts are read from ``src``). Of the held-out articles, ``n_queries`` are query articles and the
    rest documents, each represented by its lead section (the paragraphs before the first heading, at
    most 200 words: an abstract). The query is the lead sentence of a query article (a verbose,
    sentence-long query). ``wsp_links``: relevant are the documents linked with the query article;
    ``wsp_cat``: the documents sharing one of its most specific Wikispeedia subject categories
    (topical relevance, which training never sees).
    """
    from datamodules.wikipedia.folder import lead_of, split_wikispeedia_text

    src, out = Path(src), Path(out)
    names = [
        line for line in (src / "articles.tsv").read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    links = [
        tuple(line.split("\t"))
        for line in (src / "links.tsv").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    categories = {}
    for line in (src / "categories.tsv").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, path = line.split("\t")
            categories.setdefault(name, set()).add(path)
    rng = random.Random(seed)
    held = set(rng.sample(names, round(fraction * len(names))))
    train = out / "wikispeedia_train"
    train.mkdir(parents=True, exist_ok=True)
    (train / "articles.tsv").write_text("".join(n + "\n" for n in names if n not in held))
    (train / "links.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in links if a not in held and b not in held))
    if not (train / "plaintext_articles").exists():
        (train / "plaintext_articles").symlink_to((src / "plaintext_articles").resolve())
    texts = {}
    for name in sorted(held):
        _, body, _ = split_wikispeedia_text((src / "plaintext_articles" / f"{name}.txt").read_text())
        texts[name] = (lead_section(body), lead_of(body))
    neighbours = {}
    for a, b in links:
        if a in held and b in held and a != b:
            neighbours.setdefault(a, set()).add(b)
            neighbours.setdefault(b, set()).add(a)
    held_sorted = sorted(held)
    rng.shuffle(held_sorted)
    candidates = [n for n in held_sorted if len(neighbours.get(n, ())) >= 2 * min_relevant]
    query_articles = set(candidates[:n_queries])
    docs = {n: texts[n][0] for n in sorted(held - query_articles) if len(texts[n][0].split()) >= 20}
    queries = {n: texts[n][1] for n in sorted(query_articles)}
    link_qrels, cat_qrels = {}, {}
    for q in sorted(query_articles):
        raw = q
        linked = {d: 1 for d in neighbours.get(raw, ()) if d in docs}
        if len(linked) >= min_relevant:
            link_qrels[q] = linked
        leaves = categories.get(raw, set())
        same = {d: 1 for d in docs if categories.get(d, set()) & leaves}
        if len(same) >= min_relevant:
            cat_qrels[q] = same
    write(out / "wsp_links", docs, {q: queries[q] for q in link_qrels}, link_qrels)
    write(out / "wsp_cat", docs, {q: queries[q] for q in cat_qrels}, cat_qrels)


def debian_packages(man_dir, out, *, min_relevant=3):
    """``pkgman``: the long description of each installed Debian package (``/var/lib/dpkg/status``) is a
    verbose query whose relevant documents are its man pages in ``man_dir`` (topical, several relevant)."""
    man_dir = Path(man_dir)
    docs = dict(line.split("\t", 1) for line in (man_dir / "docs.tsv").read_text().splitlines())
    descriptions, package, lines = {}, None, []
    for line in [*Path("/var/lib/dpkg/status").read_text(errors="replace").splitlines(), ""]:
        if line.startswith("Package: "):
            package = line.split()[1]
        elif line.startswith("Description: "):
            lines = [line[len("Description: ") :]]
        elif line.startswith(" ") and lines:
            lines.append("" if line.strip() == "." else line.strip())
        elif lines:
            descriptions[package] = " ".join(lines)
            lines = []
    queries, qrels = {}, {}
    for name, text in sorted(descriptions.items()):
        listing = Path(f"/var/lib/dpkg/info/{name}.list")
        if not listing.exists():
            listing = next(iter(sorted(Path("/var/lib/dpkg/info").glob(f"{name}:*.list"))), listing)
        if not listing.exists():
            continue
        pages = {
            Path(entry).name.removesuffix(".gz")
            for entry in listing.read_text(errors="replace").splitlines()
            if entry.startswith("/usr/share/man/man")
        }
        relevant = {page: 1 for page in sorted(pages) if page in docs}
        if len(relevant) >= min_relevant and len(text.split()) >= 8:
            queries[name], qrels[name] = text, relevant
    write(out, docs, queries, qrels)


def python_modules(doc_dir, out, *, min_relevant=3):
    """``pymod``: each module's docstring (its first 100 words) is a verbose query whose relevant documents
    are the docstrings of that module's functions and classes in ``doc_dir`` (topical, several relevant)."""
    doc_dir = Path(doc_dir)
    docs = dict(line.split("\t", 1) for line in (doc_dir / "docs.tsv").read_text().splitlines())
    members = {}
    for key in docs:
        members.setdefault(key.rsplit(".", 1)[0], []).append(key)
    queries, qrels = {}, {}
    for module, keys in sorted(members.items()):
        try:
            text = inspect.getdoc(importlib.import_module(module)) or ""
        except Exception:
            continue
        text = " ".join(text.split()[:100])
        if len(keys) >= min_relevant and len(text.split()) >= 8:
            queries[module], qrels[module] = text, {key: 1 for key in keys}
    write(out, docs, queries, qrels)


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore")
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "heldout")
    manpages(target / "man")
    docstrings(target / "doc")
    verbose_variant(target / "man", target / "manv")
    verbose_variant(target / "doc", target / "docv")
    debian_packages(target / "man", target / "pkgman")
    python_modules(target / "doc", target / "pymod")
    wikispeedia_folder = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikispeedia"
    if wikispeedia_folder.is_dir():
        wikispeedia(wikispeedia_folder, target)
