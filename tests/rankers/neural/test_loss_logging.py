"""The training loss is logged on the steps Lightning writes and each epoch's first, not on every step: the
loggers receive exactly what logging every step gave them (the same steps, values and epoch means)."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
from hydra.utils import instantiate
from pytorch_lightning.loggers import Logger

from rankers import RankerModule


class Captured(Logger):
    """Every ``log_metrics`` call: ``(step, {name: value})``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[int, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "captured"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass

    def log_metrics(self, metrics, step=None) -> None:
        self.calls.append((step, {k: float(v) for k, v in metrics.items() if k.startswith("train/")}))


def _logged(make_cfg, tmp_path, every_step: bool, monkeypatch, *overrides: str) -> list:
    if every_step:
        monkeypatch.setattr(RankerModule, "_logs_train_loss", lambda self: True)
    cfg = make_cfg(
        "model.scorer.dropout=0.0", "trainer.max_epochs=2", "data.n_train_queries=40", "data.batch_size=4",
        "trainer.log_every_n_steps=3", *overrides, out=tmp_path / str(every_step),
    )  # fmt: skip
    pl.seed_everything(cfg.seed)
    datamodule = instantiate(cfg.data)
    datamodule.setup("fit")
    model = instantiate(cfg.model, **datamodule.model_inputs())
    logger = Captured()
    trainer = instantiate(
        cfg.trainer, logger=logger, enable_checkpointing=False, enable_progress_bar=False,
        num_sanity_val_steps=0, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(model, datamodule=datamodule)
    monkeypatch.undo()
    return [(step, values) for step, values in logger.calls if values]


@pytest.mark.parametrize("overrides", [(), ("model.step_loss_in_progress_bar=false",)])
def test_loggers_get_what_logging_every_step_gave_them(make_cfg, tmp_path, monkeypatch, overrides):
    sparse = _logged(make_cfg, tmp_path, False, monkeypatch, *overrides)
    every = _logged(make_cfg, tmp_path, True, monkeypatch, *overrides)
    assert sparse == every
    names = {name for _, values in every for name in values}
    assert {"train/loss_step", "train/loss_epoch"} <= names
    assert sum("train/loss_step" in values for _, values in every) >= 4  # several written steps, 10 an epoch
