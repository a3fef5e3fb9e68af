#include "ops/activation.h"

#include <algorithm>
#include <cmath>

#include "quant/half.h"

namespace ms {

void softmax(float* x, int64_t n, float scale, float sink) {
    float max = sink;
    for (int64_t i = 0; i < n; i++) {
        x[i] *= scale;
        if (x[i] > max) max = x[i];
    }
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = std::exp(x[i] - max);
        sum += double(x[i]);
    }
    if (sink > -INFINITY) sum += double(std::exp(sink - max));
    const float inv = float(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
    for (int64_t i = 0; i < n; i++) {
        out[i] = silu_times(gate[i], up[i]);
    }
}

namespace {

// gelu of every F16 value, rounded to F16 and widened: 256 KiB built on first
// use (static storage, no allocation).
struct GeluTable {
    float v[65536];
    GeluTable() {
        for (uint32_t h = 0; h < 65536; h++) {
            const float x = fp16_to_fp32(uint16_t(h));
            const float g = 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * x * (1.0f + 0.044715f * x * x)));
            v[h] = fp16_to_fp32(fp32_to_fp16(g));
        }
    }
};

inline float gelu_rounded(const float* table, float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return table[fp32_to_fp16(x)];
}

const float* gelu_table() {
    static const GeluTable table;
    return table.v;
}

}  // namespace

void gelu(const float* x, int64_t n, float* out) {
    const float* table = gelu_table();
    for (int64_t i = 0; i < n; i++) out[i] = gelu_rounded(table, x[i]);
}

void geglu(const float* gate, const float* up, int64_t n, float* out) {
    const float* table = gelu_table();
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        out[i] = g <= -10.0f ? 0.0f : gelu_rounded(table, g) * up[i];
    }
}

void swiglu_oai(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
    for (int64_t i = 0; i < n; i++) out[i] = swiglu_oai_one(gate[i], up[i], alpha, limit);
}

void swiglu_clamp(const float* gate, const float* up, int64_t n, float limit, float* out) {
    for (int64_t i = 0; i < n; i++) {
        const float g = std::min(gate[i], limit);
        const float u = std::max(std::min(up[i], limit), -limit);
        out[i] = silu_times(g, u);
    }
}

void add_to(float* y, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

int32_t argmax(const float* x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return int32_t(best);
}

}  // namespace ms
