#include "ops/norm.h"

#include <cmath>

namespace ms {

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += double(x[i] * x[i]);
    const float mean = float(sum / double(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    if (w) {
        for (int64_t i = 0; i < n; i++) out[i] = (x[i] * scale) * w[i];
    } else {
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale;
    }
}

void layer_norm(const float* x, const float* w, const float* b, int64_t n, float eps, float* out) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += double(x[i]);
    const float mean = float(sum / double(n));
    double sum2 = 0;
    for (int64_t i = 0; i < n; i++) {
        out[i] = x[i] - mean;
        sum2 += double(out[i] * out[i]);
    }
    const float scale = 1.0f / std::sqrt(float(sum2 / double(n)) + eps);
    for (int64_t i = 0; i < n; i++) {
        float v = out[i] * scale;
        if (w) v *= w[i];
        if (b) v += b[i];
        out[i] = v;
    }
}

void rms_norm_rows(ThreadPool& pool, const float* x, const float* w, int64_t rows, int64_t width, float eps,
                   float* out) {
    pool.parallel_for(rows, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; t++) rms_norm(x + t * width, w, width, eps, out + t * width);
    });
}

}  // namespace ms
