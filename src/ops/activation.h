// Softmax, sigmoid, the gated activations (SwiGLU, GeGLU, gpt-oss's clamped
// SwiGLU) and the small vector steps between matrix products.
#pragma once
#include <cmath>
#include <cstdint>

#include "ops/gates.h"  // sigmoid, silu: shared with the CUDA kernels

namespace ms {

// x[0..n) = softmax(x * scale), exponentials summed in double. A sink logit
// (attention sinks; -inf: none) joins the softmax unscaled as one more value
// that takes probability mass but is not written.
void softmax(float* x, int64_t n, float scale = 1.0f, float sink = -INFINITY);

// The index of the largest of x[0..n) (the first on ties): greedy decoding.
int32_t argmax(const float* x, int64_t n);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may alias
// either input.
void swiglu(const float* gate, const float* up, int64_t n, float* out);

// out[i] = gelu(x[i]), the tanh approximation, rounded the way the
// reference engine's CPU kernels round it: x to F16, gelu of that through a
// table of F16 results (0 below -10, x above 10). out may alias x.
void gelu(const float* x, int64_t n, float* out);

// out[i] = gelu(gate[i]) * up[i], gelu as above. out may alias either input.
void geglu(const float* gate, const float* up, int64_t n, float* out);

// gpt-oss's clamped SwiGLU: with g = min(gate[i], limit) and
// u = clamp(up[i], -limit, limit), out[i] = g * sigmoid(alpha * g) * (u + 1).
// out may alias either input.
void swiglu_oai(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out);

// DeepSeek V4's clamped SwiGLU: silu(min(gate[i], limit)) * clamp(up[i],
// -limit, limit). out may alias either input.
void swiglu_clamp(const float* gate, const float* up, int64_t n, float limit, float* out);

// y[i] += x[i]
void add_to(float* y, const float* x, int64_t n);

}  // namespace ms
