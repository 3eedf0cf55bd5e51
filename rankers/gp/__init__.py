"""Gaussian-process rankers: composed covariance functions and the semi-supervised (graph-deformed)
prior, likelihood objects (the probit preference and the ordinal probit) with the family's one
Laplace approximation and one EP over any of them, Chu & Ghahramani's preference GP and its active
learning, and Yu, Yu & Tresp's collaborative ordinal regression (GPR, GPOR and the EM that learns a
shared prior: CGPR, CGPOR). The papers' tables and figures are ``experiments.chu2005`` and
``experiments.yu2005``. See docs/gp.md."""

from rankers.gp.collaborative import MODELS, ModelOptions, Split, fit_predict
from rankers.gp.inference import GaussianPosterior, ep, laplace, laplace_log_evidence, site_posterior
from rankers.gp.kernels import (
    JITTER_LADDER,
    RBF,
    NotPositiveDefiniteError,
    Product,
    Scale,
    SemiSupervisedKernel,
    Sum,
    cholesky_jitter,
    deformation,
    gaussian_kernel,
    knn_laplacian,
    rbf,
    squared_distances,
)
from rankers.gp.likelihoods import Likelihood, OrdinalLikelihood, ProbitPreference, gaussian_sites
from rankers.gp.ordinal import IndefiniteKernelError, check_kernel, fit_thresholds, predict_ordinal
from rankers.gp.preference import (
    InconsistentPairsError,
    check_pairs,
    fit,
    fit_hyperparameters,
    log_evidence,
    pair_gram,
    pair_probability,
    posterior_latent,
    predict_pairs,
)

__all__ = [
    "JITTER_LADDER",
    "MODELS",
    "RBF",
    "GaussianPosterior",
    "InconsistentPairsError",
    "IndefiniteKernelError",
    "Likelihood",
    "ModelOptions",
    "NotPositiveDefiniteError",
    "OrdinalLikelihood",
    "ProbitPreference",
    "Product",
    "Scale",
    "SemiSupervisedKernel",
    "Split",
    "Sum",
    "check_kernel",
    "check_pairs",
    "cholesky_jitter",
    "deformation",
    "ep",
    "fit",
    "fit_hyperparameters",
    "fit_predict",
    "fit_thresholds",
    "gaussian_kernel",
    "gaussian_sites",
    "knn_laplacian",
    "laplace",
    "laplace_log_evidence",
    "log_evidence",
    "pair_gram",
    "pair_probability",
    "posterior_latent",
    "predict_ordinal",
    "predict_pairs",
    "rbf",
    "site_posterior",
    "squared_distances",
]
