"""model.epochs_without_validation=cv: the epoch count chosen by K-fold cross-validation on the training queries."""

from __future__ import annotations

import numpy as np
import pytest
import pytorch_lightning as pl
from hydra.utils import instantiate

from datamodules.letor_io import read_letor
from rankers.callbacks import EpochSeed
from rankers.epoch_selection import best_epoch, query_folds
from rankers.neural.module import RankerModule

SMALL = ["model.scorer.hidden=[8]", "model.scorer.members=2", "callbacks.progress_bar.refresh_rate=0"]
SELECTION = ["model.epoch_selection.folds=2", "model.epoch_selection.max_epochs=3", "trainer.max_epochs=5"]


@pytest.fixture
def letor_files(tmp_path):
    from datamodules.synthetic import generate_letor

    return generate_letor(tmp_path / "data", n_queries={"train": 24, "val": 4, "test": 6}, num_features=5, mean_docs=6)


def ranknet_listnet(letor_files, *extra: str) -> list[str]:
    files = [f"data.train={letor_files['train']}", f"data.test={letor_files['test']}"]
    return ["model=ranknet_listnet", "data=letor", *files, *SMALL, *extra]


def test_query_folds_hold_every_query_out_exactly_once(letor_files):
    data = read_letor(letor_files["train"])
    pairs = query_folds(data, 5, seed=3)
    held_out = np.concatenate([fold.qids[fold.offsets[:-1]] for _, fold in pairs])
    assert sorted(held_out.tolist()) == sorted(data.qids[data.offsets[:-1]].tolist())
    for fit_part, fold in pairs:
        assert not set(fit_part.qids.tolist()) & set(fold.qids.tolist())
        assert fit_part.num_queries + fold.num_queries == data.num_queries
    assert {fold.num_queries for _, fold in pairs} <= {4, 5}  # 24 queries: near-equal folds
    with pytest.raises(ValueError, match="folds must be >= 2"):
        query_folds(data, 1, seed=3)
    with pytest.raises(ValueError, match="24 training queries, too few for 30 folds"):
        query_folds(data, 30, seed=3)


def test_best_epoch_follows_the_metric_direction_and_keeps_the_earliest_of_equals():
    curve = np.array([0.2, 0.5, 0.5, 0.4])
    assert best_epoch(curve, "val/ndcg@10") == 2
    assert best_epoch(curve, "val/loss") == 1


def reference_curve(cfg, letor_files, folds: int, max_epochs: int) -> list[float]:
    """The pooled curve the slow way: a separate fit of e epochs per fold and e, then its validation."""
    pairs = query_folds(read_letor(letor_files["train"]), folds, cfg.seed)
    total = sum(fold.num_queries for _, fold in pairs)
    curve = []
    for epochs in range(1, max_epochs + 1):
        pooled = 0.0
        for fit_part, fold in pairs:
            pl.seed_everything(cfg.seed, workers=True)
            data = instantiate(cfg.data)
            data.use_splits({"train": fit_part, "val": fold})
            model = instantiate(cfg.model, **data.model_inputs())
            trainer = pl.Trainer(
                max_epochs=epochs,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                limit_val_batches=0,
                deterministic=True,
                callbacks=[EpochSeed(cfg.seed)],
            )
            trainer.fit(model, datamodule=data)
            trainer.limit_val_batches = 1.0
            value = trainer.validate(model, datamodule=data, verbose=False)[0]["val/ndcg@10"]
            pooled += value * fold.num_queries / total
        curve.append(pooled)
    return curve


def test_the_selection_pools_the_folds_curves_and_the_final_fit_trains_the_chosen_count(
    make_cfg, letor_files, tmp_path
):
    from rankers.pipeline import train

    cfg = make_cfg(*ranknet_listnet(letor_files, "model.epochs_without_validation=cv", *SELECTION), tiny=False)
    results = train(cfg)
    selection = results["epoch_selection"]
    assert selection["folds"] == 2 and len(selection["curve"]) == 3 and selection["monitor"] == "val/ndcg@10"
    assert selection["epochs"] == int(np.argmax(selection["curve"])) + 1
    assert results["epochs"] == selection["epochs"] and results["val"] == {}
    assert cfg.model.epochs_without_validation == selection["epochs"]  # what the logs and checkpoint record

    reference = make_cfg(
        *ranknet_listnet(letor_files, "model.epochs_without_validation=null", *SELECTION),
        out=tmp_path / "reference",
        tiny=False,
    )
    np.testing.assert_allclose(selection["curve"], reference_curve(reference, letor_files, 2, 3), atol=1e-5)

    # the final fit is the one an integer setting of the chosen count makes (re-seeded after the selection)
    fixed = make_cfg(
        *ranknet_listnet(letor_files, f"model.epochs_without_validation={selection['epochs']}", *SELECTION),
        out=tmp_path / "fixed",
        tiny=False,
    )
    assert train(fixed)["test"] == results["test"]


def test_with_a_validation_file_early_stopping_decides_and_nothing_is_selected(make_cfg, letor_files):
    from rankers.pipeline import train

    overrides = ranknet_listnet(letor_files, "model.epochs_without_validation=cv", f"data.val={letor_files['val']}")
    results = train(make_cfg(*overrides, "trainer.max_epochs=2", tiny=False))
    assert "epoch_selection" not in results and results["val"]


def test_cv_is_refused_under_ddp_and_in_a_direct_fit(make_cfg, letor_files):
    from rankers.pipeline import train

    overrides = ranknet_listnet(letor_files, "model.epochs_without_validation=cv", "trainer=ddp")
    with pytest.raises(ValueError, match=r"trainer\.devices=1"):
        train(make_cfg(*overrides, tiny=False))

    # a module fitted directly, outside train.py, cannot choose: it says so instead of training on
    cfg = make_cfg(*ranknet_listnet(letor_files, "model.epochs_without_validation=cv"), tiny=False)
    data = instantiate(cfg.data)
    data.setup("fit")
    model: RankerModule = instantiate(cfg.model, **data.model_inputs())
    trainer = pl.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, limit_val_batches=0)
    with pytest.raises(ValueError, match=r"'cv' is resolved by train\.py"):
        trainer.fit(model, datamodule=data)
