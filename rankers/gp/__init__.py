"""Gaussian-process rankers: covariance functions, the semi-supervised (graph-deformed) prior,
Chu & Ghahramani's preference GP (Laplace) and its active learning. See docs/gp.md."""

from rankers.gp.kernels import (
    JITTER_LADDER,
    NotPositiveDefiniteError,
    SemiSupervisedKernel,
    cholesky_jitter,
    deformation,
    knn_laplacian,
    rbf,
    squared_distances,
)
from rankers.gp.preference import (
    InconsistentPairsError,
    LaplaceState,
    check_pairs,
    fit,
    laplace_mode,
    log_evidence,
    pair_gram,
    pair_probability,
    posterior_latent,
    predict_pairs,
)

__all__ = [
    "JITTER_LADDER",
    "InconsistentPairsError",
    "LaplaceState",
    "NotPositiveDefiniteError",
    "SemiSupervisedKernel",
    "check_pairs",
    "cholesky_jitter",
    "deformation",
    "fit",
    "knn_laplacian",
    "laplace_mode",
    "log_evidence",
    "pair_gram",
    "pair_probability",
    "posterior_latent",
    "predict_pairs",
    "rbf",
    "squared_distances",
]
