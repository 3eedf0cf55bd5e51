// The PRank / OAP stream on CPU: Algorithm 1 (Crammer & Singer) under Algorithm 2's Bernoulli
// presentation (Harrington), for R runs x N perceptrons, optionally recording the voted
// perceptron's history (PRank-VP); the voted evaluation; and the Widrow-Hoff baseline's stream.
// Built by kernels/prank_cpu.py.
//
// One work item: up to LANES perceptrons of one run stream the T examples in order, side by side
// in SIMD lanes (the state stored perceptron-minor, [R, d, N], as the ensemble holds it), their
// weights and thresholds in L1 across the stream. Compiled for AVX2 and for the baseline, the
// loader picks at run time (GCC function multiversioning).
//
// A plain C ABI over raw pointers (loaded with ctypes; kernels/prank_cpu.py checks shapes, dtypes
// and contiguity before the call), so that it builds in a second without torch's headers.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

// Perceptrons per work item: the item's per-perceptron scratch (scores, ranks, steps) lives on
// the stack, and its state (LANES * (d + K) floats) in L1 across the stream.
constexpr int64_t LANES = 64;

struct Stream {
  int64_t R, N, d, K, T;
  const float* x;        // [R, T, d] contiguous
  const int64_t* y;      // [R, T] contiguous
  const bool* shown;     // [T, R, N] contiguous
  float* w;              // [R, d, N] contiguous (perceptron-minor: the ensemble's own layout)
  float* c;              // [R, K, N] contiguous
  int64_t* out;          // predictions, element (r, n, t) at r * out_r + n * out_n + t * out_t; or null
  int64_t out_r, out_n, out_t;
  float* mistakes;       // [R, N] contiguous, incremented
  float* correct;        // [R, N] contiguous, incremented
  // the voted perceptron's history (all null without it): open [R, N] counts the correct rounds
  // survived by each perceptron's current hypothesis; on a mistake a hypothesis with a vote is
  // written (pre-update) as record hist_n[p] of its perceptron p: hist_w [R*N, cap, d],
  // hist_c [R*N, cap, K], hist_s [R*N, cap]
  float* open;
  float* hist_w;
  float* hist_c;
  float* hist_s;
  int64_t* hist_n;       // [R*N], records written (set to 0 here first)
  int64_t cap;
};

// The voted history of a work item's perceptrons at one example: a correct presented round
// extends the current hypothesis' survival; a mistake closes it, and it is stored (pre-update) if
// it survived a round, as the tensor path's slots keep it. w, c, open and count are the item's own
// copies (lane i: w[j * B + i], c[q * B + i], open[i], count[i]); perceptron first + i of run r
// writes its records at row p = r * N + first + i of hist_*.
void record(const Stream& s, int64_t r, int64_t first, int64_t B, const bool* shown, const int32_t* wrong,
            const float* w, const float* c, float* open, int64_t* count) {
  const int64_t d = s.d, K = s.K;
  for (int64_t i = 0; i < B; ++i) {
    if (!shown[i]) continue;
    if (!wrong[i]) {
      open[i] += 1.f;
      continue;
    }
    if (open[i] > 0.f) {
      const int64_t p = r * s.N + first + i, m = count[i]++;
      if (m < s.cap) {  // cannot overflow with cap >= (T + 1) / 2; the caller checks hist_n anyway
        for (int64_t j = 0; j < d; ++j) s.hist_w[(p * s.cap + m) * d + j] = w[j * B + i];
        for (int64_t q = 0; q < K; ++q) s.hist_c[(p * s.cap + m) * K + q] = c[q * B + i];
        s.hist_s[p * s.cap + m] = open[i];
      }
    }
    open[i] = 0.f;
  }
}

// One work item: the perceptrons [first, last) (at most LANES) of run r stream the T examples in
// order. Every step is a few loops across the perceptrons, which the compiler runs across SIMD
// lanes: no branch on a Bernoulli draw or a mistake, and a perceptron not presented the example or
// predicting it right gets a zero step (selected away, so its state is untouched bit for bit).
// Each score is summed over j in order, without fused multiply-adds.
//
// The item streams a private copy of its state (weights, thresholds, counters, survivals),
// written back at the end: two items share cache lines where their perceptrons meet in a row of
// [R, d, N] (the two halves of a run's 100 perceptrons, say), and updating them from two threads
// at every step cost three times the work in cache-line transfers.
__attribute__((target_clones("arch=haswell", "default")))
void stream_block(const Stream& s, int64_t r, int64_t first, int64_t last) {
  const int64_t d = s.d, K = s.K, N = s.N, B = last - first;
  std::vector<float> state((d + K + 3) * B);
  std::vector<int64_t> count(B, 0);
  float* __restrict__ w = state.data();  // w[j * B + i]: perceptron first + i, feature j
  float* __restrict__ c = w + d * B;
  float* __restrict__ mistakes = c + K * B;
  float* __restrict__ correct = mistakes + B;
  float* __restrict__ open = correct + B;
  for (int64_t i = 0; i < B; ++i) {
    const int64_t p = r * N + first + i;
    for (int64_t j = 0; j < d; ++j) w[j * B + i] = s.w[(r * d + j) * N + first + i];
    for (int64_t q = 0; q < K; ++q) c[q * B + i] = s.c[(r * K + q) * N + first + i];
    mistakes[i] = s.mistakes[p];
    correct[i] = s.correct[p];
    open[i] = s.open ? s.open[p] : 0.f;
  }
  alignas(32) float score[LANES], total[LANES];
  alignas(32) int32_t predicted[LANES], wrong[LANES];
  for (int64_t t = 0; t < s.T; ++t) {
    const float* xt = s.x + (r * s.T + t) * d;
    const int32_t label = static_cast<int32_t>(s.y[r * s.T + t]);
    const bool* shown = s.shown + (t * s.R + r) * N + first;
#pragma omp simd
    for (int64_t i = 0; i < B; ++i) score[i] = 0.f;
    for (int64_t j = 0; j < d; ++j) {
      const float xj = xt[j];
      const float* wj = w + j * B;
#pragma omp simd
      for (int64_t i = 0; i < B; ++i) score[i] += wj[i] * xj;
    }
#pragma omp simd
    for (int64_t i = 0; i < B; ++i) predicted[i] = 0;
    for (int64_t q = 0; q < K; ++q) {  // thresholds stay ordered (Lemma 1): count those <= score
      const float* cq = c + q * B;
#pragma omp simd
      for (int64_t i = 0; i < B; ++i) predicted[i] += (score[i] - cq[i] >= 0.f);
    }
    if (s.out) {
      for (int64_t i = 0; i < B; ++i) s.out[r * s.out_r + (first + i) * s.out_n + t * s.out_t] = predicted[i];
    }
    int32_t any = 0;
#pragma omp simd reduction(| : any)
    for (int64_t i = 0; i < B; ++i) {
      const int32_t presented = shown[i];
      wrong[i] = presented & (predicted[i] != label);
      mistakes[i] += static_cast<float>(wrong[i]);
      correct[i] += static_cast<float>(presented & (predicted[i] == label));
      any |= wrong[i];
    }
    if (s.open) record(s, r, first, B, shown, wrong, w, c, open, count.data());
    if (!any) continue;
#pragma omp simd
    for (int64_t i = 0; i < B; ++i) total[i] = 0.f;  // sum_r a(r)
    for (int64_t q = 0; q < K; ++q) {
      const float sign = label <= q ? -1.f : 1.f;  // l(r), Algorithm 1 line 4
      float* cq = c + q * B;
#pragma omp simd
      for (int64_t i = 0; i < B; ++i) {
        const int32_t hit = wrong[i] & ((score[i] - cq[i]) * sign <= 0.f);  // lines 6-8
        const float step = hit ? sign : 0.f;  // c - 0 and total + 0 leave both as they are
        cq[i] -= step;
        total[i] += step;
      }
    }
    for (int64_t j = 0; j < d; ++j) {
      const float xj = xt[j];
      float* wj = w + j * B;
#pragma omp simd
      for (int64_t i = 0; i < B; ++i) {
        const float updated = wj[i] + total[i] * xj;
        wj[i] = wrong[i] ? updated : wj[i];  // a select, not w + 0 * x (which an infinite x would spoil)
      }
    }
  }
  for (int64_t i = 0; i < B; ++i) {  // the state back
    const int64_t p = r * N + first + i;
    for (int64_t j = 0; j < d; ++j) s.w[(r * d + j) * N + first + i] = w[j * B + i];
    for (int64_t q = 0; q < K; ++q) s.c[(r * K + q) * N + first + i] = c[q * B + i];
    s.mistakes[p] = mistakes[i];
    s.correct[p] = correct[i];
    if (s.open) {
      s.open[p] = open[i];
      s.hist_n[p] = count[i];
    }
  }
}

// Algorithm 2's Bernoulli draws from a counter: draw i (i = (step * R + r) * N + n) is SplitMix64
// (Steele, Lea & Flood 2014) at state key + (i + 1) * GAMMA, its top 24 bits a float32 uniform in
// [0, 1) as torch.rand's, presented iff below tau[r]. Each draw depends on its position alone, so
// any thread, chunk or device gives the same ones; rankers.perceptron.ensemble.counter_draws is
// the same in torch ops (the reference, and the CUDA path).
constexpr uint64_t GAMMA = 0x9E3779B97F4A7C15ULL;

inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

__attribute__((target_clones("arch=haswell", "default")))
void bernoulli_rows(int64_t first, int64_t last, int64_t R, int64_t N, uint64_t key, int64_t step0, const float* tau,
                    bool* out) {
  for (int64_t row = first; row < last; ++row) {  // row = t * R + r of this call
    const float p = tau[row % R];
    const uint64_t base = key + (static_cast<uint64_t>(step0 * R + row) * N + 1) * GAMMA;
    bool* o = out + row * N;
#pragma omp simd
    for (int64_t n = 0; n < N; ++n) {
      const uint64_t z = mix64(base + static_cast<uint64_t>(n) * GAMMA);
      o[n] = static_cast<float>(z >> 40) * 0x1p-24f < p;
    }
  }
}

// Widrow-Hoff (the paper's baseline) for one (run, rate): w += eta (y - w.x) x per example, the
// estimate rounded to the nearest rank in 0..k-1 before the update (halves up), as
// rankers.perceptron.ensemble.WidrowHoff's tensor path does it in float32.
// The weights are updated in a private copy (neighbouring items' weights share cache lines).
void widrow_hoff_one(int64_t T, int64_t d, int64_t k, const float* x, const float* y, float eta, float* weights,
                     int64_t* out) {
  std::vector<float> w(weights, weights + d);
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * d;
    float estimate = 0.f;
    for (int64_t j = 0; j < d; ++j) estimate += w[j] * xt[j];
    if (out) out[t] = static_cast<int64_t>(std::min(std::max(std::floor(estimate + 0.5f), 0.f),
                                                    static_cast<float>(k - 1)));
    const float step = eta * (y[t] - estimate);
    for (int64_t j = 0; j < d; ++j) w[j] += step * xt[j];
  }
  std::copy(w.begin(), w.end(), weights);
}

}  // namespace

#ifndef LTR_KERNEL_HASH
#define LTR_KERNEL_HASH "unstamped"
#endif

extern "C" {

// The hash of the source and flags this library was built from (kernels/_native.py checks it).
const char* ltr_kernel_hash() { return LTR_KERNEL_HASH; }

// x [R, T, d] float, y [R, T] int64, presented [T, R, N] bool (the chunk's Bernoulli draws),
// weights [R, d, N] and thresholds [R, K, N] float (perceptron-minor, contiguous, updated in
// place), predictions [R, N, T] int64 at strides (out_r, out_n, out_t) (written: the rank
// predicted before each update) or null, mistakes and
// correct [R, N] float (contiguous, incremented by the presented examples mispredicted / not).
// With open non-null, the voted perceptron's history as in struct Stream (cap records per
// perceptron). The (run, block of perceptrons) items are spread over `threads` threads, taken one
// at a time (dynamic: on a loaded machine a thread that loses its core does not hold the other at
// the end of the call with a fixed half of the items; the results do not depend on who runs what).
void ltr_prank_stream(int64_t R, int64_t N, int64_t d, int64_t K, int64_t T, const float* x, const int64_t* y,
                      const bool* presented, float* weights, float* thresholds, int64_t* predictions, int64_t out_r,
                      int64_t out_n, int64_t out_t, float* mistakes, float* correct, float* open, float* hist_w,
                      float* hist_c, float* hist_s, int64_t* hist_n, int64_t cap, int threads) {
  const Stream s{R, N, d, K, T, x, y, presented, weights, thresholds, predictions, out_r, out_n, out_t,
                 mistakes, correct, open, hist_w, hist_c, hist_s, hist_n, cap};
  const int64_t blocks = (N + LANES - 1) / LANES;
  const int64_t width = (N + blocks - 1) / blocks;  // N = 100: two items of 50, not 64 and 36
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (int64_t item = 0; item < R * blocks; ++item) {
    const int64_t r = item / blocks, first = (item % blocks) * width;
    stream_block(s, r, first, std::min(N, first + width));
  }
}

// Widrow-Hoff for R runs x E rates: x [R, T, d] float, y [R, T] float (the regressed rank), eta [E],
// weights [R, E, d] float (contiguous, updated in place), predictions [R, E, T] int64 (written: the
// rounded estimate before each update) or null. One (run, rate) per work item.
void ltr_widrow_hoff_stream(int64_t R, int64_t E, int64_t d, int64_t T, int64_t k, const float* x, const float* y,
                            const float* eta, float* weights, int64_t* predictions, int threads) {
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (int64_t item = 0; item < R * E; ++item) {
    const int64_t r = item / E, e = item % E;
    widrow_hoff_one(T, d, k, x + r * T * d, y + r * T, eta[e], weights + item * d,
                    predictions ? predictions + item * T : nullptr);
  }
}

// The draws of steps step0 .. step0 + T - 1: out [T, R, N] bool (contiguous), tau [R] float.
void ltr_bernoulli(int64_t T, int64_t R, int64_t N, uint64_t key, int64_t step0, const float* tau, bool* out,
                   int threads) {
  const int64_t rows = T * R, BLOCK = 1024;
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (int64_t first = 0; first < rows; first += BLOCK) {
    bernoulli_rows(first, std::min(rows, first + BLOCK), R, N, key, step0, tau, out);
  }
}

// The voted perceptron's sum over stored hypotheses (PRank-VP): for M hypotheses, weights [M, d]
// and thresholds [M, K] (float, contiguous), survival [M] double, run [M] and row [M] int64, and
// each run's test points feature-major, xt [runs, d, T] float: total[row[m] * T + t] +=
// survival[m] * rank_m(x[run[m], t]), where rank_m counts the leading thresholds <= w_m . x
// (Algorithm 1's min, as rank_of in rankers/perceptron/ensemble.py). Each thread owns a block of
// test points (no two write one total) and runs it over the hypotheses, each step a loop across
// the block's test points (SIMD lanes); the sums are of integers in double, so exact in any order.
constexpr int64_t VOTED_BLOCK = 256;  // test points per work item

__attribute__((target_clones("arch=haswell", "default")))
void voted_block(int64_t M, int64_t T, int64_t d, int64_t K, const float* weights, const float* thresholds,
                 const double* survival, const int64_t* run, const int64_t* row, const float* xt, double* total,
                 int64_t first, int64_t last) {
  const int64_t B = last - first;  // at most VOTED_BLOCK
  float score[VOTED_BLOCK];
  int32_t alive[VOTED_BLOCK], rank[VOTED_BLOCK];
  for (int64_t m = 0; m < M; ++m) {
    const float* w = weights + m * d;
    const float* c = thresholds + m * K;
    const float* xs = xt + run[m] * d * T + first;
    double* out = total + row[m] * T + first;
    const double vote = survival[m];
#pragma omp simd
    for (int64_t t = 0; t < B; ++t) score[t] = 0.f;
    for (int64_t j = 0; j < d; ++j) {  // loops across the test points, as the stream's across perceptrons
      const float wj = w[j];
      const float* xj = xs + j * T;
#pragma omp simd
      for (int64_t t = 0; t < B; ++t) score[t] += wj * xj[t];
    }
#pragma omp simd
    for (int64_t t = 0; t < B; ++t) {
      alive[t] = 1;
      rank[t] = 0;
    }
    for (int64_t q = 0; q < K; ++q) {
      const float cq = c[q];
#pragma omp simd
      for (int64_t t = 0; t < B; ++t) {
        alive[t] &= (score[t] - cq >= 0.f);
        rank[t] += alive[t];
      }
    }
#pragma omp simd
    for (int64_t t = 0; t < B; ++t) out[t] += vote * static_cast<double>(rank[t]);
  }
}

void ltr_prank_voted(int64_t M, int64_t T, int64_t d, int64_t K, const float* weights, const float* thresholds,
                     const double* survival, const int64_t* run, const int64_t* row, const float* xt, double* total,
                     int threads) {
  const int64_t TB = VOTED_BLOCK;
  const int64_t blocks = (T + TB - 1) / TB;
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (int64_t b = 0; b < blocks; ++b) {
    voted_block(M, T, d, K, weights, thresholds, survival, run, row, xt, total, b * TB, std::min(T, b * TB + TB));
  }
}

}  // extern "C"
