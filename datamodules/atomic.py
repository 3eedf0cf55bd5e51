"""Publishing generated data and caches atomically, so that any number of processes and nodes may
share one data directory (one home or project directory on NFS, the normal cluster case).

Every writer writes to a temporary name of its own (host, process and a random part in the name) in
the target's folder, then renames it onto the target: a reader sees the whole file or none of it, and
two writers of the same (deterministic) content never step on each other's half-written files. A
rename within one folder is atomic on POSIX file systems, NFS included.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> target = Path(tempfile.mkdtemp()) / "table.txt"
    >>> with atomic_path(target) as partial:
    ...     _ = partial.write_text("1 qid:1 1:0.5\\n")
    >>> target.read_text()
    '1 qid:1 1:0.5\\n'
    >>> sorted(p.name for p in target.parent.iterdir())  # no temporary left behind
    ['table.txt']
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def private_sibling(path: Path) -> Path:
    """A name beside ``path`` that no other process, on this host or another, will use; it keeps
    ``path``'s suffix (``np.savez`` and ``np.save`` add theirs to a name without it)."""
    tag = f"{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    return path.with_name(f".{path.name}.{tag}.partial{path.suffix}")


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a private temporary file name; when the block succeeds it replaces ``path`` at once.

    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = private_sibling(path)
    try:
        yield partial
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


@contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a private temporary folder; when the block succeeds it is renamed to ``path``.

    If another process published ``path`` first, its copy is kept and ours is discarded (both are
    built from the same inputs). On an exception the temporary folder is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = private_sibling(path)
    partial.mkdir()
    try:
        yield partial
        try:
            os.rename(partial, path)
        except OSError:  # ENOTEMPTY / EEXIST: someone else published it meanwhile
            if not path.is_dir():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
