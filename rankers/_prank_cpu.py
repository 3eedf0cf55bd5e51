"""A fused C++ loop for PRank streams on CPU, compiled on first use (torch.utils.cpp_extension).

Why hand-written: on CPU the tensor formulation pays a dozen op dispatches per example whatever
the arithmetic, which held it near 5x the one-run-at-a-time reference (``bench/perceptron.py
--tensor-path`` against the default). The perceptrons of the ensemble are independent given the
stream and the Bernoulli draws, so this loop streams the examples through blocks of perceptrons of
one run, keeping their weights and thresholds in cache, and spreads the (run, block) items over the
cores. It computes exactly Algorithm 1 under Algorithm 2's presentation, like
``PRankEnsemble._step``, and a test checks both paths agree.

If the compiler or ninja is missing, ``kernel()`` returns None and the tensor path runs instead.
"""

from __future__ import annotations

import logging
import warnings

import torch

log = logging.getLogger(__name__)

SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

// One work item: the perceptrons [first, last) of run r stream the T examples in order; each
// example's features are used by every perceptron of the block while in L1, and the block's
// weights (BLOCK * d floats) stay in L2 across the stream. Compiled for AVX2/FMA and for the
// baseline, the loader picks at run time (GCC function multiversioning).
__attribute__((target_clones("arch=haswell", "default")))
static void stream_block(int64_t r, int64_t first, int64_t last, int64_t R, int64_t N, int64_t d,
                         int64_t K, int64_t T, const float* xp, const int64_t* yp, const bool* shown,
                         float* wp, float* cp, int64_t* out, bool* missed) {
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = xp + (r * T + t) * d;
    const int64_t label = yp[r * T + t];
    for (int64_t n = first; n < last; ++n) {
      const int64_t p = r * N + n;
      float* w = wp + p * d;
      float* c = cp + p * K;
      float score = 0.f;
#pragma omp simd reduction(+ : score)
      for (int64_t j = 0; j < d; ++j) score += w[j] * xt[j];
      int64_t predicted = 0;  // thresholds stay ordered (Lemma 1): count those <= score
      for (int64_t q = 0; q < K; ++q) predicted += (score - c[q] >= 0.f);
      out[p * T + t] = predicted;
      if (!shown[(t * R + r) * N + n] || predicted == label) continue;
      missed[p * T + t] = true;
      float total = 0.f;  // sum_r a(r)
      for (int64_t q = 0; q < K; ++q) {
        const float sign = label <= q ? -1.f : 1.f;
        if ((score - c[q]) * sign <= 0.f) {
          c[q] -= sign;
          total += sign;
        }
      }
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) w[j] += total * xt[j];
    }
  }
}

// x [R, T, d] float, y [R, T] int64, presented [T, R, N] bool (the chunk's Bernoulli draws),
// weights [R, N, d] and thresholds [R, N, k-1] float (contiguous, updated in place).
// Returns predictions [R, N, T] int64 made before each update and mistakes [R, N, T] bool.
std::vector<torch::Tensor> prank_stream(torch::Tensor x, torch::Tensor y, torch::Tensor presented,
                                        torch::Tensor weights, torch::Tensor thresholds) {
  const int64_t R = weights.size(0), N = weights.size(1), d = weights.size(2);
  const int64_t K = thresholds.size(2), T = x.size(1);
  auto predictions = torch::empty({R, N, T}, y.options());
  auto mistakes = torch::zeros({R, N, T}, presented.options());
  const float* xp = x.data_ptr<float>();
  const int64_t* yp = y.data_ptr<int64_t>();
  const bool* shown = presented.data_ptr<bool>();
  float* wp = weights.data_ptr<float>();
  float* cp = thresholds.data_ptr<float>();
  int64_t* out = predictions.data_ptr<int64_t>();
  bool* missed = mistakes.data_ptr<bool>();
  const int64_t BLOCK = 16;
  const int64_t blocks = (N + BLOCK - 1) / BLOCK;
  at::parallel_for(0, R * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / blocks, first = (item % blocks) * BLOCK;
      stream_block(r, first, std::min(N, first + BLOCK), R, N, d, K, T, xp, yp, shown, wp, cp, out, missed);
    }
  });
  return {predictions, mistakes};
}
"""

_KERNEL: object | None = None
_TRIED = False


def kernel():
    """The compiled module (``prank_stream``), or None where it cannot be built."""
    global _KERNEL, _TRIED
    if not _TRIED:
        _TRIED = True
        try:
            from torch.utils.cpp_extension import load_inline

            _KERNEL = load_inline(
                name="ltr_prank_cpu",
                cpp_sources=SOURCE,
                functions=["prank_stream"],
                extra_cflags=["-O3", "-fopenmp"],
                extra_ldflags=["-fopenmp"],
                verbose=False,
            )
        except Exception as error:  # no compiler, no ninja, read-only cache: the tensor path still works
            warnings.warn(f"PRank CPU kernel unavailable, using the tensor path: {error}", stacklevel=2)
            _KERNEL = None
    return _KERNEL


def stream(
    x: torch.Tensor, y: torch.Tensor, presented: torch.Tensor, weights: torch.Tensor, thresholds: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run one chunk: ``x [R, T, d]``, ``y [R, T]``, ``presented [T, R, N]``; updates the state in place.

    Returns ``predictions [R, N, T]`` long and ``mistakes [R, N, T]`` bool.
    """
    module = kernel()
    assert module is not None
    w = weights.contiguous()
    c = thresholds.contiguous()
    predictions, mistakes = module.prank_stream(x.contiguous(), y.contiguous(), presented.contiguous(), w, c)
    if w.data_ptr() != weights.data_ptr():
        weights.copy_(w)
    if c.data_ptr() != thresholds.data_ptr():
        thresholds.copy_(c)
    return predictions, mistakes
