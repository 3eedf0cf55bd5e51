"""Train a ranker: ``python train.py model=lambdarank`` (see conf/ for every option)."""

import hydra
from omegaconf import DictConfig

from rankers.pipeline import train


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    results = train(cfg)
    # a value for Hydra sweepers to optimize
    return results.get("val", {}).get("ndcg@10")


if __name__ == "__main__":
    main()
