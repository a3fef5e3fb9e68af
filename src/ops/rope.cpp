#include "ops/rope.h"

#include <cmath>

namespace ms {

void rope_angles(const Rope& rope, int64_t pos, float* cos_sin) {
    const float step = std::pow(rope.freq_base, -2.0f / float(rope.n_rot));
    float theta = float(pos);
    for (int i = 0; i < rope.n_rot / 2; i++) {
        const float angle = rope.freq_factors ? theta / rope.freq_factors[i] : theta;
        cos_sin[2 * i] = std::cos(angle);
        cos_sin[2 * i + 1] = std::sin(angle);
        theta *= step;
    }
}

void rope_apply(const Rope& rope, const float* cos_sin, float* x, int n_heads, int head_dim) {
    const int half = rope.n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float* v = x + int64_t(h) * head_dim;
        for (int i = 0; i < half; i++) {
            const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
            float* a = rope.neox ? &v[i] : &v[2 * i];
            float* b = rope.neox ? &v[i + half] : &v[2 * i + 1];
            const float x0 = *a, x1 = *b;
            *a = x0 * c - x1 * s;
            *b = x0 * s + x1 * c;
        }
    }
}

}  // namespace ms
