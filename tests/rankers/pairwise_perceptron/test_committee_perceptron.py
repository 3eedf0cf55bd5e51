"""model=committee_perceptron / pairwise_perceptron under train.py, its export, and the fused CPU loop."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
import torch
from hydra.utils import instantiate
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from datamodules.feature_maps import QuantileThresholds
from datamodules.letor_io import read_letor
from kernels import pairwise_perceptron_cpu
from metrics.functional import ndcg
from rankers.pairwise_perceptron.module import PairwisePerceptronModule, RankVoteScorer
from rankers.pairwise_perceptron.perceptron import PairwisePerceptron, pass_orders, preference_pairs, rank_vote_scores
from rankers.pipeline import train

DATA = [
    "data.n_train_queries=60",
    "data.n_val_queries=20",
    "data.n_test_queries=20",
    "data.mean_docs=10",
    "data.num_features=6",
    "data.batch_size=16",
    "trainer.log_every_n_steps=1",
    "callbacks.progress_bar.refresh_rate=0",
]


def _scalars(run_dir) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {}
    for events in (run_dir / "tensorboard").glob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            values.setdefault(tag, []).extend(event.value for event in accumulator.Scalars(tag))
    return values


def _exported_scores(path, data) -> list[np.ndarray]:
    scorer = torch.jit.load(str(path))
    return [
        scorer(torch.from_numpy(data.features[a:b])).detach().numpy()
        for a, b in zip(data.offsets[:-1], data.offsets[1:], strict=True)
    ]


def _mean_ndcg(per_query_scores, data) -> float:
    values = [
        float(ndcg(torch.from_numpy(s)[None].float(), torch.from_numpy(data.labels[a:b])[None].float(), k=10))
        for s, a, b in zip(per_query_scores, data.offsets[:-1], data.offsets[1:], strict=True)
    ]
    return float(np.mean(values))


@pytest.mark.parametrize(("combine", "raw_columns"), [("weight", "cdf"), ("vote", "features")])
def test_committee_trains_exports_and_the_export_reproduces_the_test_metrics(make_cfg, tmp_path, combine, raw_columns):
    out = tmp_path / "run"
    cfg = make_cfg(
        "model=committee_perceptron",
        f"model.combine={combine}",
        f"model.raw_columns={raw_columns}",
        "model.committee_size=5",
        "model.epochs=2",
        *DATA,
        out=out,
        tiny=False,
    )
    results = train(cfg)
    assert results["epochs"] == 2
    assert results["test"]["ndcg@10"] > results["test_random_scores"]["ndcg@10"] + 0.05
    scalars = _scalars(out)
    assert len(scalars["val/ndcg@10"]) >= 2 and len(scalars["train/mistake_rate"]) == 2  # one point per pass
    datamodule = instantiate(cfg.data)
    datamodule.setup()
    test = read_letor(datamodule.paths["test"])
    scripted = _exported_scores(out / "export" / "scorer.pt", test)
    assert _mean_ndcg(scripted, test) == pytest.approx(results["test"]["ndcg@10"], abs=1e-5)
    session = onnxruntime.InferenceSession(str(out / "export" / "scorer.onnx"))
    for (a, b), expected in zip(zip(test.offsets[:-1], test.offsets[1:], strict=True), scripted, strict=True):
        (onnx,) = session.run(None, {"features": test.features[a:b].astype(np.float32)})
        np.testing.assert_allclose(onnx, expected, rtol=1e-5, atol=1e-5)
    # the other combination rule is exported beside it, and reproduces the module's read-out
    other = "vote" if combine == "weight" else "weight"
    # (the normalizer's kind is a constructor argument, not a buffer: pass the datamodule's)
    module = PairwisePerceptronModule.load_from_checkpoint(
        results["best_checkpoint"], normalizer=datamodule.build_normalizer()
    )
    module.readout = other
    for (a, b), exported in zip(
        zip(test.offsets[:-1], test.offsets[1:], strict=True),
        _exported_scores(out / "export" / other / "scorer.pt", test),
        strict=True,
    ):
        inside = module(torch.from_numpy(test.features[a:b])[None])[0].detach().numpy()
        np.testing.assert_allclose(exported, inside, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("variant", "feature_map"),
    [("plain", "thresholds"), ("pocket", "thresholds"), ("averaged", "none"), ("voted", "thresholds")],
)
def test_every_variant_trains_from_the_config(make_cfg, tmp_path, variant, feature_map):
    out = tmp_path / variant
    # the spelling: model=pairwise_perceptron variant=...
    overrides = ["model=pairwise_perceptron", f"variant={variant}", f"model.feature_map={feature_map}", *DATA]
    cfg = make_cfg(*overrides, out=out, tiny=False)
    results = train(cfg)
    assert results["test"]["ndcg@10"] > results["test_random_scores"]["ndcg@10"] + 0.05
    assert (out / "export" / "scorer.onnx").exists()


def test_variant_at_the_top_level_is_the_models_and_refused_for_other_models(make_cfg):
    assert make_cfg("model=pairwise_perceptron", tiny=False).model.variant == "plain"
    assert make_cfg("model=pairwise_perceptron", "variant=averaged", tiny=False).model.variant == "averaged"
    assert make_cfg("model=committee_perceptron", tiny=False).model.variant == "committee"
    assert make_cfg("model=committee_perceptron", "variant=voted", tiny=False).model.variant == "voted"
    assert make_cfg("model=pairwise_perceptron", "model.variant=pocket", tiny=False).model.variant == "pocket"
    with pytest.raises(ValueError, match="variant=averaged applies to model=pairwise_perceptron"):
        train(make_cfg("model=lambdarank", "variant=averaged"))


def test_a_voted_perceptron_beyond_its_capacity_says_so(make_cfg, tmp_path):
    overrides = ["model=pairwise_perceptron", "variant=voted", "model.max_hypotheses=3", *DATA]
    with pytest.warns(UserWarning, match="more than model.max_hypotheses=3"):
        train(make_cfg(*overrides, out=tmp_path / "voted", tiny=False))


def test_the_best_pass_is_kept_and_restored(make_cfg, tmp_path):
    out = tmp_path / "run"
    cfg = make_cfg("model=committee_perceptron", "model.epochs=4", "model.n_runs=3", *DATA, out=out, tiny=False)
    results = train(cfg)
    best = max(_scalars(out)["val/ndcg@10"])
    assert results["val"]["ndcg@10"] == pytest.approx(best, abs=1e-6)
    module = PairwisePerceptronModule.load_from_checkpoint(results["best_checkpoint"])
    assert module.learner.hypotheses.shape == (3,) and int(module.learner.seen[0]) > 0


def test_thresholds_are_fitted_on_every_training_document_and_travel_with_the_checkpoint(make_cfg, tmp_path):
    cfg = make_cfg(
        "model=committee_perceptron", "model.epochs=2", "model.bins=5", *DATA, out=tmp_path / "run", tiny=False
    )
    results = train(cfg)
    datamodule = instantiate(cfg.data)
    datamodule.setup()
    normalizer = datamodule.build_normalizer()
    split = datamodule.splits["train"]
    documents = torch.cat(  # normalized query by query, as training batches are (query_zscore here)
        [
            normalizer(torch.from_numpy(split.features[a:b])[None])[0]
            for a, b in zip(split.offsets[:-1], split.offsets[1:], strict=True)
        ]
    )
    expected = QuantileThresholds(documents.shape[1], bins=5).fit(documents).thresholds
    module = PairwisePerceptronModule.load_from_checkpoint(results["best_checkpoint"], normalizer=normalizer)
    assert module.feature_map.fitted and module.learner.d == documents.shape[1] * 5
    torch.testing.assert_close(module.feature_map.thresholds, expected)
    with pytest.raises(ValueError, match="feature_map"):
        PairwisePerceptronModule(n_features=3, feature_map="splines")


def test_pair_stream_keeps_only_real_documents_and_the_same_pairs():
    generator = torch.Generator().manual_seed(4)
    batches = []
    for size in (3, 2):
        features = torch.randn(size, 6, 4, generator=generator)
        labels = torch.randint(0, 3, (size, 6), generator=generator).float()
        mask = torch.rand(size, 6, generator=generator) > 0.3
        batches.append((features, labels, mask))
    flat, pairs, eta = PairwisePerceptronModule._pair_stream(batches)
    assert len(flat) == sum(int(mask.sum()) for _, _, mask in batches)
    expected_differences, expected_eta = [], []
    for features, labels, mask in batches:  # the pairs read off the padded batches directly
        found, weights = preference_pairs(labels, mask)
        expected_differences += [features[b, i] - features[b, j] for b, i, j in found.tolist()]
        expected_eta.append(weights)
    torch.testing.assert_close(flat[pairs[:, 0]] - flat[pairs[:, 1]], torch.stack(expected_differences))
    torch.testing.assert_close(eta, torch.cat(expected_eta))


@pytest.mark.parametrize("combine", ["vote", "weight"])
def test_pooled_runs_vote_with_every_member_of_their_committee_size(combine):
    generator = torch.Generator().manual_seed(5)
    module = PairwisePerceptronModule(
        "committee", n_features=5, committee_size=[2, 4], n_runs=3, pool_runs=True, combine=combine, feature_map="none"
    )
    features = torch.randn(40, 5, generator=generator)
    labels = torch.randint(0, 3, (5, 8), generator=generator).float()
    found, eta = preference_pairs(labels)
    pairs = torch.stack([found[:, 0] * 8 + found[:, 1], found[:, 0] * 8 + found[:, 2]], 1)
    module.learner.fit_pairs(features, pairs, eta, pass_orders(len(pairs), module.seeds, 0))
    queries = torch.randn(2, 7, 5, generator=generator)
    pooled = module.run_scores(queries)
    assert pooled.shape == (2, 2, 7)  # one scorer per committee size
    committee, votes = module.learner.members()
    linear = module.learner.linear_weights("weight")
    for group, size in enumerate([2, 4]):
        runs = [r for r, (k, _) in enumerate(module.runs) if k == size]
        assert len(runs) == 3
        for b in range(2):
            if combine == "weight":  # the mean of the runs' count-weighted committees
                expected = queries[b] @ linear[runs].mean(0)
            else:  # every member of the three committees votes its count, a loop over documents
                members = [(committee[r, k], float(votes[r, k])) for r in runs for k in range(size)]
                total = sum(vote for _, vote in members)
                expected = torch.zeros(7)
                for i in range(7):
                    for weights, vote in members:
                        scores = queries[b] @ weights
                        rank = float((scores < scores[i]).sum()) + 0.5 * float((scores == scores[i]).sum() - 1)
                        expected[i] += vote * rank / total
            torch.testing.assert_close(pooled[group, b], expected, rtol=1e-5, atol=1e-5)


def test_rank_vote_module_matches_the_functional_rule():
    generator = torch.Generator().manual_seed(0)
    committee, votes = torch.randn(4, 6, generator=generator), torch.tensor([3.0, 0.0, 1.0, 5.0])
    features = torch.randn(2, 9, 6, generator=generator)
    features[0, 3] = features[0, 5]  # a tie
    expected = rank_vote_scores(features @ committee.t(), votes[None])
    torch.testing.assert_close(RankVoteScorer(committee, votes)(features), expected)


@pytest.mark.parametrize("fused", [False, "cpu"])
def test_a_pass_on_the_live_columns_leaves_the_full_width_state(fused):
    if fused and pairwise_perceptron_cpu.kernel() is None:
        pytest.skip("no C++ toolchain")
    generator = torch.Generator().manual_seed(6)
    columns = torch.tensor([0, 2, 3, 7, 8])
    full = torch.zeros(20 * 6, 10)
    full[:, columns] = torch.randn(20 * 6, len(columns), generator=generator)
    labels = torch.randint(0, 3, (20, 6), generator=generator).float()
    found, eta = preference_pairs(labels)
    pairs = torch.stack([found[:, 0] * 6 + found[:, 1], found[:, 0] * 6 + found[:, 2]], 1)
    options = dict(committee_size=[1, 4], n_runs=2, dtype=torch.float64, fused=fused)
    wide, narrow = PairwisePerceptron(10, **options), PairwisePerceptron(10, **options)
    for epoch in range(3):
        order = pass_orders(len(pairs), [1, 2], epoch)
        expected = wide.fit_pairs(full, pairs, eta, order)
        assert torch.equal(narrow.fit_pairs(full[:, columns], pairs, eta, order, columns=columns), expected)
    for name in ("weights", "weighted_sum", "committee", "counts", "births", "successes", "mistakes", "seen"):
        assert torch.equal(getattr(wide, name), getattr(narrow, name)), name
    assert narrow.d == 10 and int(wide.hypotheses.min()) > 2
    with pytest.raises(ValueError, match="columns lists 5"):
        narrow.fit_pairs(full, pairs, eta, order, columns=columns)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fused_cpu_loop_gives_the_tensor_paths_committee(dtype):
    if pairwise_perceptron_cpu.kernel() is None:
        pytest.skip("no C++ toolchain: the tensor path is the only path")
    generator = torch.Generator().manual_seed(1)
    features = torch.randn(25 * 8, 12, generator=generator)
    labels = torch.randint(0, 4, (25, 8), generator=generator).float()
    found, eta = preference_pairs(labels)
    pairs = torch.stack([found[:, 0] * 8 + found[:, 1], found[:, 0] * 8 + found[:, 2]], 1)
    sizes, seeds = [1, 6, 300], [3, 4, 5]
    tensor = PairwisePerceptron(12, committee_size=sizes, n_runs=3, dtype=dtype, fused=False)
    fused = PairwisePerceptron(12, committee_size=sizes, n_runs=3, dtype=dtype, fused="cpu")
    for epoch in range(2):
        order = pass_orders(len(pairs), seeds, epoch)
        assert torch.equal(tensor.fit_pairs(features, pairs, eta, order), fused.fit_pairs(features, pairs, eta, order))
    for name in ("counts", "births", "successes", "hypotheses", "mistakes", "seen"):
        assert torch.equal(getattr(tensor, name), getattr(fused, name)), name
    # the same decisions, and the same elementwise arithmetic (each product and sum rounded, no
    # fused multiply-add): the states are equal bit for bit, only the margins' summation order differs
    for name in ("committee", "weights", "weighted_sum"):
        assert torch.equal(getattr(tensor, name), getattr(fused, name)), name
