#include "ops/activation.h"

#include <cmath>

namespace ms {

void softmax(float* x, int64_t n, float scale) {
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        x[i] *= scale;
        if (x[i] > max) max = x[i];
    }
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = std::exp(x[i] - max);
        sum += double(x[i]);
    }
    const float inv = float(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

void add_to(float* y, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

}  // namespace ms
