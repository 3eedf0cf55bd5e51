"""RankBoost against a straightforward pairwise reference, the paper's bound, and train.py + export."""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil

import numpy as np
import onnxruntime
import pytest
import torch
from hydra.utils import instantiate
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from bench.ranklib import rankboost_ensemble, run_ranklib
from datamodules.letor_io import LetorData, write_letor
from datamodules.normalization import FeatureNormalizer
from rankers.boosting.module import RankBoostModule
from rankers.boosting.rankboost import (
    RankBoostLearner,
    candidate_thresholds,
    exp_loss,
    fit_rankboost,
    prepare,
    ranking_loss,
    weak_outputs,
)
from rankers.pipeline import train


# --------------------------------------------------------------------------------------------------
# the reference: the algorithm exactly as the paper writes it, one pair at a time (float64 lists)
# --------------------------------------------------------------------------------------------------
def reference_thresholds(column: list[float | None], count: int, kind: str) -> list[float]:
    """Candidates of one feature: quantile levels j / count of the ranked values (or equal-width
    steps from the minimum), or every distinct value when there are at most ``count``."""
    values = sorted(v for v in column if v is not None)
    if not values:
        return []
    distinct = sorted(set(values))
    if len(distinct) <= count:
        return distinct
    if kind == "quantile":
        return sorted({values[math.floor(j / count * (len(values) - 1))] for j in range(count)})
    low, high = values[0], values[-1]
    return sorted({low + j / count * (high - low) for j in range(count)})


def reference_rankboost(x, y, qid, *, rounds, missing=None, count=10, kind="quantile", alpha="exact", smoothing=1e-6):
    """Freund et al.'s RankBoost with an explicit D over crucial pairs. Returns the chosen rankers,
    their alphas and Z_t, the final scores and rloss/prod Z per round."""
    n, f = len(x), len(x[0])
    ranked = [[None if (missing is not None and x[i][k] == missing) else x[i][k] for k in range(f)] for i in range(n)]
    pairs = [(i0, i1) for i0 in range(n) for i1 in range(n) if qid[i0] == qid[i1] and y[i1] > y[i0]]
    d = {pair: 1.0 / len(pairs) for pair in pairs}
    cands = [reference_thresholds([ranked[i][k] for i in range(n)], count, kind) for k in range(f)]
    qs = (0, 1) if missing is not None else (0,)
    scores, chosen = [0.0] * n, []
    for _ in range(rounds):
        best, merits = None, []
        for k in range(f):
            for theta in cands[k]:
                for q in qs:
                    h = [q if ranked[i][k] is None else float(ranked[i][k] > theta) for i in range(n)]
                    r = sum(w * (h[i1] - h[i0]) for (i0, i1), w in d.items())
                    merits.append((abs(r), tuple(h)))
                    if best is None or abs(r) > abs(best[0]):
                        best = (r, k, theta, q, h)
        r, k, theta, q, h = best
        # the data must not tie two different rankers for first place (either choice would be right)
        assert all(m < abs(r) - 1e-9 or hh == tuple(h) for m, hh in merits), "tied candidates: pick other data"
        right = sum(w for (i0, i1), w in d.items() if h[i0] == 0 and h[i1] == 1)
        wrong = sum(w for (i0, i1), w in d.items() if h[i0] == 1 and h[i1] == 0)
        if alpha == "exact":
            a = 0.5 * math.log((right + smoothing) / (wrong + smoothing))
        else:
            a = 0.5 * math.log((1 + r + smoothing) / (1 - r + smoothing))
        z = sum(w * math.exp(a * (h[i0] - h[i1])) for (i0, i1), w in d.items())
        d = {(i0, i1): w * math.exp(a * (h[i0] - h[i1])) / z for (i0, i1), w in d.items()}
        scores = [s + a * hi for s, hi in zip(scores, h, strict=True)]
        rloss = sum(1.0 for (i0, i1) in pairs if scores[i1] <= scores[i0]) / len(pairs)
        chosen.append({"feature": k, "threshold": theta, "q_def": q, "alpha": a, "z": z, "h": h, "rloss": rloss})
    return chosen, scores


def small_data(seed: int, *, n_queries=5, docs=7, n_features=4, levels=3, missing_rate=0.0, ties=False):
    generator = np.random.default_rng(seed)
    x = generator.random((n_queries * docs, n_features))
    if ties:  # few distinct values: exact-value thresholds and tied documents
        x = np.round(x * 3) / 3
    if missing_rate:
        x[generator.random(x.shape) < missing_rate] = 0.0
        x[0, :] = 0.0  # every feature has an abstaining document
    y = generator.integers(0, levels, n_queries * docs).astype(float)
    y[np.arange(n_queries) * docs] = levels - 1  # every query has pairs (queries without any are tested apart)
    y[np.arange(n_queries) * docs + 1] = 0
    qid = np.repeat(np.arange(n_queries), docs)
    return x, y, qid


def ours(x, y, qid, rounds, **options):
    missing = options.pop("missing", None)
    xt = torch.tensor(x, dtype=torch.float64)
    unranked = None if missing is None else xt == missing
    return fit_rankboost(xt, torch.tensor(y), torch.tensor(qid), rounds=rounds, unranked=unranked, **options), xt


CASES = {
    "graded, exact alpha": ({}, {}),
    "graded, approx alpha": ({}, {"alpha": "approx"}),
    "uniform thresholds": ({}, {"kind": "uniform"}),
    "abstentions and q_def": ({"missing_rate": 0.3}, {"missing": 0.0}),
    "ties, few distinct values": ({"ties": True}, {}),
    "bipartite": ({"levels": 2}, {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_same_weak_rankers_alphas_and_scores_as_the_pairwise_reference(case):
    data_options, options = CASES[case]
    x, y, qid = small_data(1, **data_options)
    rounds = 6
    reference, ref_scores = reference_rankboost(x.tolist(), y.tolist(), qid.tolist(), rounds=rounds, **options)
    kw = {"alpha": options.get("alpha", "exact"), "threshold_kind": options.get("kind", "quantile")}
    fitted, xt = ours(x, y, qid, rounds, missing=options.get("missing"), **kw)
    for t, expected in enumerate(reference):
        assert int(fitted["feature"][t]) == expected["feature"], t
        assert float(fitted["threshold"][t]) == pytest.approx(expected["threshold"], abs=1e-12), t
        assert float(fitted["alpha"][t]) == pytest.approx(expected["alpha"], rel=1e-8, abs=1e-10), t
        assert float(fitted["z"][t]) == pytest.approx(expected["z"], rel=1e-8), t
        if options.get("missing") is not None:  # q_def only matters where some document abstains
            assert float(fitted["q_def"][t]) == expected["q_def"], t
    unranked = None if options.get("missing") is None else xt == options["missing"]
    h = weak_outputs(xt, unranked, fitted["feature"], fitted["threshold"], fitted["q_def"])
    torch.testing.assert_close(h @ fitted["alpha"], torch.tensor(ref_scores, dtype=torch.float64))


def test_queries_without_pairs_and_single_documents_change_nothing():
    x, y, qid = small_data(2, n_queries=4, ties=True)  # few distinct values: the candidates stay the same
    extra_x = np.round(np.random.default_rng(3).random((6, x.shape[1])) * 3) / 3
    # a query whose labels are all equal, and a one-document query: no crucial pair in either
    x2 = np.concatenate([x, extra_x])
    y2 = np.concatenate([y, [2, 2, 2, 2, 2, 1]])
    q2 = np.concatenate([qid, [10] * 5 + [11]])
    base, _ = ours(x, y, qid, 5)
    padded, _ = ours(x2, y2, q2, 5)
    assert torch.equal(base["feature"], padded["feature"])
    torch.testing.assert_close(base["threshold"], padded["threshold"])
    torch.testing.assert_close(base["alpha"], padded["alpha"])
    torch.testing.assert_close(base["z"], padded["z"])
    reference, _ = reference_rankboost(x2.tolist(), y2.tolist(), q2.tolist(), rounds=5)
    assert padded["feature"].tolist() == [step["feature"] for step in reference]
    torch.testing.assert_close(
        padded["alpha"], torch.tensor([step["alpha"] for step in reference], dtype=torch.float64)
    )


def test_data_without_any_pair_is_refused():
    x = torch.rand(6, 2)
    with pytest.raises(ValueError, match="crucial pairs"):
        prepare(x, torch.ones(6), torch.tensor([0, 0, 0, 1, 1, 2]))


@pytest.mark.parametrize("alpha", ["exact", "approx"])
def test_bound_rloss_below_prod_z_and_the_exponential_loss_never_rises(alpha):
    x, y, qid = small_data(4, n_queries=6, docs=9, levels=4)
    reference, _ = reference_rankboost(x.tolist(), y.tolist(), qid.tolist(), rounds=8, alpha=alpha)
    fitted, xt = ours(x, y, qid, 8, alpha=alpha)
    data = prepare(xt, torch.tensor(y), torch.tensor(qid))
    h = weak_outputs(xt, None, fitted["feature"], fitted["threshold"], fitted["q_def"])
    after = (h * fitted["alpha"]).cumsum(1)  # [N, T]: the scores after each round
    prod_z = 1.0
    for t, step in enumerate(reference):
        prod_z *= step["z"]
        assert step["rloss"] <= prod_z + 1e-12  # Theorem 1
        assert float(ranking_loss(after[:, t], data)) == pytest.approx(step["rloss"], abs=1e-12)
        assert math.exp(float(fitted["log_loss"][t])) == pytest.approx(prod_z, rel=1e-8)
    losses = fitted["log_loss"].tolist()
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(losses))
    assert (fitted["z"] <= 1.0 + 1e-12).all()


def test_exact_alpha_minimizes_z():
    x, y, qid = small_data(5, n_queries=10, docs=10)
    xt = torch.tensor(x)
    data = prepare(xt, torch.tensor(y), torch.tensor(qid))
    learner = RankBoostLearner(data, smoothing=0.0)
    learner.round()
    before = learner.scores.clone()
    step = learner.round()  # the second round: D_2 is no longer uniform
    h = (xt[:, int(step["feature"])] > step["threshold"]).double()

    def z_of(a: float) -> float:
        return math.exp(float(exp_loss(before + a * h, data) - exp_loss(before, data)))

    a = float(step["alpha"])
    assert math.isfinite(a) and a != 0.0
    assert z_of(a) == pytest.approx(float(step["z"]), rel=1e-9)
    assert z_of(a) <= min(z_of(a + 1e-3), z_of(a - 1e-3), z_of(a * 0.5), z_of(a * 1.5), 1.0)


def test_a_resumed_learner_continues_exactly():
    """What a resumed run does: D_t is rebuilt from the training scores of the checkpointed ensemble."""
    x, y, qid = small_data(7, levels=4)
    xt = torch.tensor(x)
    data = prepare(xt, torch.tensor(y), torch.tensor(qid))
    straight = RankBoostLearner(data)
    whole = [straight.round() for _ in range(6)]
    first = RankBoostLearner(data)
    head = [first.round() for _ in range(3)]
    f, t, q, a = (torch.stack([s[key] for s in head]) for key in ("feature", "threshold", "q_def", "alpha"))
    resumed = RankBoostLearner(data, scores=weak_outputs(xt, None, f, t, q) @ a)
    tail = [resumed.round() for _ in range(3)]
    for expected, got in zip(whole, head + tail, strict=True):
        assert int(expected["feature"]) == int(got["feature"])
        torch.testing.assert_close(expected["alpha"], got["alpha"])
        torch.testing.assert_close(expected["log_loss"], got["log_loss"])


def test_quantile_candidates_and_few_distinct_values():
    x = torch.tensor([[0.0, 5.0], [1.0, 5.0], [2.0, 7.0], [3.0, 5.0], [4.0, 7.0], [5.0, 5.0]])
    thresholds, order, positions, n_ranked = candidate_thresholds(x, None, count=3, kind="quantile")
    assert thresholds[0].tolist() == [0.0, 1.0, 3.0]  # values at floor(j/3 * 5) of the sorted column
    assert thresholds[1, :2].tolist() == [5.0, 7.0] and math.isinf(thresholds[1, 2])
    assert positions[0].tolist() == [5, 4, 2] and positions[1, :2].tolist() == [2, 0]
    assert order[1, :2].sort().values.tolist() == [2, 4]  # the two 7s come first
    assert n_ranked.tolist() == [6, 6]


# --------------------------------------------------------------------------------------------------
# RankLib's RankBoost (ciir.umass.edu.learning.boosting.RankBoost), transcribed as its loop runs
# --------------------------------------------------------------------------------------------------
def ranklib_reference(x, y, qid, *, rounds: int, count: int):
    """RankLib's RankBoost as its Java runs it: D over every pair of a query with different labels,
    candidates ``max, max - step, ...`` (float64, step by step) and ``min - 1e8`` scanned from the
    highest, float32 values compared with float64 thresholds, the first strictly larger r kept
    (feature order, then threshold order), alpha ``1/2 ln((Z + R) / (Z - R))`` with ``R = Z r``."""
    n, f = len(x), len(x[0])
    pairs = [(hi, lo) for hi in range(n) for lo in range(n) if qid[hi] == qid[lo] and y[hi] > y[lo]]
    weight = {pair: 1.0 / len(pairs) for pair in pairs}
    candidates = []
    for k in range(f):
        high, low = max(row[k] for row in x), min(row[k] for row in x)
        step = abs(high - low) / count
        column = [high]
        for _ in range(count - 1):
            column.append(column[-1] - step)
        candidates.append(sorted([*column, low - 1.0e8], reverse=True))
    z_prev, chosen = 1.0, []
    for _ in range(rounds):
        potential = [0.0] * n
        for (hi, lo), w in weight.items():
            potential[hi] += w
            potential[lo] -= w
        best_r, best = -10.0, None
        for k in range(f):
            for theta in candidates[k]:
                r = sum(potential[i] for i in range(n) if x[i][k] > theta)
                if r > best_r:
                    best_r, best = r, (k, theta)
        k, theta = best
        big_r = z_prev * best_r
        alpha = 0.5 * math.log((z_prev + big_r) / (z_prev - big_r))
        h = [float(row[k] > theta) for row in x]
        weight = {(hi, lo): w * math.exp(alpha * (h[lo] - h[hi])) for (hi, lo), w in weight.items()}
        z_prev = sum(weight.values())
        weight = {pair: w / z_prev for pair, w in weight.items()}
        chosen.append({"feature": k, "threshold": theta, "alpha": alpha, "h": h})
    return chosen


@pytest.mark.parametrize("count", [3, 10])
def test_ranklib_thresholds_reproduce_ranklibs_ensemble_round_by_round(count):
    # float32 values on a grid of thirds: RankLib's float64 thresholds (1 - 1/3 = 0.666...67 < 2/3 in
    # float32) put grid values above the threshold, which only rounding the threshold down reproduces
    x, y, qid = small_data(4, n_queries=6, docs=8, n_features=5, ties=True)
    x32 = x.astype(np.float32)
    rounds = 8
    reference = ranklib_reference(x32.astype(np.float64).tolist(), y.tolist(), qid.tolist(), rounds=rounds, count=count)
    options = {"q_def": 0, "allow_negative": False, "alpha": "approx", "smoothing": 0.0}
    fitted = fit_rankboost(
        torch.from_numpy(x32),
        torch.tensor(y),
        torch.tensor(qid),
        rounds=rounds,
        thresholds=count,
        threshold_kind="ranklib",
        **options,
    )
    h = weak_outputs(torch.from_numpy(x32), None, fitted["feature"], fitted["threshold"], fitted["q_def"])
    for t, expected in enumerate(reference):
        assert int(fitted["feature"][t]) == expected["feature"], t
        assert h[:, t].tolist() == expected["h"], t  # the same documents above the threshold
        # and the same threshold among those that split the training data alike (the highest)
        assert float(fitted["threshold"][t]) == pytest.approx(expected["threshold"], abs=1e-6), t
        assert float(fitted["alpha"][t]) == pytest.approx(expected["alpha"], rel=1e-5), t


def test_ranklib_candidates_are_rankLibs_float64_values_rounded_down():
    x = torch.tensor([[0.0], [1.0 / 3.0], [2.0 / 3.0], [1.0]], dtype=torch.float32)
    thresholds, _, positions, _ = candidate_thresholds(x, None, count=3, kind="ranklib")
    exact = [1.0, 1.0 - 1.0 / 3.0, 1.0 - 1.0 / 3.0 - 1.0 / 3.0, 0.0 - 1.0e8]
    for value in x[:, 0].double().tolist():  # x > t in float64 iff x > the float32 threshold
        above_exact = sorted(value > t for t in exact)
        above_ours = sorted(bool(value > t) for t in thresholds[0].tolist())
        assert above_exact == above_ours, value
    assert sorted(positions[0].tolist()) == [0, 2, 3, 4]  # 2/3 and 1/3 themselves count as above


def test_a_copied_feature_never_wins_over_its_original():
    # RankLib sums each feature's r from 0, so a copy ties its original exactly and the first wins;
    # our candidates share one running sum, which must not let rounding pick the copy
    generator = torch.Generator().manual_seed(0)
    later = 0
    for _ in range(10):
        first = torch.randint(0, 20, (60,), generator=generator).float()
        x = torch.cat([first[:, None], first[:, None].clone(), torch.rand(60, 3, generator=generator)], 1)
        y = torch.randint(0, 3, (60,), generator=generator).float()
        fitted = fit_rankboost(x, y, torch.arange(60) // 10, rounds=30, threshold_kind="ranklib", allow_negative=False)
        later += int((fitted["feature"] == 1).sum())
    assert later == 0


def test_same_ensemble_as_ranklibs_jar(tmp_path):
    """RankLib itself (``RANKLIB_JAR=RankLib.jar``, java on PATH) against train.py's default RankBoost."""
    jar = os.environ.get("RANKLIB_JAR")
    if not jar or shutil.which("java") is None:
        pytest.skip("set RANKLIB_JAR to a RankLib jar (and have java) to compare with RankLib itself")
    x, y, qid = small_data(5, n_queries=20, docs=15, n_features=12, levels=3)
    data = LetorData(x.astype(np.float32), y.astype(np.float32), qid, np.r_[0, np.cumsum(np.full(20, 15))], "mem")
    path = tmp_path / "train.txt"
    write_letor(path, data)
    run = run_ranklib(jar, path, path, ranker=2, options=["-round", "40", "-tc", "10"], workdir=tmp_path)
    theirs = rankboost_ensemble(run.model)
    module = RankBoostModule(n_features=12, rounds=40)
    fitted = fit_rankboost(
        torch.from_numpy(data.features),
        torch.from_numpy(data.labels).double(),
        torch.from_numpy(qid),
        rounds=40,
        thresholds=module.hparams.thresholds,
        threshold_kind=module.hparams.threshold_kind,
        q_def=0,
        allow_negative=module.hparams.allow_negative,
        alpha=module.hparams.alpha,
        smoothing=0.0,
    )
    raw = torch.from_numpy(data.features).double()
    their_scores = sum(a * (raw[:, f] > theta).double() for f, theta, a in theirs)
    our_h = weak_outputs(raw, None, fitted["feature"], fitted["threshold"].double(), fitted["q_def"].double())
    torch.testing.assert_close(our_h @ fitted["alpha"].double(), their_scores, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------------
# under train.py
# --------------------------------------------------------------------------------------------------
SYNTHETIC = [
    "data=synthetic",
    "data.n_train_queries=80",
    "data.n_val_queries=20",
    "data.n_test_queries=20",
    "data.mean_docs=12",
    "data.num_features=6",
    "model=rankboost",
    "model.rounds=40",
    "model.rounds_per_epoch=10",
    "model.rloss_every=5",
    "trainer.max_epochs=10",
    "callbacks.progress_bar.refresh_rate=0",
]


def _scalars(run_dir) -> dict[str, list[tuple[int, float]]]:
    found: dict[str, list[tuple[int, float]]] = {}
    for events in (run_dir / "tensorboard").glob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            found.setdefault(tag, []).extend((e.step, e.value) for e in accumulator.Scalars(tag))
    return found


def test_train_py_fits_logs_rounds_and_exports_a_matching_scorer(make_cfg, tmp_path):
    run = tmp_path / "run"
    cfg = make_cfg(*SYNTHETIC, out=run, tiny=False)
    threads = torch.get_num_threads()
    results = train(cfg)
    assert torch.get_num_threads() == threads  # model.cpu_threads applies to the run only
    assert results["test"]["ndcg@10"] > results["test_random_scores"]["ndcg@10"] + 0.1
    scalars = _scalars(run)
    curve = sorted(scalars["rounds/train_exp_loss"])
    assert [step for step, _ in curve] == list(range(1, 41))
    values = [v for _, v in curve]
    assert all(b <= a * (1 + 1e-6) for a, b in itertools.pairwise(values))  # exact alpha
    assert len(scalars["rounds/val/ndcg@10"]) == 40 and "val/ndcg@10" in scalars
    rloss = dict(scalars["rounds/train_rloss"])
    assert sorted(rloss) == [5, 10, 15, 20, 25, 30, 35, 40]
    assert all(rloss[t] <= dict(curve)[t] * (1 + 1e-5) for t in rloss)  # Theorem 1
    # the exported scorer (TorchScript, ONNX) reproduces the model's scores on raw features
    datamodule = instantiate(cfg.data)
    datamodule.setup()
    model = RankBoostModule.load_from_checkpoint(results["best_checkpoint"], normalizer=datamodule.build_normalizer())
    scripted = torch.jit.load(str(run / "export" / "scorer.pt"))
    session = onnxruntime.InferenceSession(str(run / "export" / "scorer.onnx"))
    features, _, offsets = datamodule.tensors["test"]
    for q in range(5):
        raw = features[offsets[q] : offsets[q + 1]]
        with torch.no_grad():
            expected = model(raw[None], torch.ones(1, len(raw), dtype=torch.bool))[0]
        torch.testing.assert_close(scripted(raw), expected, atol=1e-5, rtol=1e-5)
        onnx = torch.from_numpy(session.run(None, {"features": raw.numpy()})[0])
        torch.testing.assert_close(onnx, expected, atol=1e-5, rtol=1e-5)
    ensemble = json.loads((run / "export" / "ensemble.json").read_text())
    assert len(ensemble["weak_rankers"]) == int(model.active_rounds()) == results["val"]["rounds"]


def test_export_with_abstentions_and_query_normalization(tmp_path):
    normalizer = FeatureNormalizer("query_zscore", num_features=3)
    model = RankBoostModule(n_features=3, normalizer=normalizer, normalize=True, rounds=3, missing=0.0)
    model.ens_feature[:3] = torch.tensor([0, 2, 1])
    model.ens_threshold[:3] = torch.tensor([0.1, -0.5, 0.0])
    model.ens_q_def[:3] = torch.tensor([1.0, 0.0, 1.0])
    model.ens_alpha[:3] = torch.tensor([0.7, -0.3, 1.1])
    model.n_rounds.fill_(3)
    model.export_model(tmp_path)
    raw = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, -1.0], [1.0, 1.0, 0.0], [2.0, 5.0, 4.0]])
    with torch.no_grad():
        expected = model(raw[None], torch.ones(1, 4, dtype=torch.bool))[0]
    # by hand: normalized per query, h = q_def where the raw value is 0
    z = normalizer(raw[None], None)[0]
    manual = (
        0.7 * torch.where(raw[:, 0] == 0, 1.0, (z[:, 0] > 0.1).float())
        - 0.3 * torch.where(raw[:, 2] == 0, 0.0, (z[:, 2] > -0.5).float())
        + 1.1 * torch.where(raw[:, 1] == 0, 1.0, (z[:, 1] > 0.0).float())
    )
    torch.testing.assert_close(expected, manual)
    torch.testing.assert_close(torch.jit.load(str(tmp_path / "scorer.pt"))(raw), expected)
    onnx = onnxruntime.InferenceSession(str(tmp_path / "scorer.onnx")).run(None, {"features": raw.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(onnx), expected)


def _write_ratings(path, n_items: int = 150, seed: int = 0) -> None:
    """User 7 copies user 1 on the items user 1 rated (half of them); user 2 rates at random."""
    generator = np.random.default_rng(seed)
    lines = []
    for item in range(n_items):
        rating = int(generator.integers(1, 6))
        lines.append(f"7 {item} {rating}")
        if item % 2 == 0:
            lines.append(f"1 {item} {rating}")
        lines.append(f"2 {item} {int(generator.integers(1, 6))}")
    path.write_text("\n".join(lines) + "\n")


def test_ratings_other_users_as_ranking_features(make_cfg, tmp_path):
    path = tmp_path / "ratings.txt"
    _write_ratings(path)
    cfg = make_cfg(
        "data=ratings",
        f"data.path={path}",
        "data.target_user=7",
        "model=rankboost",
        "model.missing=0",
        "model.rounds=20",
        "model.rounds_per_epoch=10",
        "callbacks.progress_bar.refresh_rate=0",
        out=tmp_path / "run",
        tiny=False,
    )
    results = train(cfg)
    assert "pairwise_error" in results["test"]
    # user 1's ratings order half the test items exactly; the other half are unranked (q_def)
    assert results["test"]["pairwise_error"] < 0.35
    ensemble = json.loads((tmp_path / "run" / "export" / "ensemble.json").read_text())
    assert ensemble["weak_rankers"][0]["feature"] == 0  # user 1 first
