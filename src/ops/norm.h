// RMS normalization, rounded like the reference engine: squares summed in
// double, the scale applied first and the weight second.
#pragma once
#include <cstdint>

namespace ms {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; w may be null (no weight).
// out may alias x.
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out);

}  // namespace ms
