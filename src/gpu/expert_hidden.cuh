// The hidden value of an expert's (or dense FFN's) row from its gate and
// up sums, with the biases and activation gpu.h's ExpertExtras name: one
// form for decode's kernels (kernels.cu) and prefill's tensor-core GEMM
// (kernels_mma.cu).
#pragma once
#include <cstdint>

#include "gpu/gpu.h"
#include "ops/gates.h"

namespace ms::gpu {

// An expert's (or dense FFN's) hidden value from its gate and up sums:
// silu(g) * u, or gpt-oss's clamped g * sigmoid(1.702 g) * (u + 1).
__device__ __forceinline__ float gated(float g, float u, bool clamped) {
    return clamped ? swiglu_oai_one(g, u, 1.702f, 7.0f) : silu_times(g, u);
}

// v plus element r of bias row `row` (rows `width` wide), when there is a bias.
__device__ __forceinline__ float biased(float v, const float* bias, int64_t row, int64_t width, int64_t r) {
    return bias ? v + bias[row * width + r] : v;
}

// Row r of expert id's hidden vector from its gate and up sums: the one
// form decode's and prefill's kernels share, so they agree bit for bit.
__device__ __forceinline__ float expert_hidden(float g, float u, const ExpertExtras& x, int id, int64_t rows,
                                               int64_t r) {
    return gated(biased(g, x.gate_bias, id, rows, r), biased(u, x.up_bias, id, rows, r), x.clamped);
}

}  // namespace ms::gpu
