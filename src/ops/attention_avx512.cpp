// AVX-512 attention loops: ops/attention_x86.inc over 16-float vectors.
// GCC 12's AVX-512 conversion and extract intrinsics pass a deliberately
// uninitialized vector to their builtins, which -Wmaybe-uninitialized reports
// once inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/attention_kernels.h"

namespace ms {
namespace {

using Vec = __m512;
constexpr int kLanes = 16;
constexpr int kAcc = 16;  // accumulators, of the 32 zmm registers
constexpr int kPrefetchRows = 16;
constexpr int kMixRows = 64;  // of up to 512 bytes: 32 KiB, within L1

inline Vec vzero() { return _mm512_setzero_ps(); }
inline Vec vset1(float x) { return _mm512_set1_ps(x); }
inline Vec vload(const float* p) { return _mm512_loadu_ps(p); }
inline Vec vload(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline void vstore(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec vmul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
inline Vec vsub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
inline Vec vmax(Vec a, Vec b) { return _mm512_max_ps(a, b); }
inline Vec vround(Vec x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline Vec vldexp(Vec p, Vec k) { return _mm512_scalef_ps(p, k); }
inline Vec vkeep_ge(Vec r, Vec x, Vec lo) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ), r); }
inline float hmax(Vec v) { return _mm512_reduce_max_ps(v); }

double sum_double(const float* x, int64_t n) {
    __m512d a = _mm512_setzero_pd(), b = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        a = _mm512_add_pd(a, _mm512_cvtps_pd(_mm256_loadu_ps(x + i)));
        b = _mm512_add_pd(b, _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8)));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(a, b));
}

// Sixteen vectors to their sums by a transpose: neighbouring vectors' lanes
// are interleaved and added, halving the count each round. Every sum has the
// same shape: lanes 4L+m added as ((m0 + m2) + (m1 + m3)) within each
// 128-bit group L, then the groups as (L0 + L1) + (L2 + L3).
inline void reduce(const Vec* a, float* out) {
    __m512 b[8], c[4];
    for (int i = 0; i < 8; i++) {
        b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    }
    for (int i = 0; i < 4; i++) {
        const __m512d x = _mm512_castps_pd(b[2 * i]), y = _mm512_castps_pd(b[2 * i + 1]);
        c[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    // c[i]'s group L holds vectors 4i..4i+3's sums over lanes 4L..4L+3.
    const __m512 e0 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 e1 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_f32x4(c[2], c[3], _MM_SHUFFLE(3, 1, 3, 1)));
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_shuffle_f32x4(e0, e1, _MM_SHUFFLE(2, 0, 2, 0)),
                                        _mm512_shuffle_f32x4(e0, e1, _MM_SHUFFLE(3, 1, 3, 1))));
}

#include "ops/attention_x86.inc"

}  // namespace

const AttentionKernels kAttentionAvx512 = kTable;

}  // namespace ms
