"""model=gp_preference end to end: fit under train.py on tiny LETOR data, the subsample counts in
results.json, and the exported scorers reproducing the module's scores (TorchScript, ONNX, rankers.score)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.utils import instantiate

from datamodules.letor_io import read_letor
from rankers import pipeline
from rankers.gp import SemiSupervisedKernel, fit, gaussian_kernel, posterior_latent, rbf
from rankers.gp.module import GPPreferenceModule, GPScorer, within_query_pairs
from rankers.score import score_file

DATA = [
    "data.n_train_queries=40",
    "data.n_val_queries=8",
    "data.n_test_queries=8",
    "data.mean_docs=10",
    "data.num_features=6",
    "trainer.log_every_n_steps=1",
    "callbacks.progress_bar.refresh_rate=0",
]


@pytest.mark.slow
def test_fit_report_and_export(make_cfg, tmp_path):
    out = tmp_path / "run"
    cfg = make_cfg(
        "model=gp_preference",
        "model.max_items=60",
        "model.max_pairs=120",
        "model.optimize_steps=2",
        *DATA,
        out=out,
        tiny=False,
    )
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    fitted = pipeline.fit(cfg, datamodule, out)
    results = pipeline.report(cfg, fitted, datamodule, out)
    saved = json.loads((out / "results.json").read_text())
    counts = saved["gp"]
    assert counts["items"] <= 60 and counts["pairs"] <= 120 and counts["queries_used"] <= counts["queries"] == 40
    assert counts["pairs"] == min(120, counts["pairs_in_used_queries"])
    assert np.isfinite(counts["log_evidence"]) and counts["sigma"] > 0
    assert results["test"]["ndcg@10"] > saved["test_random_scores"]["ndcg@10"]
    # the exports score a LETOR file as the module does (normalization inside)
    test_file = Path(datamodule.paths["test"])  # this run's own file (the data dir holds other sets too)
    letor = read_letor(test_file)
    model = fitted.model.cpu().eval()
    for key in ("torchscript", "onnx"):
        scores, data = score_file(saved["export"][key], test_file)
        for start, stop in zip(data.offsets[:-1], data.offsets[1:]):
            features = torch.from_numpy(letor.features[start:stop]).float()[None]
            with torch.no_grad():
                expected = model(features, torch.ones(features.shape[:2], dtype=torch.bool))[0]
            np.testing.assert_allclose(scores[start:stop], expected.numpy(), atol=2e-5, rtol=1e-4)


def test_the_scorer_is_the_kernel_expansion():
    g = torch.Generator().manual_seed(0)
    items, alpha = torch.randn(7, 3, generator=g), torch.randn(7, generator=g)
    kappa = torch.tensor([0.5, 1.0, 2.0])
    scorer = GPScorer(items, alpha, gaussian_kernel(0.5, kappa))
    x = torch.randn(1, 4, 3, generator=g)
    expected = torch.zeros(4)
    for row in range(4):
        for i in range(7):
            expected[row] += alpha[i] * 0.5 * torch.exp(-0.5 * (kappa * (x[0, row] - items[i]) ** 2).sum())
    torch.testing.assert_close(scorer(x)[0], expected, atol=1e-6, rtol=1e-5)
    scripted = torch.jit.script(scorer)
    torch.testing.assert_close(scripted(x), scorer(x))


def test_within_query_pairs_prefer_the_higher_label():
    i, j = within_query_pairs(torch.tensor([2.0, 0.0, 1.0, 2.0]))
    assert sorted(zip(i.tolist(), j.tolist())) == [(0, 1), (0, 2), (2, 1), (3, 1), (3, 2)]


def _queries(seed: int = 0, count: int = 6, length: int = 8, features: int = 3):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        x = torch.randn(length, features, generator=g)
        labels = (x[:, 0] + 0.3 * torch.randn(length, generator=g) > 0).float() + (x[:, 1] > 1).float()
        out.append((x, labels))
    return out


@pytest.mark.parametrize("graph", [None, 3])
def test_fit_queries_scores_the_posterior_mean_of_its_prior(graph):
    """The module's scorer is the posterior mean under its prior (plain or graph-deformed), computed
    here independently with SemiSupervisedKernel and posterior_latent."""
    module = GPPreferenceModule(
        n_features=3, max_items=40, max_pairs=60, kappa=0.5, sigma=0.3, optimize=False, graph_neighbours=graph
    )
    module.fit_queries(_queries())
    counts = module.counts
    assert counts["documents_in_used_queries"] <= 40 and counts["pairs"] <= 60
    n = int(module.n_items)
    cloud = module.items[:n].double()
    assert n == (counts["documents_in_used_queries"] if graph else counts["items"])

    def base(a, b):
        return rbf(a, b, 1.0, 0.5)

    kernel = base if graph is None else SemiSupervisedKernel(base, cloud, neighbours=graph)
    # the pairs the module drew, recovered from its subsample by the same seeded steps
    x, v, u = module._training_pairs(_queries())
    assert torch.allclose(x, cloud.double(), atol=1e-6)
    state = fit(kernel(x, x), v, u, 0.3)
    new = torch.randn(5, 3, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    mean, _, _ = posterior_latent(state, kernel(x, new), torch.ones(5, dtype=torch.float64), v[None], u[None])
    scores = module.scorer()(new.float()[None])[0]
    torch.testing.assert_close(scores.double(), mean[0], atol=1e-5, rtol=1e-4)
