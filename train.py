"""Train a ranker: ``python train.py model=lambdarank`` (see conf/ for every option)."""

import logging

import hydra
import torch.distributed as dist
from hydra.utils import get_method
from omegaconf import DictConfig

import rankers.resolvers  # noqa: F401  (registers the config resolvers; the pipeline loads with its entry)
from datamodules.errors import DataError
from rankers.hparams_search import in_search, objective
from rankers.quiet import quiet_third_party

log = logging.getLogger("train")

# the exit status of a run refused for its input (a usage error, as argparse's 2)
EXIT_DATA_ERROR = 2


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    quiet_third_party()
    try:
        results = get_method(cfg.entry)(cfg)  # rankers.pipeline.train unless an experiment says otherwise
    except DataError as error:
        # input that cannot be used: one line that says what and where, not a traceback from inside
        log.error("%s", error)  # on the console and in the run's log file
        if in_search(cfg):
            raise  # the search records the trial as failed and goes on (SystemExit would end the sweep)
        raise SystemExit(EXIT_DATA_ERROR) from error
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
