// The pairwise perceptron / Committee Perceptron stream on CPU (Elsas, Carvalho & Carbonell), for R
// runs at once: the same arithmetic as the tensor path rankers.pairwise_perceptron.PairwisePerceptron
// (fit_pairs), one C++ loop per run instead of a dozen tensor ops per pair. Built by
// kernels/pairwise_perceptron_cpu.py.
//
// One work item is one run: it streams its pairs in its own order, reading d_i and d_j from the
// document matrix (no difference vectors are materialized); its weights and committee stay in
// cache. Runs are spread over the cores.
#include <torch/extension.h>
#include <ATen/Parallel.h>

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

}  // namespace

// features [N, d], pairs [P, 2] int64 (preferred document first), eta [P], order [R, T] int64 (pair
// indices, each run's stream); state, contiguous and updated in place: weights and weighted_sum
// [R, d], committee [R, K + 1, d], counts and births [R, K + 1] int64, successes and hypotheses [R]
// int64; mistakes [R, T] bool is written.
void pairwise_stream(torch::Tensor features, torch::Tensor pairs, torch::Tensor eta, torch::Tensor order,
                     torch::Tensor weights, torch::Tensor weighted_sum, torch::Tensor committee, torch::Tensor counts,
                     torch::Tensor births, torch::Tensor successes, torch::Tensor hypotheses, torch::Tensor mistakes) {
  for (const auto& tensor : {features, pairs, eta, order, weights, weighted_sum, committee, counts, births, successes,
                             hypotheses, mistakes}) {
    TORCH_CHECK(tensor.is_contiguous() && tensor.device().is_cpu(), "every tensor must be contiguous, on the CPU");
  }
  const auto type = weights.scalar_type();
  TORCH_CHECK(features.scalar_type() == type && eta.scalar_type() == type && weighted_sum.scalar_type() == type &&
                  committee.scalar_type() == type,
              "features, eta and the float state must share one dtype");
  for (const auto& tensor : {pairs, order, counts, births, successes, hypotheses}) {
    TORCH_CHECK(tensor.scalar_type() == at::kLong, "indices and counters must be int64");
  }
  TORCH_CHECK(mistakes.scalar_type() == at::kBool, "mistakes must be bool");
  const int64_t R = weights.size(0), d = weights.size(1), K = committee.size(1) - 1, T = order.size(1);
  TORCH_CHECK(features.size(1) == d && pairs.size(1) == 2 && eta.size(0) == pairs.size(0), "features [N, d], pairs [P, 2], eta [P]");
  TORCH_CHECK(order.size(0) == R && mistakes.size(0) == R && mistakes.size(1) == T, "order and mistakes [R, T]");
  TORCH_CHECK(committee.size(0) == R && committee.size(2) == d && counts.size(1) == K + 1 && births.size(1) == K + 1,
              "committee [R, K + 1, d], counts and births [R, K + 1]");
  AT_DISPATCH_FLOATING_TYPES(type, "pairwise_stream", [&] {
    const scalar_t* x = features.data_ptr<scalar_t>();
    const int64_t* pair = pairs.data_ptr<int64_t>();
    const scalar_t* step = eta.data_ptr<scalar_t>();
    const int64_t* stream = order.data_ptr<int64_t>();
    scalar_t* w = weights.data_ptr<scalar_t>();
    scalar_t* sum = weighted_sum.data_ptr<scalar_t>();
    scalar_t* members = committee.data_ptr<scalar_t>();
    int64_t* count = counts.data_ptr<int64_t>();
    int64_t* birth = births.data_ptr<int64_t>();
    int64_t* c = successes.data_ptr<int64_t>();
    int64_t* l = hypotheses.data_ptr<int64_t>();
    bool* out = mistakes.data_ptr<bool>();
    at::parallel_for(0, R, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        stream_run<scalar_t>(r, T, d, K, x, pair, step, stream, w, sum, members, count, birth, c, l, out);
      }
    });
  });
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pairwise_stream", &pairwise_stream, "pairwise perceptron / committee stream of R runs (in place)");
}
