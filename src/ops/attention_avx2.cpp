// AVX2 + FMA + F16C attention loops: ops/attention_x86.inc over 8-float vectors.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/attention_kernels.h"

namespace ms {
namespace {

using Vec = __m256;
constexpr int kLanes = 8;
constexpr int kAcc = 8;  // accumulators, of the 16 ymm registers
constexpr int kPrefetchRows = 16;
constexpr int kMixRows = 64;  // of up to 512 bytes: 32 KiB, within L1

inline Vec vzero() { return _mm256_setzero_ps(); }
inline Vec vset1(float x) { return _mm256_set1_ps(x); }
inline Vec vload(const float* p) { return _mm256_loadu_ps(p); }
inline Vec vload(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline void vstore(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec vmul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline Vec vsub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
inline Vec vmax(Vec a, Vec b) { return _mm256_max_ps(a, b); }
inline Vec vround(Vec x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// 2^k built in the exponent field.
inline Vec vldexp(Vec p, Vec k) {
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
inline Vec vkeep_ge(Vec r, Vec x, Vec lo) { return _mm256_and_ps(r, _mm256_cmp_ps(x, lo, _CMP_GE_OQ)); }

inline float hmax(Vec v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

double sum_double(const float* x, int64_t n) {
    __m256d a = _mm256_setzero_pd(), b = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; i += 8) {
        a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm_loadu_ps(x + i)));
        b = _mm256_add_pd(b, _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)));
    }
    const __m256d s = _mm256_add_pd(a, b);
    const __m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
}

// Eight vectors to their sums, each ((x0+x1)+(x2+x3)) + ((x4+x5)+(x6+x7)).
inline void reduce(const Vec* a, float* out) {
    const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    // u0 = [a0..a3 low-half sums | a0..a3 high-half sums], u1 the same for a4..a7.
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    const __m256 lo = _mm256_permute2f128_ps(u0, u1, 0x20), hi = _mm256_permute2f128_ps(u0, u1, 0x31);
    _mm256_storeu_ps(out, _mm256_add_ps(lo, hi));
}

#include "ops/attention_x86.inc"

}  // namespace

const AttentionKernels kAttentionAvx2 = kTable;

}  // namespace ms
