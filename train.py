"""Train a ranker: ``python train.py model=lambdarank`` (see conf/ for every option)."""

# ruff: noqa: E402  (kernels.mkl_vendor must act before torch is loaded: the imports below load it)
import logging

from kernels import mkl_vendor

mkl_vendor.activate()  # MKL's AVX-512 kernels on AMD CPUs (LTR_MKL_VENDOR_SHIM=0: MKL's own choice)

import hydra
import torch.distributed as dist
from hydra.utils import get_method
from omegaconf import DictConfig

import rankers.resolvers  # noqa: F401  (registers the config resolvers; the pipeline loads with its entry)
from datamodules.errors import DataError
from rankers.hparams_search import in_search, objective
from rankers.outputs import EXIT_OUTPUT_ERROR, OutputError
from rankers.quiet import quiet_third_party
from rankers.run_identity import RunConflict

log = logging.getLogger("train")

# the exit status of a run refused for its input or settings (a usage error, as argparse's 2)
EXIT_DATA_ERROR = 2
# Ctrl-C: 128 + SIGINT, as rankers.pipeline's interrupted fit
EXIT_SIGINT = 130


def user_error(error: BaseException) -> tuple[BaseException, int] | None:
    """The error a user must see and the exit status, when ``error`` is (or wraps, as Hydra's
    ``instantiate`` and Lightning's loops do) refused input, a run that would mix with another, or an
    output that could not be written; None for anything else (a bug: its traceback is wanted)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, DataError | RunConflict | FileNotFoundError):  # a named input that is not there
            return error, EXIT_DATA_ERROR
        if isinstance(error, OutputError | OSError):
            return error, EXIT_OUTPUT_ERROR
        error = error.__cause__ or error.__context__
    return None


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    quiet_third_party()
    try:
        results = get_method(cfg.entry)(cfg)  # rankers.pipeline.train unless an experiment says otherwise
    except KeyboardInterrupt:
        # Ctrl-C outside Lightning's loop (data preparation, an experiment's table): one line and 128 + 2,
        # as an interrupted fit exits; every output is written atomically, so nothing is left half-written
        log.error("interrupted by SIGINT")
        raise SystemExit(EXIT_SIGINT) from None
    except Exception as error:
        # input that cannot be used, a run that would mix with another, a full disk: one line that says
        # what and where, not a traceback from inside Hydra, Lightning or torch
        found = user_error(error)
        if found is None:
            raise
        if in_search(cfg):
            raise  # the search records the trial as failed and goes on (SystemExit would end the sweep)
        log.error("%s", found[0])  # on the console and in the run's log file
        raise SystemExit(found[1]) from error
    finally:
        # a DDP run's gloo/NCCL group is closed here, not by the interpreter's exit, where its threads
        # were seen to abort the process ("terminate called without an active exception") after a
        # successful run
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    # a value for Hydra sweepers to optimize: results.json's val entry of `optimized_metric` (hparams_search)
    return objective(cfg, results)


if __name__ == "__main__":
    main()
