"""``model=unbiased``: a neural ranker trained on a click log, with position bias corrected.

``debias``:

* ``none``: clicks taken as labels (the naive baseline);
* ``ips``: clicks weighted by the inverse of their positions' examination propensities, estimated
  from the log by regression EM (``rankers.clicks.propensity``), floored at ``clip``: per click, or
  (the default, ``ips_estimator=per_document``) each document's clicks over its expected
  examinations, pooled over the positions it was shown at (``losses.ips_click_mass``);
* ``dla``: the dual learning algorithm (Ai, Bi, Luo, Guo & Croft, SIGIR 2018): a propensity model
  (one logit per position, softmax) learned together with the ranker, each trained on the other's
  inverse weights (inverse propensity for the ranker, inverse relevance for the propensity model).

The log arrives aggregated per (query, document, position) (``clicks``/``impressions`` ``[B, L, K]``):
the ranker's listwise or pairwise IPS loss (``losses.ips``) reads the weighted click mass of each
document (per click: ``sum_k clicks_k / max(theta_k, clip)``, which is the sessions' losses summed
when every session of a query shows the same documents, and their counterfactual form otherwise: a
document shown less often has less mass, as in per-session IPS; per document: the same expectation,
relevance times impressions). The exported scorer is the ordinary one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from datamodules.batching import Batch
from datamodules.clicks.cells import ClickCells
from losses import ips_click_mass, ips_listwise_loss, ips_pairwise_loss, listnet_loss
from losses.ips import ESTIMATORS
from rankers.clicks.propensity import em_propensities, harvest_propensities
from rankers.neural.module import RankerModule

DEBIAS = ("none", "ips", "dla")
LOSSES = {"listwise": ips_listwise_loss, "pairwise": ips_pairwise_loss}


class UnbiasedModule(RankerModule):
    """A ``RankerModule`` whose training targets come from clicks (see the module docstring).

    Args:
        debias: ``none`` | ``ips`` | ``dla``.
        click_loss: ``listwise`` (IPS softmax cross-entropy) or ``pairwise`` (IPS logistic pairs).
        clip: floor on the propensities in the weights (weights at most ``1 / clip``).
        ips_estimator: ``per_document`` (a document's clicks over its expected examinations, times
            its impressions) or ``per_click`` (each click over its position's propensity); see
            ``losses.ips_click_mass``. Both feed ``ips`` and ``dla``.
        dla_lr: learning rate of DLA's propensity logits.
        dla_clip: cap on DLA's inverse relevance weights.
        em_bootstrap: bootstrap replicates for the EM propensities' standard error.
        em_min_examinations: the EM's refits keep documents expected to have been examined at least
            this often (``rankers.clicks.propensity.em_propensities``).
        max_fit_minutes: stop training after the first epoch that ends past this many minutes (the
            best checkpoint so far is what is tested and exported; results.json says so); None: no limit.
        click_cells: the log's cells (from ``data.model_inputs()``); propensities are estimated here.
        Other arguments: ``RankerModule``'s (``loss`` is built from ``click_loss``).
    """

    def __init__(
        self,
        scorer: Callable[..., nn.Module],
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., Any] | None = None,
        *,
        debias: str = "ips",
        click_loss: str = "listwise",
        clip: float = 0.1,
        dla_lr: float = 0.3,
        dla_clip: float = 100.0,
        em_bootstrap: int = 10,
        em_min_examinations: float = 0.5,
        max_fit_minutes: float | None = 8.0,
        ips_estimator: str = "per_document",
        click_cells: ClickCells | None = None,
        loss: Any = None,
        **options: Any,
    ) -> None:
        if debias not in DEBIAS:
            raise ValueError(f"model.debias must be one of {DEBIAS}, got {debias!r}")
        if ips_estimator not in ESTIMATORS:
            raise ValueError(f"model.ips_estimator must be one of {ESTIMATORS}, got {ips_estimator!r}")
        if click_loss not in LOSSES:
            raise ValueError(f"model.click_loss must be one of {tuple(LOSSES)}, got {click_loss!r}")
        if click_cells is None:
            raise ValueError("model=unbiased trains on a click log: use data=clicks data.features=F data.clicks=C")
        # plain values: Hydra's ListConfig cannot be unpickled from a checkpoint with weights_only
        options = {key: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for key, v in options.items()}
        super().__init__(scorer, partial(LOSSES[click_loss]), optimizer, scheduler, **options)
        for name in ("click_cells", "loss", "options"):  # data and objects are not hyperparameters
            self.hparams.pop(name, None)
        self.hparams.update(
            debias=debias,
            click_loss=click_loss,
            clip=clip,
            dla_lr=dla_lr,
            dla_clip=dla_clip,
            ips_estimator=ips_estimator,
            em_min_examinations=em_min_examinations,
            max_fit_minutes=max_fit_minutes,
        )
        self.debias, self.clip, self.dla_lr, self.dla_clip = debias, clip, dla_lr, dla_clip
        self.ips_estimator = ips_estimator
        self.max_fit_minutes = max_fit_minutes
        self._fit_started = time.perf_counter()
        self.stopped_by_time = False
        self.estimate = em_propensities(click_cells, bootstrap=em_bootstrap, min_examinations=em_min_examinations)
        self.harvested = harvest_propensities(click_cells)
        self.register_buffer("propensity", torch.tensor(self.estimate.propensity, dtype=torch.float32))
        k = click_cells.max_position
        # DLA's propensity model: position logits, softmax-normalized, theta_k relative to position 1
        self.position_logits = nn.Parameter(torch.zeros(k)) if debias == "dla" else None

    def position_propensity(self) -> Tensor:
        """``[K]`` the propensities the ranker's weights use (position 1 = 1)."""
        if self.debias == "dla":
            logp = torch.log_softmax(self.position_logits, 0)
            return (logp - logp[0]).exp().detach()
        return self.propensity

    def click_targets(self, batch: Batch) -> Tensor:
        """``[B, L]`` weighted click mass (``losses.ips_click_mass`` by ``ips_estimator``; ``none``: clicks)."""
        clicks = batch["clicks"]
        if self.debias == "none":
            return clicks.sum(-1)
        theta = self.position_propensity()
        return ips_click_mass(clicks, batch["impressions"], theta, clip=self.clip, estimator=self.ips_estimator)

    def _dla_propensity_loss(self, scores: Tensor, batch: Batch) -> Tensor:
        """DLA's propensity loss: softmax cross-entropy of the position logits against clicks weighted
        by inverse relevance ``r_top / r_d`` (the ranker's softmax, detached, capped at ``dla_clip``)."""
        mask = batch["mask"]
        s = scores.detach().masked_fill(~mask, float("-inf"))
        top = s.amax(-1, keepdim=True).masked_fill(~mask.any(-1, keepdim=True), 0.0)
        inverse_relevance = (top - s).clamp_max(float(np.log(self.dla_clip))).exp().masked_fill(~mask, 0.0)
        mass = (batch["clicks"] * inverse_relevance[..., None]).sum(1)  # [B, K]
        total = mass.sum(-1, keepdim=True)
        keep = total[:, 0] > 0
        target = mass / total.clamp_min(1e-12)
        loss = -(target * torch.log_softmax(self.position_logits, 0)).sum(-1)
        return loss[keep].sum() / keep.sum().clamp_min(1)

    def _click_loss(self, batch: Batch) -> tuple[Tensor, Tensor]:
        scores = self(batch["features"], batch["mask"])
        loss = self.losses[0](scores, self.click_targets(batch), batch["mask"])
        if self.debias == "dla":
            loss = loss + self._dla_propensity_loss(scores, batch)
        return loss, scores

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        loss, _ = self._click_loss(batch)
        self.train_loss(loss)
        self.log("train/loss", self.train_loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=len(loss.shape))
        return loss

    def _evaluate(self, batch: Batch, stage: str, metrics: nn.ModuleDict) -> None:
        if "clicks" not in batch:  # a labelled test file: the ordinary metrics on true labels
            scores = self(batch["features"], batch["mask"])
            loss = listnet_loss(scores, batch["labels"], batch["mask"])
            labels = batch["labels"]
        else:  # held-out log queries: graded by the method's own click targets, scaled to [0, 1]
            loss, scores = self._click_loss(batch)
            if stage == "val":
                self._offline.append(self.offline_clicks(scores.detach(), batch))
            targets = self.click_targets(batch).masked_fill(~batch["mask"], 0.0)
            labels = targets / targets.amax(-1, keepdim=True).clamp_min(1e-12)
        size = batch["mask"].shape[0]
        if stage == "val":
            self.val_loss.update(loss, weight=batch["mask"].any(-1).sum())
            self.log("val/loss", self.val_loss, on_epoch=True, batch_size=size)
        for name, metric in metrics.items():
            metric.update(scores, labels, batch["mask"])
            self.log(f"{stage}/{name}", metric, on_epoch=True, prog_bar=name == "ndcg@10", batch_size=size)

    def on_train_start(self) -> None:
        super().on_train_start()
        self._fit_started = time.perf_counter()

    def on_train_epoch_end(self) -> None:
        super().on_train_epoch_end()
        limit = self.max_fit_minutes
        last_epoch = self.current_epoch + 1 >= (self.trainer.max_epochs or 0) > 0
        # only a stop the limit itself causes is reported as one (not early stopping's, not the last epoch)
        if limit is not None and not self.trainer.should_stop and not last_epoch and self._elapsed() > 60 * limit:
            self.trainer.should_stop = True  # Lightning ends the fit here; early stopping's best checkpoint stands
            self.stopped_by_time = True

    def _elapsed(self) -> float:
        return time.perf_counter() - self._fit_started

    def on_validation_epoch_start(self) -> None:
        self._offline: list[Tensor] = []

    def offline_clicks(self, scores: Tensor, batch: Batch, k: int = 10) -> Tensor:
        """``[B, 2]`` per held-out query: the IPS estimate of the clicks per session this ranker's top
        ``k`` would get under the log's examination (EM propensities, ``clip``), and the log's own
        clicks per session. A document's relevance is estimated as ``sum_p clicks_p / theta_p /
        sessions`` (counterfactual: a document never shown counts 0)."""
        theta = self.propensity.to(scores.dtype)
        sessions = batch["impressions"][..., 0].sum(-1).clamp_min(1)  # every session shows position 1
        relevance = (batch["clicks"] / theta.clamp_min(self.clip)).sum(-1) / sessions[:, None]
        order = scores.masked_fill(~batch["mask"], float("-inf")).argsort(dim=-1, descending=True, stable=True)
        top = min(k, order.shape[-1], len(theta))
        ranked = relevance.gather(-1, order[:, :top]) * batch["mask"].gather(-1, order[:, :top])
        estimate = (ranked * theta[:top]).sum(-1)
        logged = batch["clicks"].sum((-1, -2)) / sessions
        return torch.stack([estimate, logged], -1)[batch["mask"].any(-1)]

    def offline_evaluation(self) -> dict[str, Any]:
        """Mean and 95% interval (normal, over held-out queries) of ``offline_clicks``."""
        values = torch.cat(getattr(self, "_offline", None) or [torch.zeros(0, 2)]).double().cpu().numpy()
        if len(values) < 2:
            return {}
        mean, half = values.mean(0), 1.96 * values.std(0, ddof=1) / np.sqrt(len(values))
        return {
            f"{name}_clicks@10_per_session": {"mean": float(m), "ci95": [float(m - h), float(m + h)]}
            for name, m, h in zip(("ranker_ips_estimate", "logging_ranker"), mean, half, strict=True)
        } | {"queries": len(values)}

    def configure_optimizers(self) -> dict[str, Any]:
        configured = super().configure_optimizers()
        if self.position_logits is not None:  # the propensity model learns at its own rate
            optimizer = configured["optimizer"]
            optimizer.param_groups[0]["params"] = [p for p in self.parameters() if p is not self.position_logits]
            optimizer.add_param_group({"params": [self.position_logits], "lr": self.dla_lr, "weight_decay": 0.0})
        return configured

    def extra_results(self, out: Path) -> dict[str, Any]:
        """``propensity`` (EM, position 1 first, position 1 = 1.0), its standard errors, the
        harvesting estimate, DLA's learned propensities, and a plot ``propensity.png``."""
        results: dict[str, Any] = {
            "propensity": [float(v) for v in self.estimate.propensity],
            "propensity_stderr": None if self.estimate.stderr is None else [float(v) for v in self.estimate.stderr],
            "propensity_estimates": {"em": self.estimate.as_dict(), "harvest": self.harvested.as_dict()},
            "debias": self.debias,
            "offline": self.offline_evaluation(),
            "stopped_by_max_fit_minutes": self.stopped_by_time,
        }
        if self.debias == "dla":
            learned = self.position_propensity().cpu().numpy()
            results["propensity_estimates"]["dla"] = {"method": "dla", "propensity": [float(v) for v in learned]}
        try:
            from rankers.clicks.plots import plot_propensities

            results["propensity_plot"] = str(plot_propensities(results["propensity_estimates"], out / "propensity.png"))
        except Exception as error:  # a plot never fails a run that trained
            results["propensity_plot"] = f"not drawn: {type(error).__name__}: {error}"
        return results
