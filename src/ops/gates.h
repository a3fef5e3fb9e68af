// The scalar arithmetic of gates, activations and expert-group routing that
// the CPU's layers (ops/, model/) and the CUDA kernels (gpu/kernels*.cu)
// both compute, written once so the two cannot drift: each function is
// __host__ __device__ under nvcc and plain inline C++ elsewhere. On the host
// expf/log1pf are the C library's (what std::exp/std::log1p of a float
// call), so the CPU's results are the bits they were before this header.
#pragma once
#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define MS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MS_HOST_DEVICE inline
#endif

namespace ms {

// 1 / (1 + exp(-x))
MS_HOST_DEVICE float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// silu(g) * u, silu(g) = g / (1 + exp(-g)): SwiGLU's element, and with u = 1
// (silu_times(g, 1.0f) == silu(g)) the SiLU of DeltaNet's convolution and z gate.
MS_HOST_DEVICE float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }
MS_HOST_DEVICE float silu(float g) { return g / (1.0f + expf(-g)); }

// gpt-oss's clamped SwiGLU element: g = min(gate, limit), u = clamp(up,
// -limit, limit), g * sigmoid(alpha g) * (u + 1). (limit < x ? limit : x) is
// std::min's choice, NaN included.
MS_HOST_DEVICE float swiglu_oai_one(float gate, float up, float alpha, float limit) {
    const float g = limit < gate ? limit : gate;
    const float m = limit < up ? limit : up;
    const float u = m < -limit ? -limit : m;
    return g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
}

// log(1 + e^x), exact enough to return x itself above 20.
MS_HOST_DEVICE float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Gated DeltaNet: value head h's beta and alpha logits for token t of n, from
// the projection's rows: fused, 2 NV per token, grouped by key head (ratio
// value heads each: their betas, then their alphas), as in the file; else n
// rows of NV betas, then n rows of NV alphas.
MS_HOST_DEVICE void deltanet_gate_logits(const float* ba, bool fused, int64_t t, int64_t n, int h, int NV, int ratio,
                                         float* b_logit, float* a_logit) {
    if (fused) {
        const float* g = ba + t * 2 * NV + (h / ratio) * 2 * ratio;
        *b_logit = g[h % ratio];
        *a_logit = g[ratio + h % ratio];
    } else {
        *b_logit = ba[t * NV + h];
        *a_logit = ba[n * NV + t * NV + h];
    }
}

// Gated DeltaNet's gates from those logits: the write strength beta and the
// log of the state's decay, softplus(a + dt_bias) * A (A < 0).
MS_HOST_DEVICE void deltanet_gates(float b_logit, float a_logit, float dt_bias, float a, float* beta,
                                   float* log_decay) {
    *beta = sigmoid(b_logit);
    *log_decay = softplus(a_logit + dt_bias) * a;
}

// Routed weights divide by their sum, kept above a tiny floor as the
// reference clamps it; the sum is taken in double.
MS_HOST_DEVICE float renorm_total(double sum) {
    const float s = float(sum), floor = 6.103515625e-5f;
    return s < floor ? floor : s;
}

// Grouped routing (DeepSeek V3, GLM): a group's score is the sum of its two
// best expert scores score(e), e in [first, end) (the best alone for a
// group of one).
template <class Score>
MS_HOST_DEVICE float group_score(Score score, int first, int end) {
    float a = -INFINITY, b = -INFINITY;  // the best two
    for (int e = first; e < end; e++) {
        const float v = score(e);
        if (v > a) {
            b = a;
            a = v;
        } else if (v > b) {
            b = v;
        }
    }
    return end - first > 1 ? a + b : a;
}

// Bit g set: group g is one of the n_used groups of sum[0..n_group) with the
// largest sums, taken best first (the lower group on a tie); n_group <= 64.
MS_HOST_DEVICE uint64_t best_groups(const float* sum, int n_group, int n_used) {
    uint64_t keep = 0;
    for (int i = 0; i < n_used; i++) {
        int best = -1;
        for (int g = 0; g < n_group; g++) {
            if (!(keep >> g & 1) && (best < 0 || sum[g] > sum[best])) best = g;
        }
        keep |= uint64_t(1) << best;
    }
    return keep;
}

}  // namespace ms
