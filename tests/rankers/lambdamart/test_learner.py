"""model=lambdamart as a learner: per-round scalars, the stop at a safe point, state_dict round trip,
resume continuing the engine's rounds, and train.py end to end (results, export equal to the engine)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rankers.lambdamart.learner import LambdaMART
from rankers.learner import QuerySplit

pytest.importorskip("lightgbm")
pytest.importorskip("xgboost")


class _Log:
    def __init__(self, stop_after: int | None = None) -> None:
        self.scalars: list[tuple[str, float, int]] = []
        self.stop_after = stop_after

    def scalar(self, name: str, value: float, step: int) -> None:
        self.scalars.append((name, value, step))

    def should_stop(self) -> bool:
        rounds = [s for n, _, s in self.scalars if n == "train/rounds"]
        return self.stop_after is not None and bool(rounds) and rounds[-1] >= self.stop_after


def _split(seed: int, queries: int = 40, length: int = 20, f: int = 5) -> QuerySplit:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(queries * length, f, generator=g)
    y = (x[:, 0] + 0.5 * torch.randn(len(x), generator=g)).clamp(0, 2).round()
    return QuerySplit(x, y, torch.arange(0, queries * length + 1, length))


@pytest.mark.parametrize("engine", ["lightgbm", "xgboost"])
def test_stop_state_round_trip_and_resume(engine: str) -> None:
    train, val = _split(0), _split(1, 15)
    learner = LambdaMART(n_features=5, engine=engine, n_estimators=12, early_stopping_rounds=None)
    log = _Log(stop_after=4)
    learner.fit(train, val, log=log)
    assert learner.model.trained_rounds == 4  # stopped between rounds, at the log's request
    assert [s for n, _, s in log.scalars if n == "val/ndcg@10"] == [1, 2, 3, 4]
    state = learner.state_dict()
    resumed = LambdaMART(n_features=5, engine=engine, n_estimators=12, early_stopping_rounds=None)
    resumed.load_state_dict(state)
    x = val.features
    assert torch.equal(resumed(x), learner(x))
    resumed.fit(train, None, log=_Log())  # continues: rounds 5..12 (init_model)
    assert resumed.model.trained_rounds == resumed.model.rounds == 12
    straight = LambdaMART(n_features=5, engine=engine, n_estimators=12)
    straight.fit(train, None, log=_Log())
    torch.testing.assert_close(resumed(x), straight(x), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="engine"):
        LambdaMART(n_features=5, engine="xgboost" if engine == "lightgbm" else "lightgbm").load_state_dict(state)


def test_train_py_end_to_end_exports_the_engines_scores(tmp_path) -> None:
    from rankers.pipeline import compose_config, train

    rng = np.random.default_rng(0)
    lines = {"train": [], "test": []}
    for split, n in (("train", 50), ("test", 15)):
        for q in range(n):
            for _ in range(12):
                x = rng.normal(size=8)
                label = int(np.clip(round(x[0] + rng.normal() * 0.5), 0, 3))
                values = " ".join(f"{i + 1}:{v:.4f}" for i, v in enumerate(x))
                lines[split].append(f"{label} qid:{q} {values}")
    for split, text in lines.items():
        (tmp_path / f"{split}.txt").write_text("\n".join(text) + "\n")
    cfg = compose_config(
        ["model=lambdamart", "data=letor", f"data.train={tmp_path}/train.txt", f"data.test={tmp_path}/test.txt"],
        output_dir=tmp_path / "run",
        data_dir=tmp_path / "cache",
    )
    results = train(cfg)
    assert results["rounds_kept"] == 100 and results["test"]["ndcg@10"] > 0.5
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["engine"] == "lightgbm"
    from datamodules.letor_io import read_letor

    test = read_letor(tmp_path / "test.txt")
    scripted = torch.jit.load(str(tmp_path / "run" / "export" / "scorer.pt"))
    ours = scripted(torch.from_numpy(test.features)).numpy()
    learner = LambdaMART(n_features=8)
    learner.load_state_dict(
        torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    )
    np.testing.assert_allclose(ours, learner.engine_predict(test.features), rtol=0, atol=1e-5)
