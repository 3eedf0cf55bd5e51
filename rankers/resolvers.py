"""The OmegaConf resolvers conf/ uses, registered on import. A light module of its own so that
``train.py`` registers them without importing the pipeline (and with it Lightning), which
experiments such as Harrington's Table 1 never use: about two seconds of every such run's start."""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf


def first_given(*values: Any) -> Any:
    """The first value that is not null (conf/model/pairwise_perceptron.yaml: `variant=` or the model's own)."""
    return next((value for value in values if value is not None), None)


def monitor_mode(name: str) -> str:
    """``min`` or ``max``: the direction the monitored metric declares (``metrics.monitor_mode``, imported
    when a config first asks, since ``metrics`` loads torchmetrics)."""
    from metrics import monitor_mode as declared_mode

    return declared_mode(name)


def batch_scaled_lr(lr: float, base_batch: int, batch: int, power: float = 1.0) -> float:
    """``lr * (batch / base_batch) ** power``: the learning rate of a ``batch``-query batch from the one tuned
    at ``base_batch`` (conf/trainer/cpu_fast.yaml, gpu_fast.yaml), for the same number of epochs (so fewer
    steps). ``bench/train_throughput.py --quality``, 4x the batch, validation ndcg@10 against the base batch
    on three kinds of data: power 0.5 lost 0.14, power 1 (linear) 0.007-0.009 after 3 epochs (0.023 on
    LETOR-like lists after 6), power 1.5 within the seeds' spread on all three (trainer=cpu_fast's)."""
    return float(lr) * (int(batch) / int(base_batch)) ** float(power)


def search_direction(name: str) -> str:
    """``maximize`` or ``minimize``: Optuna's direction for the metric a hyperparameter search optimizes
    (conf/hparams_search/optuna.yaml), the direction the metric declares."""
    return "maximize" if monitor_mode(name) == "max" else "minimize"


# conf/callbacks: `mode: ${monitor_mode:${model.monitor}}`, the direction the metric declares
OmegaConf.register_new_resolver("monitor_mode", monitor_mode, replace=True)
OmegaConf.register_new_resolver("search_direction", search_direction, replace=True)
OmegaConf.register_new_resolver("first_given", first_given, replace=True)
OmegaConf.register_new_resolver("batch_scaled_lr", batch_scaled_lr, replace=True)
