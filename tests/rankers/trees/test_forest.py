"""The random forest: query bags, the tensorized trees against sklearn's predict and a slow loop,
NaN and infinities, and ``model=random_forest`` under ``train.py`` with its exports."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime
import pytest
import torch
from sklearn.tree import DecisionTreeRegressor

from rankers.pipeline import train
from rankers.score import score_file
from rankers.trees.forest import (
    TreeEnsembleScorer,
    bootstrap_weights,
    fit_forest,
    forest_scores_numpy,
    pack_trees,
)


def _queries(seed: int = 0, n_queries: int = 30, n_features: int = 6):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 12, n_queries)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    features = rng.normal(size=(offsets[-1], n_features)).astype(np.float32)
    features[:, 0] = np.round(features[:, 0])  # ties, as LETOR features have
    labels = np.clip(np.round(features[:, 1] + 0.5 * rng.normal(size=offsets[-1]) + 1), 0, 4)
    return features, labels, offsets


def _slow_tree(tree: DecisionTreeRegressor, x: np.ndarray) -> float:
    """One document down one sklearn tree, node by node (NaN per missing_go_to_left)."""
    t, node = tree.tree_, 0
    while t.children_left[node] >= 0:
        value = float(x[t.feature[node]])
        left = bool(t.missing_go_to_left[node]) if np.isnan(value) else value <= t.threshold[node]
        node = t.children_left[node] if left else t.children_right[node]
    return float(t.value[node, 0, 0])


def test_query_bags_keep_queries_whole_and_draw_as_many_as_asked():
    offsets = np.array([0, 3, 4, 9, 10])
    rng = np.random.default_rng(1)
    for _ in range(20):
        w = bootstrap_weights(offsets, rng, kind="queries", rate=1.0)
        per_query = np.split(w, offsets[1:-1])
        assert all(len(set(q.tolist())) == 1 for q in per_query)  # a query's documents share its count
        assert sum(q[0] for q in per_query) == 4  # Q queries drawn with replacement
    assert bootstrap_weights(offsets, rng, kind="documents", rate=0.5).sum() == 5
    assert bootstrap_weights(offsets, rng, kind="none").tolist() == [1.0] * 10
    with pytest.raises(ValueError, match="bootstrap"):
        bootstrap_weights(offsets, rng, kind="pairs")


def test_weights_grow_the_tree_the_duplicated_queries_grow():
    features, labels, offsets = _queries()
    w = bootstrap_weights(offsets, np.random.default_rng(3))
    rows = np.repeat(np.arange(len(labels)), w.astype(int))
    weighted = DecisionTreeRegressor(max_leaf_nodes=12, random_state=0).fit(features, labels, sample_weight=w)
    duplicated = DecisionTreeRegressor(max_leaf_nodes=12, random_state=0).fit(features[rows], labels[rows])
    np.testing.assert_allclose(weighted.predict(features), duplicated.predict(features), atol=1e-12)
    # a leaf outputs the mean label of its (bagged) documents, as MART's one tree does
    leaves = duplicated.apply(features[rows])
    for leaf in np.unique(leaves):
        assert duplicated.tree_.value[leaf, 0, 0] == pytest.approx(labels[rows][leaves == leaf].mean())


def test_forest_trees_respect_the_leaf_cap_and_the_scorer_equals_sklearn_and_a_slow_loop():
    features, labels, offsets = _queries(n_queries=60)
    trees = fit_forest(features, labels, offsets, n_trees=25, max_leaves=10, feature_rate=0.5, seed=4, n_jobs=2)
    assert len(trees) == 25 and max(t.get_n_leaves() for t in trees) <= 10
    assert len({t.tree_.node_count for t in trees} | {tuple(t.tree_.feature[:3]) for t in trees}) > 2  # not one tree
    scorer = TreeEnsembleScorer.from_arrays(pack_trees(trees, 2 * 10 - 1), features.shape[1])
    x = np.random.default_rng(5).normal(size=(200, features.shape[1])).astype(np.float32)
    x[:20] = features[:20]  # values equal to a threshold's neighbours
    with torch.no_grad():
        ours = scorer(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ours, forest_scores_numpy(trees, x), atol=1e-5)
    slow = [np.mean([_slow_tree(t, row) for t in trees]) for row in x[:15]]
    np.testing.assert_allclose(ours[:15], slow, atol=1e-5)
    # batched [B, L, F] inputs score each document alone
    with torch.no_grad():
        torch.testing.assert_close(scorer(torch.from_numpy(x).view(10, 20, -1)), torch.from_numpy(ours).view(10, 20))


def test_a_float64_threshold_between_adjacent_float32_values_splits_them_as_sklearn_does():
    a = np.nextafter(np.float32(1000.0), np.float32(2000.0))  # an odd mantissa: the midpoint rounds to even, b
    b = np.nextafter(a, np.float32(2000.0))
    x = np.array([[a], [b], [a], [b]], np.float32)
    tree = DecisionTreeRegressor(max_leaf_nodes=2).fit(x, np.array([0.0, 1.0, 0.0, 1.0]))
    assert np.float32(tree.tree_.threshold[0]) == b  # float32 rounding alone would send b left
    scorer = TreeEnsembleScorer.from_arrays(pack_trees([tree]), 1)
    with torch.no_grad():
        assert scorer(torch.from_numpy(x)).tolist() == tree.predict(x).tolist() == [0.0, 1.0, 0.0, 1.0]


def test_nan_goes_where_sklearn_sends_it_and_infinities_follow_the_comparison():
    features, labels, offsets = _queries(seed=7)
    trees = fit_forest(features, labels, offsets, n_trees=15, max_leaves=8, seed=0, n_jobs=1)
    scorer = TreeEnsembleScorer.from_arrays(pack_trees(trees), features.shape[1])
    rng = np.random.default_rng(8)
    x = rng.normal(size=(300, features.shape[1])).astype(np.float32)
    x[rng.random(x.shape) < 0.3] = np.nan
    x[0] = np.nan  # every feature missing
    with torch.no_grad():
        ours = scorer(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ours, forest_scores_numpy(trees, x), atol=1e-5)
    np.testing.assert_allclose(ours[:10], [np.mean([_slow_tree(t, r) for t in trees]) for r in x[:10]], atol=1e-5)
    # sklearn refuses infinities; +inf is above every threshold (right), -inf below (left): as the largest
    # and the smallest finite float32
    big = np.finfo(np.float32).max
    inf = np.array([[np.inf] * 6, [-np.inf] * 6], np.float32)
    with torch.no_grad():
        ours = scorer(torch.from_numpy(inf)).numpy()
    np.testing.assert_allclose(ours, forest_scores_numpy(trees, np.array([[big] * 6, [-big] * 6])), atol=1e-5)


SYNTHETIC = [
    "data=synthetic",
    "data.n_train_queries=40",
    "data.n_val_queries=10",
    "data.n_test_queries=10",
    "data.mean_docs=10",
    "data.num_features=5",
    "model=random_forest",
    "model.n_trees=20",
    "model.max_leaves=16",
    "callbacks.progress_bar.refresh_rate=0",
]


def test_train_py_fits_once_checkpoints_and_exports_the_same_scores(make_cfg, tmp_path):
    from datamodules.letor_io import LetorData, write_letor

    run = tmp_path / "run"
    results = train(make_cfg(*SYNTHETIC, out=run, tiny=False))
    assert results["epochs"] == 1 and results["test"]["ndcg@10"] > results["test_random_scores"]["ndcg@10"]
    meta = json.loads((run / "export" / "meta.json").read_text())
    assert meta["model"] == "random_forest" and meta["trees"] == 20
    # the exports reproduce the checkpointed model's scores on raw features, NaN included
    from rankers.trees.module import RandomForestModule

    model = RandomForestModule.load_from_checkpoint(results["best_checkpoint"])
    scripted = torch.jit.load(str(run / "export" / "scorer.pt"))
    session = onnxruntime.InferenceSession(str(run / "export" / "scorer.onnx"))
    raw = torch.randn(9, 5)
    raw[2, 1] = float("nan")
    expected = model(raw[None])[0]
    torch.testing.assert_close(scripted(raw), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.from_numpy(session.run(None, {"features": raw.numpy()})[0]), expected)
    # python -m rankers.score reads it
    features = raw.nan_to_num().numpy()
    path = tmp_path / "q.txt"
    offsets = np.array([0, 4, 9])
    labels, qids = (np.arange(9) % 3).astype(np.float32), np.repeat([1, 2], [4, 5])
    write_letor(path, LetorData(features, labels, qids, offsets, str(path)))
    scores, _ = score_file(run / "export" / "scorer.onnx", path)
    np.testing.assert_allclose(scores, model(torch.from_numpy(features)[None])[0].numpy(), atol=1e-5)


def test_random_forest_is_a_model_auto_candidate_and_on_its_default_list():
    from hydra import compose, initialize_config_dir

    from rankers.pipeline import ROOT
    from rankers.selection.cv import parse_candidate
    from rankers.selection.run import compose_candidate

    model, _ = compose_candidate(parse_candidate("random_forest model.n_trees=5"))
    assert model._target_ == "rankers.trees.module.RandomForestModule" and model.n_trees == 5
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        assert "random_forest" in compose("config", overrides=["model=auto"]).model.candidates
