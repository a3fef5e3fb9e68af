// Softmax, SwiGLU and the small vector steps between matrix products.
#pragma once
#include <cstdint>

namespace ms {

// x[0..n) = softmax(x * scale), exponentials summed in double.
void softmax(float* x, int64_t n, float scale = 1.0f);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may alias
// either input.
void swiglu(const float* gate, const float* up, int64_t n, float* out);

// y[i] += x[i]
void add_to(float* y, const float* x, int64_t n);

}  // namespace ms
