// The pairwise perceptron / Committee Perceptron stream on CPU (Elsas, Carvalho & Carbonell), for R
// runs at once: the same arithmetic as the tensor path rankers.pairwise_perceptron.PairwisePerceptron
// (fit_pairs), one C++ loop per run instead of a dozen tensor ops per pair. Built by
// kernels/pairwise_perceptron_cpu.py.
//
// One work item is one run: it streams its pairs in its own order, reading d_i and d_j from the
// document matrix (no difference vectors are materialized); its weights and committee stay in
// cache. Runs are spread over the cores.
//
// A plain C ABI over raw pointers (loaded with ctypes; kernels/pairwise_perceptron_cpu.py checks
// shapes, dtypes and contiguity before the call), so that it builds in a second without torch.

#include <cstdint>
#include <limits>

namespace {

constexpr int64_t kShift = int64_t(1) << 31;  // priority = count * kShift + birth (PRIORITY_SHIFT)

int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

template <typename scalar_t>
void stream_run(int64_t r, int64_t T, int64_t d, int64_t K, const scalar_t* features, const int64_t* pairs,
                const scalar_t* eta, const int64_t* order, scalar_t* weights, scalar_t* weighted_sum,
                scalar_t* committee, int64_t* counts, int64_t* births, int64_t* successes, int64_t* hypotheses,
                bool* mistakes) {
  scalar_t* w = weights + r * d;
  scalar_t* sum = weighted_sum + r * d;
  scalar_t* members = committee + r * (K + 1) * d;  // K slots and the tensor path's spare slot
  int64_t* count = counts + r * (K + 1);
  int64_t* birth = births + r * (K + 1);
  int64_t c = successes[r], l = hypotheses[r];
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = order[r * T + t];
    const scalar_t* xi = features + pairs[2 * p] * d;
    const scalar_t* xj = features + pairs[2 * p + 1] * d;
    // s(d_i) - s(d_j) = w . (d_i - d_j): products in the weights' type, summed in double as the
    // tensor path does, so that the two summation orders cannot flip a decision. That is also why
    // the sum may be split over SIMD lanes (omp simd): without the pragma it runs one lane at a
    // time, and at width 9,600 (the quantile-threshold features) that loop is the whole cost
    double margin = 0;
#pragma omp simd reduction(+ : margin)
    for (int64_t k = 0; k < d; ++k) {
      const scalar_t difference = xi[k] - xj[k];
      const scalar_t product = w[k] * difference;
      margin += static_cast<double>(product);
    }
    const bool mistake = margin <= 0;
    mistakes[r * T + t] = mistake;
    if (!mistake) {
      ++c;
      continue;
    }
    // the committee's minimum by (count, birth): the first slot of least priority, as argmin
    int64_t lowest = std::numeric_limits<int64_t>::max(), slot = 0;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t priority = count[k] * kShift + birth[k];
      if (priority < lowest) {
        lowest = priority;
        slot = k;
      }
    }
    if (c > floor_div(lowest, kShift)) {  // c_l > c_min: the hypothesis replaces the minimum
      scalar_t* target = members + slot * d;
      for (int64_t k = 0; k < d; ++k) target[k] = w[k];
      count[slot] = c;
      birth[slot] = l;
    }
    const scalar_t closed = static_cast<scalar_t>(c);
    const scalar_t step = eta[p];
#pragma omp simd
    for (int64_t k = 0; k < d; ++k) {
      const scalar_t weighted = w[k] * closed;
      sum[k] += weighted;  // the averaged perceptron's sum c_l w^l
      const scalar_t difference = xi[k] - xj[k];
      const scalar_t update = difference * step;
      w[k] += update;  // w^{l+1} = w^l + eta_q (d_i - d_j)
    }
    ++l;
    c = 0;
  }
  successes[r] = c;
  hypotheses[r] = l;
}

template <typename scalar_t>
void stream_runs(int64_t R, int64_t T, int64_t d, int64_t K, const scalar_t* features, const int64_t* pairs,
                 const scalar_t* eta, const int64_t* order, scalar_t* weights, scalar_t* weighted_sum,
                 scalar_t* committee, int64_t* counts, int64_t* births, int64_t* successes, int64_t* hypotheses,
                 bool* mistakes, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t r = 0; r < R; ++r) {
    stream_run<scalar_t>(r, T, d, K, features, pairs, eta, order, weights, weighted_sum, committee, counts, births,
                         successes, hypotheses, mistakes);
  }
}

}  // namespace

#ifndef LTR_KERNEL_HASH
#define LTR_KERNEL_HASH "unstamped"
#endif

extern "C" {

// The hash of the source and flags this library was built from (kernels/_native.py checks it).
const char* ltr_kernel_hash() { return LTR_KERNEL_HASH; }

// features [N, d], pairs [P, 2] int64 (preferred document first), eta [P], order [R, T] int64 (pair
// indices, each run's stream); state, contiguous and updated in place: weights and weighted_sum
// [R, d], committee [R, K + 1, d], counts and births [R, K + 1] int64, successes and hypotheses [R]
// int64; mistakes [R, T] bool is written. One entry point per floating type (float32, float64);
// the runs are spread over `threads` threads.
#define LTR_PAIRWISE_STREAM(NAME, TYPE)                                                                            \
  void NAME(int64_t R, int64_t T, int64_t d, int64_t K, const TYPE* features, const int64_t* pairs,              \
            const TYPE* eta, const int64_t* order, TYPE* weights, TYPE* weighted_sum, TYPE* committee,           \
            int64_t* counts, int64_t* births, int64_t* successes, int64_t* hypotheses, bool* mistakes,           \
            int threads) {                                                                                       \
    stream_runs<TYPE>(R, T, d, K, features, pairs, eta, order, weights, weighted_sum, committee, counts, births, \
                      successes, hypotheses, mistakes, threads);                                                 \
  }

LTR_PAIRWISE_STREAM(ltr_pairwise_stream_f32, float)
LTR_PAIRWISE_STREAM(ltr_pairwise_stream_f64, double)

}  // extern "C"
