// Rotary position embedding. Angles are built the way the reference engine
// builds them (theta multiplied by base^(-2/n_rot) pair after pair, in
// float) so positions far into the context round the same way.
#pragma once
#include <cstdint>

namespace ms {

struct Rope {
    int n_rot = 0;             // leading dimensions of each head that rotate
    float freq_base = 10000.0f;
    bool neox = true;          // pairs (i, i + n_rot/2); false: adjacent pairs (2i, 2i+1)
    const float* freq_factors = nullptr;  // n_rot/2 divisors of the pairs' angles, or none
};

// cos_sin[2i], cos_sin[2i+1] = cos, sin of pair i's angle at position pos,
// for i in [0, n_rot/2).
void rope_angles(const Rope& rope, int64_t pos, float* cos_sin);

// Rotates the first n_rot dimensions of each of n_heads heads of x (heads
// head_dim apart) by the angles from rope_angles.
void rope_apply(const Rope& rope, const float* cos_sin, float* x, int n_heads, int head_dim);

}  // namespace ms
