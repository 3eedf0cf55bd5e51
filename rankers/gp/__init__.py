"""Gaussian-process rankers. This part: collaborative ordinal regression (Yu, Yu & Tresp 2005):
the ordinal probit with EP and Laplace, GPR, and the EM that learns a shared prior (CGPR, CGPOR).
See docs/gp_ordinal.md."""

from rankers.gp.collaborative import MODELS, ModelOptions, Split, errors, fit_predict
from rankers.gp.ordinal import (
    IndefiniteKernelError,
    check_kernel,
    ep_ordinal,
    laplace_ordinal,
    ordinal_log_likelihood,
    ordinal_moments,
    predict_ordinal,
    site_posterior,
)

__all__ = [
    "MODELS",
    "IndefiniteKernelError",
    "ModelOptions",
    "Split",
    "check_kernel",
    "ep_ordinal",
    "errors",
    "fit_predict",
    "laplace_ordinal",
    "ordinal_log_likelihood",
    "ordinal_moments",
    "predict_ordinal",
    "site_posterior",
]
