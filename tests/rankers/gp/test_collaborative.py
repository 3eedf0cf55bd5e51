"""Collaborative EM (CGPR/CGPOR) against the dense formulas of the paper, the section-4 ratings
features against a slow loop, bad input, and the experiment (experiments.yu2005) end to end on a small
synthetic file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from datamodules.collaborative_ratings import build_collaborative_ratings
from datamodules.errors import DataError
from experiments.yu2005 import errors, tables
from rankers.gp.collaborative import MODELS, ModelOptions, PriorState, Split, fit_predict, gather_kernel, observed
from rankers.gp.inference import site_posterior
from rankers.gp.likelihoods import gaussian_sites

D = torch.float64


def test_prior_update_is_equation_3():
    """h and Sigma after one M-step, from the [m, n] columns, equal the paper's eq. (3) computed
    with each task's full posterior over all m items (dense inverses, one task at a time)."""
    g = torch.Generator().manual_seed(0)
    m, n, T, noise = 7, 4, 3, 0.3
    a = torch.randn(m, m, generator=g, dtype=D)
    sigma = a @ a.T / m + 0.5 * torch.eye(m, dtype=D)
    h = torch.randn(m, generator=g, dtype=D)
    labels = torch.tensor([[0, -1, 2, 1], [-1, -1, 1, -1], [2, 2, 0, 1]])
    index, valid = observed(labels)
    y = labels.gather(1, index).clamp_min(0).to(D)
    prior = PriorState(sigma[:, :n], sigma.diagonal())
    prior.mean = h.clone()
    kernel = gather_kernel(sigma[:n, :n], index, valid)
    post = site_posterior(kernel, torch.where(valid, h[index], torch.zeros((), dtype=D)),
                          *gaussian_sites(y, valid, torch.full((T,), noise**2, dtype=D)))  # fmt: skip
    prior.update(post, index, valid)
    means, covariances = [], []
    for t in range(T):
        o = torch.nonzero(labels[t] >= 0)[:, 0]
        gain = sigma[:, o] @ torch.linalg.inv(sigma[o][:, o] + noise**2 * torch.eye(len(o), dtype=D))
        means.append(h + gain @ (labels[t, o].to(D) - h[o]))
        covariances.append(sigma - gain @ sigma[o, :])
    h_new = torch.stack(means).mean(0)
    sigma_new = sum(torch.outer(f - h_new, f - h_new) + c for f, c in zip(means, covariances, strict=True)) / T
    torch.testing.assert_close(prior.mean, h_new)
    torch.testing.assert_close(prior.cols, sigma_new[:, :n])
    torch.testing.assert_close(prior.diag, sigma_new.diagonal())


def _write(path, rows):
    path.write_text("".join(f"{u}\t{i}\t{r}\n" for u, i, r in rows))
    return path


def test_ratings_features_as_section_4(tmp_path):
    rng = np.random.default_rng(1)
    rows = [(f"u{u}", f"i{i}", int(rng.integers(1, 6))) for u in range(2) for i in range(5)]  # the tasks
    rows += [(f"u{u}", f"i{i}", int(rng.integers(1, 6))) for u in range(2, 6) for i in range(4) if rng.random() < 0.7]
    # i4: only the task users rated it -> no features
    rows += [("c", f"i{i}", 4) for i in range(4)]  # a feature user rating everything alike: a constant column
    data = build_collaborative_ratings(_write(tmp_path / "r.tsv", rows), n_tasks=2, min_item_ratings=1,
                                       min_user_ratings=1, min_items=1)  # fmt: skip
    assert data.statistics["items_without_features"] == 1 and data.statistics["constant_feature_users"] == 1
    # the slow reference: item vectors of the other users' mean-centred ratings, cosine between them
    table_ = {(u, i): r for u, i, r in rows}
    counts = {}
    for u, _i, _r in rows:
        counts[u] = counts.get(u, 0) + 1
    tasks = list(data.task_users)
    assert tasks == sorted(counts, key=lambda u: (-counts[u], u))[:2]
    features = [u for u in sorted(counts) if u not in tasks]
    means = {u: np.mean([r for (v, _i), r in table_.items() if v == u]) for u in features}
    vectors = np.array([[table_[(u, i)] - means[u] if (u, i) in table_ else 0.0 for u in features]
                        for i in data.item_ids])  # fmt: skip
    norms = np.linalg.norm(vectors, axis=1)
    expected = (vectors @ vectors.T) / np.outer(np.maximum(norms, 1e-300), np.maximum(norms, 1e-300))
    empty = norms < 1e-12
    expected[empty, :] = 0.0
    expected[:, empty] = 0.0
    expected[empty, empty] = 1.0
    got = data.kernel(np.arange(data.n_items), np.arange(data.n_items))
    np.testing.assert_allclose(got, expected, atol=1e-12)
    for t, user in enumerate(tasks):
        for k, item in enumerate(data.item_ids):
            assert data.labels[t, k] == (table_[(user, item)] - 1 if (user, item) in table_ else -1)


def test_too_few_users_is_a_data_error(tmp_path):
    path = _write(tmp_path / "r.tsv", [(u, i, 1 + (u + i) % 5) for u in range(3) for i in range(4)])
    with pytest.raises(DataError, match="task users"):
        build_collaborative_ratings(path, n_tasks=3, min_item_ratings=1, min_user_ratings=1, min_items=1)


def _synthetic_ratings(path, users=70, items=90, seed=0):
    """Low-rank ratings on 5 grades: a shared item mean plus rank-2 user tastes, 50% observed."""
    rng = np.random.default_rng(seed)
    item_mean = rng.normal(0, 1, items)
    taste = rng.normal(0, 0.6, (users, 2)) @ rng.normal(0, 1, (2, items))
    scores = 3 + item_mean + taste + rng.normal(0, 0.5, (users, items))
    grades = np.clip(np.rint(scores), 1, 5).astype(int)
    rows = [(u, i, grades[u, i]) for u in range(users) for i in range(items) if rng.random() < 0.5]
    return _write(path, rows)


@pytest.mark.parametrize("model", MODELS)
def test_task_without_ratings_gives_finite_predictions(tmp_path, model):
    data = build_collaborative_ratings(_synthetic_ratings(tmp_path / "r.tsv"), n_tasks=8, min_item_ratings=1,
                                       min_user_ratings=1, min_items=1)  # fmt: skip
    items = np.arange(data.n_items)
    cols = torch.from_numpy(data.kernel(items, items[:30]))
    labels = torch.from_numpy(data.labels).clone()
    labels[3, :30] = -1  # task 3 rated none of the training items
    split = Split(cols, torch.ones(data.n_items, dtype=D), labels[:, :30], labels[:, 30:], data.n_ranks)
    result = fit_predict(split, model, ModelOptions(em_iters=2))
    rated = split.test_labels >= 0
    assert ((result.predictions >= 0) == rated).all()
    assert result.predictions.max() < data.n_ranks
    mae, zero_one = errors(result.predictions, split.test_labels)
    assert np.isfinite(mae) and 0 <= zero_one <= 1
    assert result.history["tasks_without_labels"] == 1


def test_experiment_end_to_end(tmp_path):
    data = build_collaborative_ratings(_synthetic_ratings(tmp_path / "r.tsv"), n_tasks=20, min_item_ratings=1,
                                       min_user_ratings=1, min_items=1)  # fmt: skip
    results = tables(data, train_sizes=(20, 40), trials=2, em_iters=2, out_dir=tmp_path)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "yu2005_cor.png").stat().st_size > 1000
    assert set(saved["table"]) == set(MODELS)
    for model in MODELS:
        for n in ("20", "40"):
            cell = saved["table"][model][n]
            assert 0 <= cell["zero_one"] <= 1 and 0 <= cell["mae"] < 4 and len(cell["mae_per_trial"]) == 2
    assert results["seconds"] > 0 and set(results["fit_seconds"]) == set(MODELS)
