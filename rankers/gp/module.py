"""``model=gp_preference``: Chu & Ghahramani's preference GP trained under ``train.py`` on query lists.

    python train.py model=gp_preference                      # the built-in synthetic LETOR data
    python train.py model=gp_preference data=letor data.train=train.txt data.val=vali.txt data.test=test.txt

Training pairs are every within-query pair of documents with different labels (the higher label
preferred). A GP is O(n^3) in its items and the Laplace step O(K^3) in its pairs, so the training set
is subsampled: whole queries in a seeded random order until ``max_items`` documents, then at most
``max_pairs`` of their pairs uniformly; documents left in no pair are dropped. Every count is logged
and written to results.json (``gp``). The hyperparameters (``kappa``, ``sigma``) maximize the Laplace
evidence unless ``optimize=false``. The scorer is the posterior mean latent utility,
``f(x) = k(x, X_train) @ alpha`` with ``alpha = D^T a``; it is exported with the feature
normalization inside (``scorer.pt`` / ``scorer.onnx``, ``python -m rankers.score``).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from datamodules.normalization import FeatureNormalizer
from rankers.gp.kernels import SemiSupervisedKernel, gaussian_kernel
from rankers.gp.preference import check_pairs, fit, fit_hyperparameters, scatter_pairs
from rankers.learner import FitLog, Learner, Normalized, QuerySplit

logger = logging.getLogger(__name__)


class GPScorer(nn.Module):
    """Posterior mean utility ``f(x) = sum_i alpha_i k(x, x_i)``: ``[..., L, F]`` -> ``[..., L]``.

    ``kernel`` is any kernel module of ``rankers.gp.kernels`` (the module's: ``gaussian_kernel(kappa0,
    kappa)``, the ARD Gaussian of eq. 2). Plain tensor ops: it scripts and exports to ONNX.
    """

    def __init__(self, items: Tensor, alpha: Tensor, kernel: nn.Module) -> None:
        super().__init__()
        self.register_buffer("items", items.float())
        self.register_buffer("alpha", alpha.float())
        self.kernel = kernel.float()

    def forward(self, features: Tensor) -> Tensor:
        return self.kernel(features, self.items) @ self.alpha


def within_query_pairs(labels: Tensor) -> tuple[Tensor, Tensor]:
    """Every ``(i, j)`` of one query with ``labels[i] > labels[j]``: ``(i [M], j [M])``."""
    return torch.nonzero(labels[:, None] > labels[None, :], as_tuple=True)


class GPPreferenceModule(Learner):
    """Chu & Ghahramani's preference GP, fit once on the whole training split (``rankers.harness``).

    Args:
        n_features, normalizer: from ``datamodule.model_inputs()``.
        max_items: the most training documents in the GP (whole queries, seeded random order).
        max_pairs: the most preference pairs (uniform subsample of those queries' pairs).
        max_docs_per_query: None, or a seeded sample of at most this many documents of each query
            (more, smaller queries within ``max_items``); the documents left out are counted.
        kappa: the kernel's inverse squared length-scale (null: ``1 / n_features``, the features being
            normalized); ard: one ``kappa`` per feature; kappa0: the kernel amplitude (fixed: see
            ``fit_hyperparameters``); sigma: the likelihood noise of eq. (6).
        optimize: fit ``kappa`` and ``sigma`` by the Laplace evidence (L-BFGS, ``optimize_steps``).
        conflicts: ``allow`` | ``error``: contradicting pairs (none arise from one query's labels).
        graph_neighbours: None (the GP prior of eq. 2) or k: the semi-supervised prior of eq. (5) over
            the used queries' documents, every one kept (those in no pair are its unlabelled points)
            with a k-NN graph; the hyperparameters are fit on the plain prior first.
        seed: the subsample's seed.
        ks, gain, empty, monitor: metric conventions (``metrics.functional``).
        cpu_threads: torch threads while fitting/evaluating on CPU (None: unchanged).

    Device: the trainer's (small dense float64 solves; GPU unmeasured here).
    """

    name = "gp_preference"

    def __init__(
        self,
        *,
        n_features: int,
        normalizer: FeatureNormalizer | None = None,
        max_items: int = 600,
        max_pairs: int = 1000,
        max_docs_per_query: int | None = 10,
        kappa: float | None = None,
        ard: bool = False,
        kappa0: float = 1.0,
        sigma: float = 1.0,
        optimize: bool = True,
        optimize_steps: int = 20,
        conflicts: str = "allow",
        graph_neighbours: int | None = None,
        seed: int = 0,
        ks: Sequence[int] = (1, 5, 10),
        gain: str = "exp2",
        empty: float = 0.0,
        monitor: str = "val/ndcg@10",
        cpu_threads: int | None = 1,
    ) -> None:
        super().__init__(ks=ks, gain=gain, empty=empty, monitor=monitor)
        self.save_hyperparameters(ignore=["normalizer"])
        self.cpu_threads = cpu_threads
        if min(max_items, max_pairs) < 2:
            raise ValueError("model.max_items and model.max_pairs must be >= 2")
        if conflicts not in ("allow", "error"):
            raise ValueError(f"model.conflicts must be allow or error, got {conflicts!r}")
        self.normalizer = normalizer or FeatureNormalizer("none", num_features=n_features)
        # preallocated (checkpoints have one shape): rows past n_items have alpha = 0
        self.register_buffer("items", torch.zeros(max_items, n_features))
        self.register_buffer("alpha", torch.zeros(max_items))
        self.register_buffer("kappa", torch.full((n_features,), 1.0 / n_features if kappa is None else kappa))
        self.register_buffer("sigma", torch.tensor(float(sigma)))
        self.register_buffer("n_items", torch.zeros((), dtype=torch.long))
        self.counts: dict[str, Any] = {}

    # -- scoring ------------------------------------------------------------------------------------
    def scorer(self) -> nn.Module:
        """The posterior mean of raw features (the normalizer inside): ``[..., L, F]`` -> ``[..., L]``."""
        n = int(self.n_items)
        return Normalized(self.normalizer, GPScorer(self.items[:n].cpu(), self.alpha[:n].cpu(), self.kernel().cpu()))

    def kernel(self) -> nn.Module:
        """The fitted covariance: ``gaussian_kernel(kappa0, kappa)`` (ARD, ``kappa [F]``)."""
        return gaussian_kernel(self.hparams.kappa0, self.kappa.detach().clone())

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        """Raw features ``[B, L, F]`` -> posterior mean utilities ``[B, L]``."""
        x = self.normalizer(features, mask)
        n = int(self.n_items)
        return self.kernel()(x, self.items[:n].to(x.dtype)) @ self.alpha[:n].to(x.dtype)

    # -- the fit --------------------------------------------------------------------------------------
    def _queries(self, split: QuerySplit) -> list[tuple[Tensor, Tensor]]:
        """``[(normalized features [L, F], labels [L])]`` of every training query."""
        if split.stream:
            raise ValueError("model=gp_preference learns from query lists (LETOR-style data with a mask)")
        x = split.normalized(self.normalizer)
        bounds = split.offsets.tolist()
        return [(x[a:b], split.labels[a:b].float()) for a, b in itertools.pairwise(bounds)]

    def _training_pairs(self, queries: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor, Tensor]:
        """The subsample: ``(items [n, F] float64, v [K], u [K])`` and ``self.counts``."""
        g = torch.Generator().manual_seed(self.hparams.seed)
        order = torch.randperm(len(queries), generator=g).tolist()
        chosen, items, v, u, n_items, no_pairs = [], [], [], [], 0, 0
        total_pairs = 0
        cap = self.hparams.max_docs_per_query
        sampled_out = 0
        for q in order:
            x, labels = queries[q]
            dropped = 0
            if cap is not None and len(labels) > cap:  # a seeded sample of the query's documents
                keep = torch.randperm(len(labels), generator=g)[:cap].to(labels.device)
                dropped = len(labels) - cap
                x, labels = x[keep], labels[keep]
            i, j = within_query_pairs(labels)
            if len(i) == 0:
                no_pairs += 1
                continue
            if n_items + len(labels) > self.hparams.max_items:
                continue  # whole queries only; a smaller one later may still fit
            chosen.append(q)
            sampled_out += dropped
            items.append(x)
            v.append(i + n_items)
            u.append(j + n_items)
            n_items += len(labels)
            total_pairs += len(i)
        if not items:
            raise ValueError(
                f"model=gp_preference: no training query has two documents with different labels within "
                f"model.max_items={self.hparams.max_items} documents"
            )
        x, v_all, u_all = torch.cat(items), torch.cat(v), torch.cat(u)
        if len(v_all) > self.hparams.max_pairs:
            keep = torch.randperm(len(v_all), generator=g)[: self.hparams.max_pairs].to(v_all.device)
            v_all, u_all = v_all[keep], u_all[keep]
        used = torch.zeros(len(x), dtype=torch.bool, device=x.device)
        used[v_all] = True
        used[u_all] = True
        if self.hparams.graph_neighbours is not None:
            used[:] = True  # the semi-supervised prior: documents in no pair are its unlabelled points
        renumber = torch.cumsum(used.long(), 0) - 1
        self.counts = {
            "queries": len(queries),
            "queries_used": len(chosen),
            "queries_without_pairs": no_pairs,
            "documents_sampled_out_of_used_queries": sampled_out,
            "max_docs_per_query": cap,
            "documents_in_used_queries": n_items,
            "items": int(used.sum()),
            "pairs_in_used_queries": total_pairs,
            "pairs": len(v_all),
            "max_items": self.hparams.max_items,
            "max_pairs": self.hparams.max_pairs,
        }
        return x[used].double(), renumber[v_all], renumber[u_all]

    def fit(self, train: QuerySplit, val: QuerySplit | None, *, log: FitLog) -> None:
        if int(self.n_items) > 0:  # resumed from a fitted checkpoint
            return
        self.fit_queries(self._queries(train))
        log.scalar("train/log_evidence", self.counts["log_evidence"], 1)

    def fit_queries(self, queries: list[tuple[Tensor, Tensor]]) -> None:
        """Fit on ``[(normalized features [L, F], labels [L])]`` queries: subsample, hyperparameters,
        posterior; fills the scorer's buffers and ``self.counts``."""
        x, v, u = self._training_pairs(queries)
        check_pairs(v, u, len(x), conflicts=self.hparams.conflicts)
        kappa = self.kappa.double()[0] if not self.hparams.ard else self.kappa.double()
        sigma = float(self.sigma)
        if self.hparams.optimize:
            found = fit_hyperparameters(
                x,
                v,
                u,
                kappa=kappa,
                sigma=sigma,
                kappa0=self.hparams.kappa0,
                ard=self.hparams.ard,
                steps=self.hparams.optimize_steps,
            )
            kappa, sigma = found["kappa"], found["sigma"]
        kappa_vec = kappa.expand(x.shape[1]) if kappa.dim() == 0 else kappa
        kernel = gaussian_kernel(self.hparams.kappa0, kappa_vec).double()
        if self.hparams.graph_neighbours is not None:
            # eq. (5) over the used queries' documents: k~(a, b) = k(a, b) - k(a, X) G k(X, b)
            kernel = SemiSupervisedKernel(kernel, x, neighbours=min(self.hparams.graph_neighbours, len(x) - 1))
        prior = kernel(x, x)
        state = fit(0.5 * (prior + prior.T), v, u, sigma)
        alpha = scatter_pairs(state.alpha[0], v, u, len(x))
        if isinstance(kernel, SemiSupervisedKernel):
            # f(x) = k~(x, X) alpha, written over the base kernel: the same exportable scorer, other weights
            x, alpha = kernel.expansion(x, alpha)
        n = len(x)
        self.items[:n] = x.to(self.items.dtype)
        self.alpha[:n] = alpha.to(self.alpha.dtype)
        self.kappa.copy_(kappa_vec.to(self.kappa.dtype))
        self.sigma.fill_(sigma)
        self.n_items.fill_(n)
        self.counts.update(
            log_evidence=float(state.log_evidence[0]),
            newton_steps=state.iterations,
            sigma=sigma,
            kappa=[float(k) for k in kappa_vec] if self.hparams.ard else float(kappa_vec[0]),
        )
        logger.info("gp_preference: %s", self.counts)

    # -- results and export ---------------------------------------------------------------------------
    def fit_results(self) -> dict[str, Any]:
        return {"gp": self.counts or {"items": int(self.n_items)}}
