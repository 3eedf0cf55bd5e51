// The logistic pairwise losses (RankNet, LambdaRank, LambdaLoss) over ranked lists: cost, lambdas and
// pair counts fused into one pass per row on CPU.
//
// Each query is ranked by score here (real documents first); for a row i < min(top, n) and every
// column j in (i, n) with different labels, x = sign(y_i - y_j) sigma (s_i - s_j) and
//   w     = 1                                                              (RankNet: unit weights)
//         or |g_i - g_j| / IDCG (rho |dk_i - dk_j| + delta |D_{j-i-1} - D_{j-i}|)
//           (rho 1, delta 0: LambdaRank's |Delta NDCG@k|, dk the discount cut at k; rho 0, delta 1:
//            LambdaLoss NDCG-Loss2; rho 1, delta mu: NDCG-Loss2++; D the uncut discount)
//   cost += scale w softplus(-x)
//   push  = -scale w sigmoid(-x) sign sigma,  grad_i += push,  grad_j -= push
// (scale 1 for the natural log, 1 / ln 2 for LambdaLoss's log2): exactly the pairs, weights and
// formulas of losses.pairwise.pairwise_sums. The inner loop over j is branch-free so the compiler
// vectorizes it (vector expf / log1pf from glibc's libmvec under -ffast-math); different queries
// run on different threads.
//
// A plain C ABI over raw pointers (loaded with ctypes; kernels/lambdarank_cpu.py checks dtypes and
// contiguity and allocates the outputs), so that it builds in a second without torch's headers.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

namespace {

struct Weighting {
    bool unit;           // RankNet: every pair weighs 1
    float rho, delta;    // the two terms' coefficients (see above)
    float scale;         // 1, or 1 / ln 2
    const float* cut;    // dk [L + 1]: discount, 0 at ranks >= k
    const float* full;   // D [L + 1]: discount, uncut
};

template <bool Unit>
void one_query(const float* __restrict s, const float* __restrict y, const float* __restrict g,
               const Weighting& how, float inverse_ideal, int64_t n, int64_t top, float sigma,
               float* __restrict grad, float* cost, float* count) {
    double cost_sum = 0.0, pair_count = 0.0;
    const int64_t rows = std::min(top, n);
    const float* __restrict dk = how.cut;
    const float* __restrict D = how.full;
    const float rho = how.rho, delta = how.delta, scale = how.scale;
    for (int64_t i = 0; i < rows; ++i) {
        const float si = s[i], yi = y[i], gi = g[i], di = dk[i];
        const float* __restrict gap_discount = D - i - 1;  // gap_discount[j] = D[j - i - 1]
        float row_push = 0.0f, row_cost = 0.0f, row_count = 0.0f;
#pragma omp simd reduction(+ : row_push, row_cost, row_count)
        for (int64_t j = i + 1; j < n; ++j) {
            const float dy = yi - y[j];
            const float sign = static_cast<float>(dy > 0.0f) - static_cast<float>(dy < 0.0f);
            const float x = sign * sigma * (si - s[j]);
            const float e = expf(-fabsf(x));
            const float softplus_minus_x = fmaxf(-x, 0.0f) + log1pf(e);
            const float sigmoid_minus_x = (x >= 0.0f ? e : 1.0f) / (1.0f + e);
            float w = fabsf(sign);
            if constexpr (!Unit) {
                const float position = rho * fabsf(di - dk[j]) + delta * fabsf(gap_discount[j] - gap_discount[j + 1]);
                w *= fabsf(gi - g[j]) * inverse_ideal * position;
            }
            const float push = -scale * sigmoid_minus_x * w * sign * sigma;
            row_cost += scale * w * softplus_minus_x;
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
// puts it, ties by position), its ideal DCG@k from the same gains, the pairs in ranked order, and
// the lambdas scattered back to list positions.
void rank_and_sum(const float* s, const float* y, const float* g, const bool* real, const Weighting& how,
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
    if (how.unit) {
        one_query<true>(rs, ry, rg, how, 0.0f, n, top, sigma, rgrad, cost, count);
    } else {
        std::vector<float> ideal_gains(rg, rg + n);
        std::sort(ideal_gains.begin(), ideal_gains.end(), std::greater<float>());
        float ideal = 0.0f;
        for (int64_t p = 0; p < n; ++p) ideal += ideal_gains[p] * how.cut[p];
        const float inverse_ideal = ideal != 0.0f ? 1.0f / ideal : 0.0f;  // as the tensor path: 0 only for 0
        one_query<false>(rs, ry, rg, how, inverse_ideal, n, top, sigma, rgrad, cost, count);
    }
    for (int64_t p = 0; p < n; ++p) grad[order[p]] = rgrad[p];
}

}  // namespace

#ifndef LTR_KERNEL_HASH
#define LTR_KERNEL_HASH "unstamped"
#endif

extern "C" {

// The hash of the source and flags this library was built from (kernels/_native.py checks it).
const char* ltr_kernel_hash() { return LTR_KERNEL_HASH; }

// scores, labels, gains [B, L] float32 in list order (gains 0 for padding); real [B, L] bool;
// cut, full [L + 1] float32 discounts (cut: 0 at ranks >= k); top = min(k, L); unit: RankNet's
// weights (gains and discounts unused). Writes cost [B], grad [B, L] (zeroed by the caller where
// padding) and count [B], all float32 contiguous; queries are spread over `threads` threads.
// Returns 0, or 1 if a query could not be processed (out of memory).
int ltr_logistic_pairs(int64_t batch, int64_t length, const float* scores, const float* labels, const float* gains,
                       const bool* real, const float* cut, const float* full, bool unit, double rho, double delta,
                       double scale, double sigma, int64_t top, float* grad, float* cost, float* count,
                       int threads) {
    const Weighting how{unit, static_cast<float>(rho), static_cast<float>(delta), static_cast<float>(scale), cut,
                        full};
    const float slope = static_cast<float>(sigma);
    int failed = 0;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(| : failed)
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t at = b * length;
        try {  // std::vector may throw; an exception must not cross the C ABI
            rank_and_sum(scores + at, labels + at, gains + at, real + at, how, length, top, slope, grad + at,
                         cost + b, count + b);
        } catch (...) {
            failed = 1;
        }
    }
    return failed;
}

}  // extern "C"
