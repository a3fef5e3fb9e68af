// RMS normalization and LayerNorm, rounded like the reference engine: sums
// in double, the scale applied first and the weight (and bias) after.
#pragma once
#include <cstdint>

#include "ops/thread_pool.h"

namespace ms {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; w may be null (no weight).
// out may alias x.
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out);

// rms_norm of each of `rows` rows of `width` floats, rows spread over the pool.
void rms_norm_rows(ThreadPool& pool, const float* x, const float* w, int64_t rows, int64_t width, float eps,
                   float* out);

// out[i] = (x[i] - mean(x)) / sqrt(var(x) + eps) * w[i] + b[i]; w, b may be
// null. out may alias x.
void layer_norm(const float* x, const float* w, const float* b, int64_t n, float eps, float* out);

}  // namespace ms
