"""trainer=gpu_fast's training path (device-resident batches padded to fixed widths, compiled loss,
no host reads per step), run on CPU with the same code: same model as the default path."""

from __future__ import annotations

import warnings

import pytest
import pytorch_lightning as pl
import torch
from hydra.utils import instantiate

from losses import lambdarank_loss, ranknet_loss
from rankers import RankerModule
from rankers.callbacks import EpochSeed
from tests.conftest import cuda_only

# no dropout: the compiled graph draws its random numbers differently from eager mode
EXACT = ["model.scorer.dropout=0.0", "trainer.max_epochs=2", "data.n_train_queries=64"]
# trainer=gpu_fast on the CPU: the same code path, with the settings a CPU can run
FAST_ON_CPU = [
    "trainer=gpu_fast",
    "trainer.accelerator=cpu",
    "trainer.precision=32-true",
    "model.optimizer.fused=false",  # the default path's Adam, so the two runs are comparable
    "data.pad_multiple=1",  # padding changes float rounding only: tested on its own below
    "model.compile=true",
    "model.compile_backend=aot_eager",  # traces and partitions like inductor, without code generation
]


def fit(cfg, *callbacks: pl.Callback) -> tuple[RankerModule, pl.Trainer]:
    pl.seed_everything(cfg.seed)
    datamodule = instantiate(cfg.data)
    datamodule.setup("fit")
    model = instantiate(cfg.model, **datamodule.model_inputs())
    trainer = instantiate(
        cfg.trainer,
        callbacks=[EpochSeed(cfg.seed), *callbacks],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(model, datamodule=datamodule)
    return model, trainer


def test_gpu_fast_composes_its_settings(make_cfg):
    cfg = make_cfg("trainer=gpu_fast")
    assert cfg.trainer.accelerator == "gpu" and cfg.trainer.precision == "bf16-mixed"
    assert cfg.data.device_resident and cfg.data.pad_multiple == 256
    assert cfg.model.compile == "reduce-overhead" and cfg.model.optimizer.fused
    untouched = make_cfg("trainer=gpu_fast", tiny=False)  # the tiny test data set their own batch and rate
    assert untouched.data.batch_size == 128 and untouched.model.optimizer.lr == pytest.approx(0.004)  # 4x


def test_cpu_fast_composes_and_trains(make_cfg, tmp_path):
    untouched = make_cfg("trainer=cpu_fast", tiny=False)
    assert untouched.data.batch_size == 128 and untouched.model.optimizer.lr == pytest.approx(0.004)
    assert make_cfg("trainer=cpu_fast", "data.batch_size=8", tiny=False).model.optimizer.lr == pytest.approx(2.5e-4)
    cfg = make_cfg("trainer=cpu_fast", *EXACT[:2], out=tmp_path / "run")
    assert cfg.trainer.accelerator == "cpu" and cfg.data.device_resident and cfg.model.optimizer.fused
    model, trainer = fit(cfg)
    assert trainer.current_epoch == 2 and all(torch.isfinite(p).all() for p in model.parameters())


def test_fast_path_trains_the_same_model_as_the_default_path(make_cfg, tmp_path, monkeypatch):
    """DataLoader + eager loss vs device-resident batches + compiled loss + gpu_fast's trainer: bit for bit."""
    # compiled code runs the tensor path; eager CPU LambdaRank would take the fused kernel (equal to
    # it up to float32 summation order, tests/kernels/test_lambdarank_cpu.py), so compare tensor paths
    monkeypatch.setenv("LTR_CPU_KERNELS", "0")
    default, _ = fit(make_cfg(*EXACT, out=tmp_path / "default"))
    fast, _ = fit(make_cfg(*EXACT, *FAST_ON_CPU, out=tmp_path / "fast"))
    assert fast._train_loss is not fast._loss_of  # the compiled function ran
    for (name, expected), actual in zip(default.scorer.state_dict().items(), fast.scorer.state_dict().values()):
        assert torch.equal(actual, expected), name
    initial = instantiate(make_cfg(*EXACT).model, n_features=8).scorer.layers[0].weight
    assert not torch.equal(default.scorer.layers[0].weight, initial)  # it did train


@pytest.mark.parametrize("loss", [lambdarank_loss, ranknet_loss])
def test_padding_to_a_multiple_changes_only_rounding(loss):
    """``pad_multiple`` adds masked columns: the same loss and gradients up to float32 summation order."""
    from functools import partial

    from datamodules.batching import pad_batch
    from datamodules.normalization import FeatureNormalizer
    from rankers.scorers import MLPScorer

    generator = torch.Generator().manual_seed(0)
    lengths = torch.tensor([30, 7, 1, 19])
    features = torch.randn(int(lengths.sum()), 6, generator=generator)
    labels = torch.randint(0, 5, (int(lengths.sum()),), generator=generator).float()
    starts = torch.cumsum(lengths, 0) - lengths
    model = RankerModule(
        partial(MLPScorer, hidden=(16,)),
        partial(loss),
        partial(torch.optim.Adam),
        n_features=6,
        normalizer=FeatureNormalizer("query_zscore", num_features=6),
    )
    results = []
    for width in (30, 64):
        batch = pad_batch(features, labels, starts, lengths, width)
        model.zero_grad()
        value = model._loss_of(batch["features"], batch["labels"], batch["mask"])
        value.backward()
        results.append((value.detach(), [p.grad.clone() for p in model.parameters()]))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-6, atol=1e-7)
    for padded, plain in zip(results[1][1], results[0][1]):
        torch.testing.assert_close(padded, plain, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("loss", [lambdarank_loss, ranknet_loss])
def test_training_loss_compiles_without_graph_breaks(loss):
    from functools import partial

    from rankers.scorers import MLPScorer

    model = RankerModule(partial(MLPScorer, hidden=(8,)), partial(loss), partial(torch.optim.Adam), n_features=5)
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(4, 16, 5, generator=generator)
    labels = torch.randint(0, 3, (4, 16), generator=generator).float()
    mask = torch.arange(16) < torch.tensor([16, 9, 1, 0])[:, None]
    explanation = torch._dynamo.explain(model._loss_of)(features, labels, mask)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


class HostReads(pl.Callback):
    """Counts reads of tensor values by the host (``.item()``, ``bool``, ``int``, ``float``, ``.tolist()``)
    from the start of the second epoch to its end: each would be a device sync on a GPU."""

    def __init__(self) -> None:
        self.reads, self.batches, self.counting, self.saved = 0, 0, False, {}

    def on_train_epoch_start(self, trainer, module):
        if trainer.current_epoch == 1:
            self.counting = True
            for name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__"):
                original = getattr(torch.Tensor, name)
                self.saved[name] = original

                def counted(tensor, *args, _original=original, **kwargs):
                    self.reads += 1
                    return _original(tensor, *args, **kwargs)

                setattr(torch.Tensor, name, counted)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.batches += self.counting

    def on_train_epoch_end(self, trainer, module):
        for name, original in self.saved.items():
            setattr(torch.Tensor, name, original)
        self.saved, self.counting = {}, False


def test_no_host_reads_during_an_epoch(make_cfg, tmp_path):
    reads = HostReads()
    overrides = [
        *EXACT,
        *FAST_ON_CPU,
        "data.pad_multiple=16",
        "model.optimizer.fused=true",  # gpu_fast's Adam (the for-loop Adam reads its step count on the host)
        "trainer.log_every_n_steps=1000",
        "data.batch_size=8",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit(make_cfg(*overrides, out=tmp_path / "run"), reads)
    assert reads.batches >= 8
    assert reads.reads == 0


def test_compile_mode_needs_inductor():
    from functools import partial

    from rankers.scorers import LinearScorer

    with pytest.raises(ValueError, match="inductor"):
        RankerModule(
            LinearScorer,
            partial(ranknet_loss),
            partial(torch.optim.Adam),
            n_features=3,
            compile="reduce-overhead",
            compile_backend="aot_eager",
        )


@cuda_only
def test_gpu_fast_on_cuda_trains_with_cuda_graphs_and_few_syncs(make_cfg, tmp_path):
    syncs = []

    class SyncDebug(pl.Callback):
        def on_train_epoch_start(self, trainer, module):
            if trainer.current_epoch == 1:
                torch.cuda.set_sync_debug_mode("warn")

        def on_train_epoch_end(self, trainer, module):
            torch.cuda.set_sync_debug_mode("default")

    overrides = [*EXACT, "trainer=gpu_fast", "data.pad_multiple=32", "trainer.log_every_n_steps=1000"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, trainer = fit(make_cfg(*overrides, out=tmp_path / "run"), SyncDebug())
        syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    batches = trainer.num_training_batches
    assert len(syncs) < batches, [str(w.message) for w in syncs[:5]]
    assert all(torch.isfinite(p).all() for p in model.parameters())
