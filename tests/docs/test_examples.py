"""Every example on the documentation site (and in the README) runs as written.

- each ``python train.py ...`` line composes into a config (in-process, as ``--cfg job`` would):
  every config group, key and override it names exists; sweeps (``-m a,b``) compose each value;
- each ``python -m bench.X`` / ``python -m rankers.score`` line names a script that exists and
  options its ``--help`` lists;
- each ```python block runs, in a folder where ``OUT`` is a finished (tiny) run.

``pip``, ``torchrun``, ``srun``, ``sbatch`` and ``tensorboard`` lines are installation and cluster
commands: not run here (the multi-node test runs torchrun itself).
"""

from __future__ import annotations

import itertools
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra

from rankers.pipeline import compose_config
from tests.conftest import ROOT, TINY

PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
NOT_RUN = ("pip", "torchrun", "srun", "sbatch", "tensorboard", "trec_eval", "cd", "export", "git", "mkdocs")


def blocks(language: str) -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for match in FENCE.finditer(page.read_text(encoding="utf-8")):
            if match.group(1) == language:
                found.append((page.relative_to(ROOT).as_posix(), match.group(2)))
    return found


def commands() -> list[tuple[str, list[str]]]:
    """``(page, argv)`` of every shell command in bash blocks (continuations joined, ``&&`` split)."""
    found = []
    for page, text in blocks("bash"):
        text = re.sub(r"\\\n\s*", " ", text)
        for line in text.splitlines():
            line = line.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            for part in line.split("&&"):
                argv = shlex.split(part.strip())
                if argv and argv[0] not in NOT_RUN and not argv[0].startswith("#"):
                    found.append((page, argv))
    return found


def train_commands() -> list[tuple[str, list[str]]]:
    return [(page, argv[2:]) for page, argv in commands() if argv[:2] == ["python", "train.py"]]


def script_commands() -> list[tuple[str, list[str]]]:
    return [(page, argv[1:]) for page, argv in commands() if argv[0] == "python" and argv[1:2] != ["train.py"]]


def command_id(value: object) -> str:
    return " ".join(value) if isinstance(value, list) else str(value)


def test_the_pages_have_examples():
    assert len(train_commands()) >= 20 and blocks("python")


def sweep(arguments: list[str]) -> list[list[str]]:
    """The override lists a command runs: one, or each combination of a ``-m`` sweep."""
    if "-m" not in arguments and "--multirun" not in arguments:
        return [arguments]
    kept = [a for a in arguments if a not in ("-m", "--multirun")]
    choices = [
        [f"{a.split('=', 1)[0]}={v}" for v in a.split("=", 1)[1].split(",")]
        if "=" in a and "," in a and "[" not in a
        else [a]
        for a in kept
    ]
    return [list(combination) for combination in itertools.product(*choices)]


@pytest.mark.parametrize(
    ("page", "arguments"), train_commands(), ids=lambda v: " ".join(v) if isinstance(v, list) else v
)
def test_a_train_command_composes(page, arguments, tmp_path):
    for overrides in sweep(arguments):
        overrides = [o for o in overrides if not o.startswith("hydra.") and o != "--cfg"]
        try:
            cfg = compose_config(overrides, output_dir=tmp_path)
        finally:
            GlobalHydra.instance().clear()
        assert cfg.entry and cfg.model, (page, overrides)


@pytest.mark.parametrize(
    ("page", "arguments"), script_commands(), ids=lambda v: " ".join(v) if isinstance(v, list) else v
)
def test_a_script_command_names_a_script_and_options_it_has(page, arguments):
    if arguments[0] == "-m":
        target = [sys.executable, "-m", arguments[1], "--help"]
        options = arguments[2:]
    else:
        assert (ROOT / arguments[0]).is_file(), f"{page}: {arguments[0]} does not exist"
        target, options = [sys.executable, arguments[0], "--help"], arguments[1:]
    shown = subprocess.run(target, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert shown.returncode == 0, f"{page}: {' '.join(target)}: {shown.stderr[-1500:]}"
    for option in (o.split("=", 1)[0] for o in options if o.startswith("--")):
        assert option in shown.stdout, f"{page}: {' '.join(arguments[:2])} has no option {option}"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A folder holding ``OUT``: a tiny lambdarank run with its export."""
    from rankers.pipeline import train

    folder = tmp_path_factory.mktemp("docs")
    cfg = compose_config([*TINY, "model=lambdarank"], output_dir=folder / "OUT", data_dir=folder / "data")
    try:
        train(cfg)
    finally:
        GlobalHydra.instance().clear()
    shutil.copy(cfg.data.train if "train" in cfg.data else next((folder / "data").rglob("test.txt")), folder)
    return folder


@pytest.mark.parametrize(("page", "code"), blocks("python"), ids=lambda v: v if len(v) < 60 else v[:60])
def test_a_python_block_runs(page, code, finished_run):
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=finished_run, capture_output=True, text=True, timeout=300,
        env={"PYTHONPATH": str(ROOT), **dict(__import__("os").environ)},
    )  # fmt: skip
    assert done.returncode == 0, f"{page}:\n{code}\n{done.stderr[-2000:]}"
