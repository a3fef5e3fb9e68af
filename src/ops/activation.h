// Softmax, SwiGLU, GeGLU and the small vector steps between matrix products.
#pragma once
#include <cstdint>

namespace ms {

// x[0..n) = softmax(x * scale), exponentials summed in double.
void softmax(float* x, int64_t n, float scale = 1.0f);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may alias
// either input.
void swiglu(const float* gate, const float* up, int64_t n, float* out);

// out[i] = gelu(x[i]), the tanh approximation, rounded the way the
// reference engine's CPU kernels round it: x to F16, gelu of that through a
// table of F16 results (0 below -10, x above 10). out may alias x.
void gelu(const float* x, int64_t n, float* out);

// out[i] = gelu(gate[i]) * up[i], gelu as above. out may alias either input.
void geglu(const float* gate, const float* up, int64_t n, float* out);

// y[i] += x[i]
void add_to(float* y, const float* x, int64_t n);

}  // namespace ms
