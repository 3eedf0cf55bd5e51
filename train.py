"""Train a ranker: ``python train.py model=lambdarank`` (see conf/ for every option)."""

import hydra
import torch.distributed as dist
from hydra.utils import get_method
from omegaconf import DictConfig

import rankers.pipeline  # noqa: F401  (registers the config resolvers)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    try:
        results = get_method(cfg.entry)(cfg)  # rankers.pipeline.train unless an experiment says otherwise
    finally:
        # a DDP run's gloo/NCCL group is closed here, not by the interpreter's exit, where its threads
        # were seen to abort the process ("terminate called without an active exception") after a
        # successful run
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    # a value for Hydra sweepers to optimize
    val = results.get("val", {}) if isinstance(results, dict) else {}
    return val.get("ndcg@10", val.get("rank_loss"))


if __name__ == "__main__":
    main()
