#include "ops/rope.h"

#include <algorithm>
#include <cmath>

namespace ms {

namespace {

// The pair index at which a dimension makes `rotations` full turns over
// n_ctx_orig positions (YaRN's correction dimension).
float yarn_corr_dim(int n_rot, int64_t n_ctx_orig, float rotations, float base) {
    return float(n_rot) * std::log(float(n_ctx_orig) / (rotations * 2.0f * float(M_PI))) / (2.0f * std::log(base));
}

}  // namespace

Rope with_yarn(Rope rope, float factor, int64_t n_ctx_orig, float beta_fast, float beta_slow) {
    rope.freq_scale = 1.0f / factor;
    rope.ext_factor = 1.0f;
    rope.corr_lo = std::max(0.0f, std::floor(yarn_corr_dim(rope.n_rot, n_ctx_orig, beta_fast, rope.freq_base)));
    rope.corr_hi = std::min(float(rope.n_rot - 1),
                            std::ceil(yarn_corr_dim(rope.n_rot, n_ctx_orig, beta_slow, rope.freq_base)));
    return rope;
}

void rope_angles(const Rope& rope, int64_t pos, float* cos_sin) {
    const float step = std::pow(rope.freq_base, -2.0f / float(rope.n_rot));
    float mscale = rope.attn_factor;
    if (rope.ext_factor != 0.0f) mscale *= 1.0f + 0.1f * std::log(1.0f / rope.freq_scale);
    float theta = float(pos);
    for (int i = 0; i < rope.n_rot / 2; i++) {
        const float extrap = rope.freq_factors ? theta / rope.freq_factors[i] : theta;
        float angle = rope.freq_scale * extrap;
        if (rope.ext_factor != 0.0f) {
            const float y = (float(i) - rope.corr_lo) / std::max(0.001f, rope.corr_hi - rope.corr_lo);
            const float mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * rope.ext_factor;
            angle = angle * (1.0f - mix) + extrap * mix;
        }
        cos_sin[2 * i] = std::cos(angle) * mscale;
        cos_sin[2 * i + 1] = std::sin(angle) * mscale;
        theta *= step;
    }
}

namespace {

// sign 1: rotate by the angles; -1: by minus them.
void rotate(const Rope& rope, const float* cos_sin, float* x, int n_heads, int head_dim, float sign) {
    const int half = rope.n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float* v = x + int64_t(h) * head_dim;
        for (int i = 0; i < half; i++) {
            const float c = cos_sin[2 * i], s = sign * cos_sin[2 * i + 1];
            float* a = rope.neox ? &v[i] : &v[2 * i];
            float* b = rope.neox ? &v[i + half] : &v[2 * i + 1];
            const float x0 = *a, x1 = *b;
            *a = x0 * c - x1 * s;
            *b = x0 * s + x1 * c;
        }
    }
}

}  // namespace

void rope_apply(const Rope& rope, const float* cos_sin, float* x, int n_heads, int head_dim) {
    rotate(rope, cos_sin, x, n_heads, head_dim, 1.0f);
}

void rope_apply_inverse(const Rope& rope, const float* cos_sin, float* x, int n_heads, int head_dim) {
    rotate(rope, cos_sin, x, n_heads, head_dim, -1.0f);
}

}  // namespace ms
