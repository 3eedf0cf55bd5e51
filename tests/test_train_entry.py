"""train.py's entry point (issue 41, case 5): refused input wrapped by Hydra's instantiate (or by any
library) still ends in one line and exit 2; an output that cannot be written in one line and exit 74."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hydra.errors import InstantiationException

import train
from datamodules.ratings_io import RatingsFormatError
from rankers.outputs import EXIT_OUTPUT_ERROR, OutputError
from rankers.run_identity import RunConflict
from tests.conftest import ROOT


def _wrapped(inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except Exception as error:
            raise InstantiationException("Error in call to target 'x.y':\n" + repr(error)) from error
    except InstantiationException as outer:
        return outer


@pytest.mark.parametrize(
    ("inner", "code"),
    [
        (RatingsFormatError("r.inter: line 3: bad rating"), train.EXIT_DATA_ERROR),
        (RunConflict("refusing to resume"), train.EXIT_DATA_ERROR),
        (OutputError("checkpoint", "/x/last.ckpt", OSError(28, "No space left on device")), EXIT_OUTPUT_ERROR),
        (OSError(13, "Permission denied", "/x"), EXIT_OUTPUT_ERROR),
        (FileNotFoundError("LETOR file not found: /x/train.txt"), train.EXIT_DATA_ERROR),
    ],
)
def test_wrapped_errors_are_unwrapped(inner, code):
    assert train.user_error(_wrapped(inner)) == (inner, code)
    assert train.user_error(inner) == (inner, code)


def test_a_bug_keeps_its_traceback():
    assert train.user_error(_wrapped(KeyError("x"))) is None


@pytest.mark.slow  # a train.py process: ~15 s on the shared 2-core machine
def test_a_ratings_file_refused_inside_instantiate_ends_in_one_line_and_exit_2(tmp_path):
    ratings = tmp_path / "r.inter"
    ratings.write_text("user_id:token\titem_id:token\trating:float\n" + "u1\ti1\t3\n" * 3)
    command = ["train.py", "experiment=yu2005_cor", f"data.path={ratings}", f"hydra.run.dir={tmp_path / 'out'}"]
    done = subprocess.run(
        [sys.executable, *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == train.EXIT_DATA_ERROR, done.stderr[-2000:]
    errors = [line for line in (done.stdout + done.stderr).splitlines() if "ERROR" in line or "Error" in line]
    assert len(errors) == 1 and str(ratings) in errors[0] and "Traceback" not in done.stderr
