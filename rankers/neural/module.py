"""The LightningModule shared by every gradient-trained ranker (RankNet, LambdaRank, ...)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric

from datamodules.batching import Batch
from datamodules.normalization import FeatureNormalizer
from metrics import best_metric, ranking_metrics
from rankers.export import export_scorer
from rankers.neural import mkl_mlp, onednn_mlp
from rankers.neural.step_graphs import StepRunner, make_capturable
from rankers.scorers import combined_scores, holds_looped_members, member_count, member_scores


def check_loss(loss: Callable[..., Tensor]) -> None:
    """Call the configured loss once on a tiny batch, so that a bad option (``model.loss.k=abc``) is
    reported when the model is built, naming the loss, not inside the first training step."""
    scores = torch.tensor([[0.5, -0.5, 0.0]], requires_grad=True)
    labels, mask = torch.tensor([[1.0, 0.0, 2.0]]), torch.tensor([[True, True, False]])
    try:
        value = loss(scores, labels, mask)
        value.backward()
    except Exception as error:
        name = getattr(getattr(loss, "func", loss), "__name__", repr(loss))
        options = getattr(loss, "keywords", {})
        raise ValueError(f"model.loss {name}({options}) cannot be computed: {error}") from error
    if value.dim() != 0 or not torch.isfinite(value):
        raise ValueError(f"model.loss must return a finite scalar, got {value}")


def check_losses(losses: Sequence[Callable[..., Tensor]], n_members: int) -> None:
    """``check_loss`` on each of a ranker's losses, and refuse members that cannot be shared among them."""
    if not losses:
        raise ValueError("model.loss: give a loss or a non-empty list of them")
    for position, loss in enumerate(losses):
        try:
            check_loss(loss)
        except ValueError as error:
            raise ValueError(f"model.loss[{position}]: {error}" if len(losses) > 1 else str(error)) from error
    if n_members % len(losses):
        raise ValueError(f"{len(losses)} losses need a multiple of {len(losses)} members, got {n_members}")


class PassLimit:
    """For learners whose training length is a number of passes over the data (``epochs``: the
    online rankers, LinkLearn) rather than the trainer's ``max_epochs``: they stop the trainer
    after their last pass, and refuse a trainer that would stop them earlier."""

    def refuse_ddp(self: pl.LightningModule, what: str) -> None:
        """Streams are sequential: ``what`` (e.g. "the online rankers stream the examples") runs in one process."""
        if self.trainer.world_size > 1:
            raise ValueError(
                f"{what} in order in one process; run without DDP (trainer.devices=1), "
                f"not on {self.trainer.world_size} processes"
            )

    def check_passes(self: pl.LightningModule, passes: int, name: str = "model.epochs") -> None:
        limit = self.trainer.max_epochs
        if limit is not None and 0 <= limit < passes:
            raise ValueError(f"{name}={passes} needs trainer.max_epochs >= {passes} (it is {limit})")

    def stop_after(self: pl.LightningModule, passes: int) -> None:
        if self.current_epoch + 1 >= passes:
            self.trainer.should_stop = True


def _compiled(fn: Callable[..., Tensor], mode: bool | str, backend: str) -> Callable[..., Tensor]:
    options: dict[str, Any] = {"backend": backend, "dynamic": False}
    if isinstance(mode, str) and backend == "inductor":
        options["mode"] = mode
    elif isinstance(mode, str) and mode != "default":
        raise ValueError(f"compile mode {mode!r} needs compile_backend=inductor, got {backend!r}")
    return torch.compile(fn, **options)


# train.py's epoch-count cross-validation (epochs_without_validation=cv): K folds, at most this many epochs
EPOCH_SELECTION = MappingProxyType({"folds": 3, "max_epochs": 20})


class RankerModule(PassLimit, pl.LightningModule):
    """Scores documents with ``normalizer`` then ``scorer`` and trains on a loss from ``losses/``.

    Args:
        scorer: factory ``scorer(n_features=F) -> nn.Module`` mapping ``[..., F]`` to ``[...]``
            (Hydra ``_partial_``).
        loss: ``loss(scores, labels, mask) -> scalar`` (Hydra ``_partial_`` of a ``losses`` function),
            or a list of M of them for an ensemble scorer: member k trains on loss ``k mod M``
            (e.g. RankNet and ListNet members, ``model=ranknet_listnet``).
        optimizer: factory ``optimizer(params=...)``; scheduler: optional factory ``scheduler(optimizer=...)``.
        n_features: input width, from the datamodule.
        normalizer: the datamodule's ``FeatureNormalizer`` (part of the model, hence of the export).
        ks: NDCG cut-offs logged as ``val/ndcg@k``; must contain the monitored one.
        gain, empty: metric conventions, see ``metrics.functional``; logged as hyperparameters.
        monitor: the validation metric for checkpoints and early stopping; its direction comes
            from ``metrics.higher_is_better``.
        compile: ``torch.compile`` the training loss (normalizer, scorer, loss; forward and
            backward): False, True (the default mode) or a mode name, e.g. ``"reduce-overhead"``
            (CUDA graphs: one launch per step instead of hundreds). Shapes are static
            (``dynamic=False``): pair it with ``data.pad_multiple`` so few shapes occur.
        compile_backend: ``torch.compile``'s backend; ``"aot_eager"`` traces without generating
            code (tests).
        step_loss_in_progress_bar: show each step's loss in the progress bar. Lightning reads
            progress-bar values back after every batch, a device sync on a GPU; None (default):
            only when training on CPU, where reading is free. The epoch's mean loss is always shown.
        epochs_without_validation: when the run has no validation split (no file and
            ``val_fraction=0``), stop after this many epochs (None: ``trainer.max_epochs``); with a
            validation split early stopping decides, as always. ``"cv"``: ``train.py`` chooses the
            count by K-fold cross-validation on the training queries before the fit
            (``rankers.epoch_selection``) and passes the integer.
        epoch_selection: read by ``train.py``, not the module: its options for ``"cv"`` (``folds``,
            ``max_epochs``).
        step_graphs: the module takes its optimizer steps itself (manual optimization), one per batch,
            or one per batch of a list when the loader groups them (``data.steps_per_batch``); on
            CUDA each step (loss, backward and the optimizer's update) is a CUDA graph captured once
            per batch shape and replayed (``rankers.neural.step_graphs``; the optimizer is made
            ``capturable``), on CPU the same steps run eagerly. One process, no scheduler, no
            gradient clipping or accumulation (refused), no ``compile``.

    The training step never reads a value back from the device: the running loss is a tensor
    metric without torchmetrics' NaN check (a host sync per batch; a NaN loss still shows in the
    logged mean), and ``trainer.log_every_n_steps`` decides how often logs are read.
    """

    def __init__(
        self,
        scorer: Callable[..., nn.Module],
        loss: Callable[..., Tensor] | Sequence[Callable[..., Tensor]],
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., Any] | None = None,
        *,
        n_features: int,
        normalizer: FeatureNormalizer | None = None,
        ks: Sequence[int] = (1, 5, 10),
        gain: str = "exp2",
        empty: float = 0.0,
        monitor: str = "val/ndcg@10",
        compile: bool | str = False,
        compile_backend: str = "inductor",
        step_loss_in_progress_bar: bool | None = None,
        epochs_without_validation: int | str | None = None,
        epoch_selection: Mapping[str, int] | None = EPOCH_SELECTION,
        step_graphs: bool = False,
    ) -> None:
        super().__init__()
        if step_graphs and (compile or scheduler is not None):
            raise ValueError(
                "model.step_graphs takes the optimizer's steps itself: it needs model.compile=false and "
                f"model.scheduler=null (got compile={compile!r}, a scheduler: {scheduler is not None})"
            )
        ks = [int(k) for k in ks]  # plain ints: Hydra's ListConfig cannot be unpickled with weights_only
        epoch_selection = {str(k): int(v) for k, v in (epoch_selection or {}).items()} or None  # likewise
        self.save_hyperparameters(ignore=["scorer", "loss", "optimizer", "scheduler", "normalizer"])
        self.normalizer = normalizer if normalizer is not None else FeatureNormalizer("none", num_features=n_features)
        self.scorer = scorer(n_features=n_features)
        self.losses = list(loss) if isinstance(loss, Sequence) else [loss]
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        check_losses(self.losses, member_count(self.scorer))
        # nan_strategy="disable": the default NaN check reads a bool back from the device every step
        self.train_loss, self.val_loss = MeanMetric(nan_strategy="disable"), MeanMetric(nan_strategy="disable")
        self.val_metrics = nn.ModuleDict(ranking_metrics(ks, gain=gain, empty=empty))
        self.test_metrics = nn.ModuleDict(ranking_metrics(ks, gain=gain, empty=empty))
        self.val_best = best_metric(monitor)  # max or min by the metric's direction
        self.monitor = monitor
        self._train_loss = self._loss_of if not compile else _compiled(self._loss_of, compile, compile_backend)
        self._cuda_graphs = compile == "reduce-overhead"
        self.step_loss_in_progress_bar = step_loss_in_progress_bar
        self.automatic_optimization = not step_graphs
        self._runner: StepRunner | None = None
        self._loss_logged_epoch: int | None = None  # the epoch whose first step logged the loss (_logs_train_loss)
        self._workspace = mkl_mlp.Workspace()  # the MKL MLP path's buffers (rankers.neural.mkl_mlp)

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        """Raw features ``[B, L, F]`` (mask ``[B, L]``) -> scores ``[B, L]``."""
        return combined_scores(self.scorer, member_scores(self.scorer, self.normalizer(features, mask)), mask)

    def model_step(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """The loss and the scores ``[B, L]`` of a batch."""
        return self._scored_loss(batch["features"], batch["labels"], batch["mask"])

    def _scored_loss(self, features: Tensor, labels: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Loss and scores ``[B, L]`` (the scorer's combination of its members, ``combined_scores``)."""
        members = member_scores(self.scorer, self.normalizer(features, mask))  # [B, L, K]
        return self._members_loss(members, labels, mask), combined_scores(self.scorer, members, mask)

    def _loss_of(self, features: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        """The training loss of a batch (forward and backward); what ``compile`` compiles."""
        return self._members_loss(self._training_members(features, mask), labels, mask)

    def _training_members(self, features: Tensor, mask: Tensor) -> Tensor:
        """``member_scores`` of raw features for training. A plain MLP on CPU in float32 runs through
        oneDNN (``rankers.neural.onednn_mlp``) or, where MKL runs its AVX-512 kernels, through MKL in
        the module's reused buffers (``rankers.neural.mkl_mlp``): the same values and gradients as
        the scorer's own, faster. Anything else runs through the scorer. ``[B, L, F] -> [B, L, K]``."""
        if torch.is_grad_enabled():
            layers = onednn_mlp.applies(self.scorer, features)
            if layers is not None:
                return onednn_mlp.mlp_scores(layers, self.normalizer(features, mask)).unsqueeze(-1)
            layers = mkl_mlp.applies(self.scorer, features)
            if layers is not None:
                return mkl_mlp.training_scores(layers, features, mask, self.normalizer, self._workspace).unsqueeze(-1)
        return member_scores(self.scorer, self.normalizer(features, mask))

    def _members_loss(self, members: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        """The loss of the members' scores ``[B, L, K]``. The K members are stacked along the batch
        (``[K * B, L]``), so each member trains on its own loss, whatever the loss; with M losses,
        member k on loss ``k mod M``, and the loss is the members' mean."""
        k, n_losses = members.shape[-1], len(self.losses)
        loss = members.new_zeros(())
        for m, loss_fn in enumerate(self.losses):
            own = members[..., m::n_losses]  # [B, L, K / M]
            stacked = own.movedim(-1, 0).reshape(-1, members.shape[1])
            count = own.shape[-1]
            loss = loss + loss_fn(stacked, labels.repeat(count, 1), mask.repeat(count, 1)) * (count / k)
        return loss

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        trainer = getattr(self, "_trainer", None)
        resuming = trainer is not None and trainer.state.fn == "fit"
        if resuming and holds_looped_members(checkpoint.get("state_dict", {}), "scorer."):
            raise ValueError(
                "this checkpoint holds an ensemble written before the members were stacked (scorer.others.*): "
                "its weights load for validate, test and export, but its optimizer state does not fit the "
                "stacked parameters, so a fit cannot resume from it; start a new fit instead"
            )

    def on_fit_start(self) -> None:
        self._check_step_options()
        if self._without_validation():
            passes = self.hparams.epochs_without_validation
            if not isinstance(passes, int):
                raise ValueError(
                    f"model.epochs_without_validation={passes!r}: an integer here; 'cv' is resolved by "
                    "train.py (rankers.pipeline.train), which chooses the count before the fit"
                )
            self.check_passes(passes, "model.epochs_without_validation")

    def _check_step_options(self) -> None:
        """What manual optimization would silently skip, refused before the first step."""
        trainer = self.trainer
        grouped = getattr(trainer.datamodule, "steps_per_batch", 1) if trainer.datamodule is not None else 1
        if self.automatic_optimization:
            if grouped > 1:
                raise ValueError(f"data.steps_per_batch={grouped} needs model.step_graphs=true")
            return
        # (Lightning itself refuses gradient clipping and accumulation under manual optimization)
        refusals = {
            "trainer.precision=16-mixed (a gradient scaler)": str(trainer.precision) == "16-mixed",
            "several processes (DDP)": trainer.world_size > 1,
        }
        refused = [name for name, present in refusals.items() if present]
        if refused:
            raise ValueError(
                f"model.step_graphs takes the optimizer's steps itself; it cannot run with {', '.join(refused)}"
            )

    def _without_validation(self) -> bool:
        return bool(self.hparams.get("epochs_without_validation")) and not self.trainer.limit_val_batches

    def on_train_epoch_end(self) -> None:
        if self._without_validation():
            self.stop_after(self.hparams.epochs_without_validation)

    def on_train_start(self) -> None:
        self.val_best.reset()  # forget the sanity-check validation of the untrained model

    def training_step(self, batch: Batch | list[Batch], batch_idx: int) -> Tensor:
        if not self.automatic_optimization:
            return self._own_steps(batch if isinstance(batch, list) else [batch])
        if self._cuda_graphs:  # a new step: the previous step's graph outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        loss = self._train_loss(batch["features"], batch["labels"], batch["mask"])
        self.train_loss(loss)
        self._log_train_loss(loss, batch["mask"].shape[0])
        return loss

    def _own_steps(self, batches: list[Batch]) -> Tensor:
        """``step_graphs``: one optimizer step per batch, through the step runner; the batches' losses."""
        runner = self._step_runner()
        losses = torch.stack([runner.step(b["features"], b["labels"], b["mask"]) for b in batches])
        sizes = [b["mask"].shape[0] for b in batches]
        self._count_optimizer_steps(len(batches))
        # (new_full fills on the device; new_tensor would copy from pageable host memory: a sync)
        self.train_loss(losses, weight=torch.stack([losses.new_full((), size) for size in sizes]))
        self._log_train_loss(losses, sum(sizes))
        return losses.mean()

    def _step_runner(self) -> StepRunner:
        optimizer = self.optimizers().optimizer  # the torch optimizer, not Lightning's wrapper: no closure
        if self._runner is None or self._runner.optimizer is not optimizer:
            params = [p for p in self.parameters() if p.requires_grad]
            self._runner = StepRunner(self._loss_of, optimizer, params)
        return self._runner

    def _count_optimizer_steps(self, steps: int) -> None:
        """Lightning counts manual steps in its optimizer wrapper, which the runner does not call:
        count them, so ``trainer.global_step`` (checkpoints, ``max_steps``) is the number of updates."""
        progress = self.trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress
        for _ in range(steps):
            progress.increment_ready()
            progress.increment_completed()

    def _logs_train_loss(self) -> bool:
        """Whether this training step logs its loss: on the steps whose values Lightning writes (every
        ``trainer.log_every_n_steps``, as its ``should_update_logs`` decides for this step) and on each
        epoch's first step, which registers the epoch mean (``train_loss`` is updated every step; its mean
        is computed at the epoch's end). Each ``self.log`` call moves Lightning's result entry to the
        device, about 1 ms a step on CPU (the 64-query CPU row of ``bench/train_throughput.py`` ran +9.5% ±
        2.9% without it), for values only the written steps read. The progress bar's step loss changes
        when a step is written."""
        trainer = self._trainer
        if trainer is None:
            return True
        if self._loss_logged_epoch != trainer.current_epoch:
            self._loss_logged_epoch = trainer.current_epoch
            return True
        written = getattr(trainer._logger_connector, "should_update_logs", True)
        return bool(written or trainer.fast_dev_run)

    def _log_train_loss(self, loss: Tensor, size: int) -> None:
        if not self._logs_train_loss():
            return
        show_step = self.step_loss_in_progress_bar
        if show_step is None:
            show_step = loss.device.type == "cpu"
        if show_step:
            self.log("train/loss", self.train_loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=size)
        else:  # the same values under the same names; only the epoch mean is read for the progress bar
            self.log("train/loss_step", self.train_loss, on_step=True, on_epoch=False, batch_size=size)
            self.log("train/loss_epoch", self.train_loss, on_step=False, on_epoch=True, prog_bar=True, batch_size=size)

    def _evaluate(self, batch: Batch, stage: str, metrics: nn.ModuleDict) -> None:
        loss, scores = self.model_step(batch)
        size = batch["mask"].shape[0]
        if stage == "val":
            # weighted by real queries: a DDP padding batch (one empty query) weighs nothing
            self.val_loss.update(loss, weight=batch["mask"].any(-1).sum())
            self.log("val/loss", self.val_loss, on_epoch=True, batch_size=size)
        for name, metric in metrics.items():
            metric.update(scores, batch["labels"], batch["mask"])
            self.log(f"{stage}/{name}", metric, on_epoch=True, prog_bar=name == "ndcg@10", batch_size=size)

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_metrics)

    def on_validation_epoch_end(self) -> None:
        name = self.monitor.removeprefix("val/")
        self.val_best(self.val_metrics[name].compute())
        # the same value on every rank (computed from synced metrics); sync_dist keeps Lightning exact about it
        self.log(f"{self.monitor}_best", self.val_best.compute(), prog_bar=True, sync_dist=True)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_metrics)

    def predict_step(self, batch: Batch, batch_idx: int) -> Tensor:
        return self(batch["features"], batch["mask"])

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = self.optimizer_factory(params=self.parameters())
        if not self.automatic_optimization and self.device.type == "cuda":
            make_capturable(optimizer)
        if self.scheduler_factory is None:
            return {"optimizer": optimizer}
        scheduler = self.scheduler_factory(optimizer=optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "monitor": self.monitor, "interval": "epoch"},
        }

    def export_model(self, out_dir: str | Path) -> dict[str, str]:
        """``scorer.pt``, ``scorer.onnx`` and ``meta.json``: raw ``[L, F]`` features in, ``[L]`` scores out."""
        # the export takes raw features: a feature map's input width, not the scorer's
        raw_width = getattr(self.normalizer, "in_features", self.hparams.n_features)
        return export_scorer(self.normalizer, self.scorer, out_dir, raw_width)
