// The PRank / OAP stream on CPU: Algorithm 1 (Crammer & Singer) under Algorithm 2's Bernoulli
// presentation (Harrington), for R runs x N perceptrons. Built by kernels/prank_cpu.py.
//
// One work item: the perceptrons [first, last) of run r stream the T examples in order; each
// example's features are used by every perceptron of the block while in L1, and the block's
// weights (BLOCK * d floats) stay in L2 across the stream. Compiled for AVX2/FMA and for the
// baseline, the loader picks at run time (GCC function multiversioning).
#include <torch/extension.h>
#include <ATen/Parallel.h>

namespace {

struct Stream {
  int64_t R, N, d, K, T;
  const float* x;        // [R, T, d] contiguous
  const int64_t* y;      // [R, T] contiguous
  const bool* shown;     // [T, R, N] contiguous
  float* w;              // [R, N, d] contiguous
  float* c;              // [R, N, K] contiguous
  int64_t* out;          // predictions, element (r, n, t) at r * out_r + n * out_n + t * out_t
  int64_t out_r, out_n, out_t;
  float* mistakes;       // [R, N] contiguous, incremented
  float* correct;        // [R, N] contiguous, incremented
};

__attribute__((target_clones("arch=haswell", "default")))
void stream_block(const Stream& s, int64_t r, int64_t first, int64_t last) {
  const int64_t d = s.d, K = s.K;
  for (int64_t t = 0; t < s.T; ++t) {
    const float* xt = s.x + (r * s.T + t) * d;
    const int64_t label = s.y[r * s.T + t];
    for (int64_t n = first; n < last; ++n) {
      const int64_t p = r * s.N + n;
      float* w = s.w + p * d;
      float* c = s.c + p * K;
      float score = 0.f;
#pragma omp simd reduction(+ : score)
      for (int64_t j = 0; j < d; ++j) score += w[j] * xt[j];
      int64_t predicted = 0;  // thresholds stay ordered (Lemma 1): count those <= score
      for (int64_t q = 0; q < K; ++q) predicted += (score - c[q] >= 0.f);
      s.out[r * s.out_r + n * s.out_n + t * s.out_t] = predicted;
      if (!s.shown[(t * s.R + r) * s.N + n]) continue;
      if (predicted == label) {
        s.correct[p] += 1.f;
        continue;
      }
      s.mistakes[p] += 1.f;
      float total = 0.f;  // sum_r a(r)
      for (int64_t q = 0; q < K; ++q) {
        const float sign = label <= q ? -1.f : 1.f;  // l(r), Algorithm 1 line 4
        if ((score - c[q]) * sign <= 0.f) {            // lines 6-8
          c[q] -= sign;
          total += sign;
        }
      }
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) w[j] += total * xt[j];
    }
  }
}

}  // namespace

// x [R, T, d] float, y [R, T] int64, presented [T, R, N] bool (the chunk's Bernoulli draws),
// weights [R, N, d] and thresholds [R, N, K] float (contiguous, updated in place), predictions
// [R, N, T] int64 (any strides, written: the rank predicted before each update), mistakes and
// correct [R, N] float (contiguous, incremented by the presented examples mispredicted / not).
void prank_stream(torch::Tensor x, torch::Tensor y, torch::Tensor presented, torch::Tensor weights,
                  torch::Tensor thresholds, torch::Tensor predictions, torch::Tensor mistakes,
                  torch::Tensor correct) {
  TORCH_CHECK(x.is_contiguous() && y.is_contiguous() && presented.is_contiguous(), "inputs must be contiguous");
  TORCH_CHECK(weights.is_contiguous() && thresholds.is_contiguous(), "state must be contiguous");
  TORCH_CHECK(mistakes.is_contiguous() && correct.is_contiguous(), "counters must be contiguous");
  TORCH_CHECK(x.scalar_type() == at::kFloat && weights.scalar_type() == at::kFloat, "float32 features and state");
  TORCH_CHECK(y.scalar_type() == at::kLong && predictions.scalar_type() == at::kLong, "int64 labels and predictions");
  TORCH_CHECK(presented.scalar_type() == at::kBool, "presented must be bool");
  Stream s;
  s.R = weights.size(0);
  s.N = weights.size(1);
  s.d = weights.size(2);
  s.K = thresholds.size(2);
  s.T = x.size(1);
  TORCH_CHECK(x.size(0) == s.R && x.size(2) == s.d && y.size(1) == s.T, "x [R, T, d] and y [R, T]");
  TORCH_CHECK(presented.size(0) == s.T && presented.size(1) == s.R && presented.size(2) == s.N, "presented [T, R, N]");
  TORCH_CHECK(predictions.size(0) == s.R && predictions.size(1) == s.N && predictions.size(2) == s.T,
              "predictions [R, N, T]");
  s.x = x.data_ptr<float>();
  s.y = y.data_ptr<int64_t>();
  s.shown = presented.data_ptr<bool>();
  s.w = weights.data_ptr<float>();
  s.c = thresholds.data_ptr<float>();
  s.out = predictions.data_ptr<int64_t>();
  s.out_r = predictions.stride(0);
  s.out_n = predictions.stride(1);
  s.out_t = predictions.stride(2);
  s.mistakes = mistakes.data_ptr<float>();
  s.correct = correct.data_ptr<float>();
  const int64_t BLOCK = 16;
  const int64_t blocks = (s.N + BLOCK - 1) / BLOCK;
  at::parallel_for(0, s.R * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / blocks, first = (item % blocks) * BLOCK;
      stream_block(s, r, first, std::min(s.N, first + BLOCK));
    }
  });
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("prank_stream", &prank_stream, "PRank/OAP stream of one chunk (in place)");
}
