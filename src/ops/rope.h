// Rotary position embedding. Angles are built the way the reference engine
// builds them (theta multiplied by base^(-2/n_rot) pair after pair, in
// float) so positions far into the context round the same way. YaRN context
// extension (gpt-oss, DeepSeek) is the same rotation with interpolated
// angles and scaled cos/sin.
#pragma once
#include <cstdint>

namespace ms {

struct Rope {
    int n_rot = 0;             // leading dimensions of each head that rotate
    float freq_base = 10000.0f;
    bool neox = true;          // pairs (i, i + n_rot/2); false: adjacent pairs (2i, 2i+1)
    const float* freq_factors = nullptr;  // n_rot/2 divisors of the pairs' angles, or none
    // YaRN: pair i's angle is theta * freq_scale blended back towards theta
    // by ext_factor * ramp(i) (ramp 1 below pair corr_lo, 0 above corr_hi),
    // and cos/sin are multiplied by attn_factor (times 1 + 0.1 ln(1 /
    // freq_scale) when ext_factor is not 0). The defaults are plain RoPE.
    float freq_scale = 1.0f;
    float ext_factor = 0.0f;
    float attn_factor = 1.0f;
    float corr_lo = 0.0f, corr_hi = 0.0f;
};

// `rope` with YaRN for a context extended `factor` times beyond the n_ctx_orig
// positions it was trained on: the correction range from beta_fast and
// beta_slow (the reference's defaults 32 and 1), ext_factor 1.
Rope with_yarn(Rope rope, float factor, int64_t n_ctx_orig, float beta_fast = 32.0f, float beta_slow = 1.0f);

// cos_sin[2i], cos_sin[2i+1] = cos, sin of pair i's angle at position pos,
// for i in [0, n_rot/2).
void rope_angles(const Rope& rope, int64_t pos, float* cos_sin);

// Rotates the first n_rot dimensions of each of n_heads heads of x (heads
// head_dim apart) by the angles from rope_angles.
void rope_apply(const Rope& rope, const float* cos_sin, float* x, int n_heads, int head_dim);

// rope_apply backwards: rotates by minus the angles (undoes rope_apply).
void rope_apply_inverse(const Rope& rope, const float* cos_sin, float* x, int n_heads, int head_dim);

}  // namespace ms
