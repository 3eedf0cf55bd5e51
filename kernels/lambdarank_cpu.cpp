// LambdaRank's cost and lambdas over the pairs of ranked lists, fused into one pass per row on CPU.
//
// Each query is ranked by score here (real documents first); for a row i < min(top, n) and every
// column j in (i, n) with different labels, x = sign(y_i - y_j) sigma (s_i - s_j) and
//   w    = |g_i - g_j| |d_i - d_j| / IDCG          (|Delta NDCG@k|; d is 0 at ranks >= k)
//   cost += w softplus(-x)
//   push  = -w sigmoid(-x) sign sigma,  grad_i += push,  grad_j -= push
// exactly the pairs, weights and formulas of losses.pairwise.pairwise_sums with logistic_pair and
// delta_ndcg_weight. The inner loop over j is branch-free so the compiler vectorizes it (with
// vector expf / log1pf from glibc's libmvec under -ffast-math); rows of different queries run on
// different threads.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

namespace {

void one_query(const float* __restrict s, const float* __restrict y, const float* __restrict g,
               const float* __restrict d, float inverse_ideal,
               int64_t n, int64_t top, float sigma, float* __restrict grad, float* cost, float* count) {
    double cost_sum = 0.0, pair_count = 0.0;
    const int64_t rows = std::min(top, n);
    for (int64_t i = 0; i < rows; ++i) {
        const float si = s[i], yi = y[i], gi = g[i], di = d[i];
        float row_push = 0.0f, row_cost = 0.0f, row_count = 0.0f;
#pragma omp simd reduction(+ : row_push, row_cost, row_count)
        for (int64_t j = i + 1; j < n; ++j) {
            const float dy = yi - y[j];
            const float sign = static_cast<float>(dy > 0.0f) - static_cast<float>(dy < 0.0f);
            const float x = sign * sigma * (si - s[j]);
            const float e = expf(-fabsf(x));
            const float softplus_minus_x = fmaxf(-x, 0.0f) + log1pf(e);
            const float sigmoid_minus_x = (x >= 0.0f ? e : 1.0f) / (1.0f + e);
            const float w = fabsf(gi - g[j]) * fabsf(di - d[j]) * inverse_ideal * fabsf(sign);
            const float push = -sigmoid_minus_x * w * sign * sigma;
            row_cost += w * softplus_minus_x;
            row_push += push;
            grad[j] -= push;
            row_count += fabsf(sign);
        }
        grad[i] += row_push;
        cost_sum += row_cost;
        pair_count += row_count;
    }
    *cost = static_cast<float>(cost_sum);
    *count = static_cast<float>(pair_count);
}

// One query in list order: rank its real documents by score (descending, NaN first as torch.sort
// puts it, ties by position), its ideal DCG from the same gains, the pairs in ranked order, and the
// lambdas scattered back to list positions.
void rank_and_sum(const float* s, const float* y, const float* g, const bool* real, const float* d,
                  int64_t length, int64_t top, float sigma, float* grad, float* cost, float* count) {
    std::vector<int64_t> order;
    order.reserve(length);
    for (int64_t i = 0; i < length; ++i) {
        if (real[i]) order.push_back(i);
    }
    const int64_t n = static_cast<int64_t>(order.size());
    std::stable_sort(order.begin(), order.end(), [s](int64_t a, int64_t b) {
        const bool nan_a = std::isnan(s[a]), nan_b = std::isnan(s[b]);
        return nan_a != nan_b ? nan_a : s[a] > s[b];
    });
    std::vector<float> ranked(4 * n);
    float* rs = ranked.data();
    float* ry = rs + n;
    float* rg = ry + n;
    float* rgrad = rg + n;
    for (int64_t p = 0; p < n; ++p) {
        rs[p] = s[order[p]];
        ry[p] = y[order[p]];
        rg[p] = g[order[p]];
        rgrad[p] = 0.0f;
    }
    std::vector<float> ideal_gains(rg, rg + n);
    std::sort(ideal_gains.begin(), ideal_gains.end(), std::greater<float>());
    float ideal = 0.0f;
    for (int64_t p = 0; p < n; ++p) ideal += ideal_gains[p] * d[p];
    const float inverse_ideal = ideal > 0.0f ? 1.0f / ideal : 0.0f;
    one_query(rs, ry, rg, d, inverse_ideal, n, top, sigma, rgrad, cost, count);
    for (int64_t p = 0; p < n; ++p) grad[order[p]] = rgrad[p];
}

// scores, labels, gains [B, L] float32 in list order (gains 0 for padding); real [B, L] bool;
// discount [L + 1] float32 (0 at ranks >= k); top = min(k, L). Returns (cost [B], grad [B, L], count [B]).
std::vector<torch::Tensor> lambdarank_pairs(torch::Tensor scores, torch::Tensor labels, torch::Tensor gains,
                                            torch::Tensor real, torch::Tensor discount, double sigma,
                                            int64_t top) {
    TORCH_CHECK(scores.dtype() == torch::kFloat32 && scores.is_contiguous(), "scores: contiguous float32");
    TORCH_CHECK(real.dtype() == torch::kBool && real.is_contiguous(), "real: contiguous bool");
    const int64_t batch = scores.size(0), length = scores.size(1);
    auto grad = torch::zeros_like(scores);
    auto cost = torch::zeros({batch}, scores.options());
    auto count = torch::zeros({batch}, scores.options());
    const float* s = scores.data_ptr<float>();
    const float* y = labels.data_ptr<float>();
    const float* g = gains.data_ptr<float>();
    const bool* r = real.data_ptr<bool>();
    const float* d = discount.data_ptr<float>();
    float* gr = grad.data_ptr<float>();
    float* c = cost.data_ptr<float>();
    float* k = count.data_ptr<float>();
    const float slope = static_cast<float>(sigma);
    at::parallel_for(0, batch, 1, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
            const int64_t at = b * length;
            rank_and_sum(s + at, y + at, g + at, r + at, d, length, top, slope, gr + at, c + b, k + b);
        }
    });
    return {cost, grad, count};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("lambdarank_pairs", &lambdarank_pairs, "LambdaRank cost, lambdas and pair counts of ranked lists");
}
