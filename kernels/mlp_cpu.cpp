// A plain MLP's training forward and backward on CPU, one pass over the rows per direction: see
// kernels/mlp_cpu.py.
//
// Layers j = 0 .. n-1: h_{j+1} = act(h_j W_j^T + b_j), act = ReLU for every layer but the last, h_0
// the (optionally z-scored) features of the real rows. Each thread takes a contiguous share of the
// real rows and walks it in blocks of `block` rows: the block's features are gathered (and
// normalized) into the thread's scratch, then every layer's product is one single-threaded BLAS
// sgemm on the block, its bias and ReLU applied while the block's output is still in cache. The
// hidden outputs go to the caller's [rows, width] buffers (the backward reads them); the last
// layer's to the scores of the rows (0 for rows not in the index: padding).
//
// The backward walks the same blocks: per layer, the weight gradient g^T h_j accumulates (sgemm,
// beta 1) into the thread's own gradient buffers (thread 0: the caller's), the bias gradient is the
// column sum, and g W_j, ReLU's backward and the next bias sum run on the block in cache. The
// threads' partial gradients are summed in thread order at the end, so a result depends on the
// thread count but not on scheduling. The first layer's input gradient is never computed.
//
// No torch headers: BLAS comes in as a function pointer (the sgemm_ that libtorch exports; MKL's),
// as does MKL's per-thread thread count (set to 1 inside the parallel region, restored after). MKL's packed
// GEMM (the weights packed once a call) is not used: its buffers are megabytes a layer and thread whatever
// the shape, and products with fewer rows than packed for are undocumented.

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#ifndef LTR_KERNEL_HASH
#define LTR_KERNEL_HASH "unstamped"
#endif

namespace {

constexpr int kSlots = 4;  // the block's input, two gradient buffers, a thread's partial gradients

// the calling thread's scratch buffer `slot`, at least `size` floats, kept for the thread's life (OpenMP's
// threads persist): a step allocates nothing. Null if it cannot grow.
float* scratch(int slot, int64_t size) {
    thread_local std::vector<float> buffers[kSlots];
    std::vector<float>& buffer = buffers[slot];
    if (int64_t(buffer.size()) < size) {
        try {
            buffer.resize(size);
        } catch (...) {
            return nullptr;
        }
    }
    return buffer.data();
}


using Sgemm = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                       const int*, const float*, const int*, const float*, float*, const int*);
using SetThreadsLocal = int (*)(int);
struct Blas {  // the functions the caller passes, in this order
    Sgemm sgemm;
    SetThreadsLocal threads_local;
};

Blas functions(void* const* blas) {
    return Blas{reinterpret_cast<Sgemm>(blas[0]), reinterpret_cast<SetThreadsLocal>(blas[1])};
}

struct Network {
    int layers;
    const int64_t* widths;        // [layers + 1]: features, hidden..., outputs
    const float* const* weights;  // W_j [widths[j+1], widths[j]], row-major
    const float* const* biases;   // b_j [widths[j+1]]
    Blas blas;
};

struct Rows {
    int64_t count;          // real rows
    const int64_t* index;   // [count] rows of x (null: rows 0 .. count-1)
    const float* x;         // [*, features]
    const float* mean;      // [features] or null: no z-score
    const float* std;       // [features]
    int64_t row(int64_t r) const { return index ? index[r] : r; }
};

// row-major C[m, n] (ldc) = op(A) op(B) + beta C through column-major sgemm: C^T = op(B)^T op(A)^T
void gemm(const Network& net, bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
    const float one = 1.0f;
    const char ta = trans_b ? 'T' : 'N', tb = trans_a ? 'T' : 'N';
    net.blas.sgemm(&ta, &tb, &n, &m, &k, &one, b, &ldb, a, &lda, &beta, c, &ldc);
}

// the block's rows [first, first + size) gathered (and z-scored as FeatureNormalizer does: (x - mean) / std)
void gather(const Rows& rows, int64_t features, int64_t first, int64_t size, float* __restrict out) {
    for (int64_t r = 0; r < size; ++r) {
        const float* __restrict source = rows.x + rows.row(first + r) * features;
        float* __restrict target = out + r * features;
        if (rows.mean) {
            const float* __restrict mean = rows.mean;
            const float* __restrict std = rows.std;
#pragma omp simd
            for (int64_t f = 0; f < features; ++f) target[f] = (source[f] - mean[f]) / std[f];
        } else {
            std::memcpy(target, source, sizeof(float) * features);
        }
    }
}

// out [size, width] += bias, then ReLU (a NaN stays NaN, as torch's)
void bias_act(float* __restrict out, const float* __restrict bias, int64_t size, int64_t width, bool relu) {
    for (int64_t r = 0; r < size; ++r) {
        float* __restrict row = out + r * width;
        if (relu) {
#pragma omp simd
            for (int64_t c = 0; c < width; ++c) {
                const float v = row[c] + bias[c];
                row[c] = v < 0.0f ? 0.0f : v;
            }
        } else {
#pragma omp simd
            for (int64_t c = 0; c < width; ++c) row[c] += bias[c];
        }
    }
}

// g [size, width] zeroed where the layer's ReLU output h <= 0 (ReLU's backward, as torch's threshold_backward:
// a NaN output passes the gradient), and its column sums added to bias_grad
void relu_back_sum(float* __restrict g, const float* __restrict h, int64_t size, int64_t width,
                   float* __restrict bias_grad) {
    for (int64_t r = 0; r < size; ++r) {
        float* __restrict row = g + r * width;
        const float* __restrict out = h + r * width;
#pragma omp simd
        for (int64_t c = 0; c < width; ++c) {
            row[c] = out[c] <= 0.0f ? 0.0f : row[c];
            bias_grad[c] += row[c];
        }
    }
}

void column_sums(const float* __restrict g, int64_t size, int64_t width, float* __restrict sums) {
    for (int64_t r = 0; r < size; ++r) {
#pragma omp simd
        for (int64_t c = 0; c < width; ++c) sums[c] += g[r * width + c];
    }
}

int64_t widest(const Network& net) { return *std::max_element(net.widths, net.widths + net.layers + 1); }

// thread t's share of `count` rows: [begin, end)
void share(int64_t count, int t, int threads, int64_t* begin, int64_t* end) {
    *begin = count * t / threads;
    *end = count * (t + 1) / threads;
}

struct ThreadCount {  // MKL single-threaded inside the region, as it was after
    SetThreadsLocal set;
    int previous = 0;
    explicit ThreadCount(SetThreadsLocal s) : set(s) { previous = set ? set(1) : 0; }
    ~ThreadCount() { if (set) set(previous); }
};

}  // namespace

extern "C" {

const char* ltr_kernel_hash() { return LTR_KERNEL_HASH; }

// Forward: hidden[j] [count, widths[j+1]] (j < layers - 1) and scores [total, widths[layers]] (rows not
// in the index keep what they hold; the caller zeroes them). `blas`: sgemm_ and MKL_Set_Num_Threads_Local
// (null: MKL's thread count untouched). Returns 0, or 1 if scratch could not be had.
int ltr_mlp_forward(int64_t count, const int64_t* index, const float* x, const float* mean, const float* std,
                    int layers, const int64_t* widths, const float* const* weights, const float* const* biases,
                    float* const* hidden, float* scores, void* const* blas, int threads, int block) {
    const Network net{layers, widths, weights, biases, functions(blas)};
    const Rows rows{count, index, x, mean, std};
    const int64_t features = widths[0], outputs = widths[layers];
    int failed = 0;
#pragma omp parallel num_threads(threads)
    {
        ThreadCount single(net.blas.threads_local);
        int64_t begin, end;
        share(count, omp_get_thread_num(), omp_get_num_threads(), &begin, &end);
        float* input = scratch(0, block * features);
        float* last = scratch(1, block * outputs);
        if (!input || !last) {
#pragma omp atomic write
            failed = 1;
        }
        for (int64_t first = begin; input && last && first < end; first += block) {
            const int64_t size = std::min<int64_t>(block, end - first);
            gather(rows, features, first, size, input);
            const float* in = input;
            for (int j = 0; j < layers; ++j) {
                const int i = int(widths[j]), o = int(widths[j + 1]);
                const bool relu = j < layers - 1;
                float* out = relu ? hidden[j] + first * o : last;
                gemm(net, false, true, int(size), o, i, in, i, weights[j], i, 0.0f, out, o);
                bias_act(out, biases[j], size, o, relu);
                in = out;
            }
            for (int64_t r = 0; r < size; ++r)
                std::memcpy(scores + rows.row(first + r) * outputs, last + r * outputs, sizeof(float) * outputs);
        }
    }
    return failed;
}

// Backward from grad_scores [total, outputs] (rows of the index read): weight_grads[j] [widths[j+1],
// widths[j]] and bias_grads[j] [widths[j+1]], overwritten. Returns 0, or 1 if scratch could not be had.
int ltr_mlp_backward(int64_t count, const int64_t* index, const float* x, const float* mean, const float* std,
                     int layers, const int64_t* widths, const float* const* weights, const float* const* hidden,
                     const float* grad_scores, float* const* weight_grads, float* const* bias_grads,
                     void* const* blas, int threads, int block) {
    const Network net{layers, widths, weights, nullptr, functions(blas)};
    const Rows rows{count, index, x, mean, std};
    const int64_t features = widths[0], outputs = widths[layers], wide = widest(net);
    int64_t parameters = 0;  // one thread's gradient: every W_j then every b_j
    std::vector<int64_t> weight_at(layers), bias_at(layers);
    for (int j = 0; j < layers; ++j) weight_at[j] = parameters, parameters += widths[j] * widths[j + 1];
    for (int j = 0; j < layers; ++j) bias_at[j] = parameters, parameters += widths[j + 1];
    std::vector<float*> partial(threads, nullptr);  // threads 1.. accumulate into their own, thread 0 into the outputs
    int failed = 0, team = 1;
#pragma omp parallel num_threads(threads)
    {
        const int t = omp_get_thread_num();
        if (t == 0) team = omp_get_num_threads();
        ThreadCount single(net.blas.threads_local);
        float* own = t == 0 ? nullptr : scratch(3, parameters);
        if (t > 0 && own) std::fill(own, own + parameters, 0.0f);
        partial[t] = own;
        std::vector<float*> weight_grad(layers), bias_grad(layers);
        for (int j = 0; j < layers; ++j) {
            weight_grad[j] = t == 0 ? weight_grads[j] : own ? own + weight_at[j] : nullptr;
            bias_grad[j] = t == 0 ? bias_grads[j] : own ? own + bias_at[j] : nullptr;
            if (t == 0) {
                std::fill(weight_grads[j], weight_grads[j] + widths[j] * widths[j + 1], 0.0f);
                std::fill(bias_grads[j], bias_grads[j] + widths[j + 1], 0.0f);
            }
        }
        int64_t begin, end;
        share(count, t, omp_get_num_threads(), &begin, &end);
        float* input = scratch(0, block * features);
        float* grad = scratch(1, block * wide);
        float* next = scratch(2, block * wide);
        const bool ready = input && grad && next && (t == 0 || own);
        if (!ready) {
#pragma omp atomic write
            failed = 1;
        }
        for (int64_t first = begin; ready && first < end; first += block) {
            const int64_t size = std::min<int64_t>(block, end - first);
            for (int64_t r = 0; r < size; ++r)
                std::memcpy(grad + r * outputs, grad_scores + rows.row(first + r) * outputs, sizeof(float) * outputs);
            column_sums(grad, size, outputs, bias_grad[layers - 1]);
            for (int j = layers - 1; j >= 0; --j) {
                const int i = int(widths[j]), o = int(widths[j + 1]);
                const float* in;
                if (j == 0) {
                    gather(rows, features, first, size, input);
                    in = input;
                } else {
                    in = hidden[j - 1] + first * i;
                }
                // dW_j [o, i] += g^T [o, size] h_j [size, i]
                gemm(net, true, false, o, i, int(size), grad, o, in, i, 1.0f, weight_grad[j], i);
                if (j == 0) break;
                // g W_j: [size, i], then ReLU's backward (h_j is layer j-1's ReLU output) and b_{j-1}'s sum
                gemm(net, false, false, int(size), i, o, grad, o, weights[j], i, 0.0f, next, i);
                relu_back_sum(next, in, size, i, bias_grad[j - 1]);
                std::swap(grad, next);
            }
        }
    }
    if (failed) return 1;
    for (int u = 1; u < team; ++u) {  // in thread order: the same sum whatever ran first
        const float* part = partial[u];
        for (int j = 0; j < layers; ++j) {
            float* w = weight_grads[j];
            const int64_t n = widths[j] * widths[j + 1];
            for (int64_t e = 0; e < n; ++e) w[e] += part[weight_at[j] + e];
            float* b = bias_grads[j];
            for (int64_t e = 0; e < widths[j + 1]; ++e) b[e] += part[bias_at[j] + e];
        }
    }
    return 0;
}

}  // extern "C"
