// AVX2 + F16C attention loops: ops/attention_x86.inc over 8-float vectors.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/attention_kernels.h"

namespace ms {
namespace {

using Vec = __m256;
using Idx = __m256i;
constexpr int kLanes = 8;
constexpr int kAcc = 8;  // accumulators, of the 16 ymm registers
constexpr int kPrefetchRows = 16;
constexpr int kMixRows = 64;  // of up to 512 bytes: 32 KiB, within L1

inline Vec vzero() { return _mm256_setzero_ps(); }
inline Vec vset1(float x) { return _mm256_set1_ps(x); }
inline Vec vload(const float* p) { return _mm256_loadu_ps(p); }
inline Vec vload(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline void vstore(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec vmul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
// GCC writes these intrinsics as plain vector arithmetic and, with FMA
// enabled, fuses a multiply feeding an add into one FMA (one rounding where
// the scalar reference has two); the empty asm hides the product from it.
inline Vec vadd_product(Vec acc, Vec a, Vec b) {
    Vec p = vmul(a, b);
    __asm__("" : "+x"(p));
    return _mm256_add_ps(acc, p);
}
inline Vec vmax(Vec a, Vec b) { return _mm256_max_ps(a, b); }

inline float hmax(Vec v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

inline Idx row_offsets(int64_t stride, int64_t n) {
    alignas(32) int32_t o[kLanes];
    for (int l = 0; l < kLanes; l++) o[l] = int32_t(std::min<int64_t>(l, n - 1) * stride);
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(o));
}

inline void gather_pair(const float* p, Idx idx, Vec* a, Vec* b) {
    *a = _mm256_i32gather_ps(p, idx, 4);
    *b = _mm256_i32gather_ps(p + 1, idx, 4);
}

// Elements d and d + 1 of a row share one aligned 32-bit word (rows and d
// are even): one gather, split into low and high halves.
inline void gather_pair(const uint16_t* p, Idx idx, Vec* a, Vec* b) {
    const __m256i w = _mm256_i32gather_epi32(reinterpret_cast<const int*>(p), idx, 2);
    const __m256i lo = _mm256_and_si256(w, _mm256_set1_epi32(0xffff));
    const __m256i hi = _mm256_srli_epi32(w, 16);
    // Per 128-bit lane: lo0..3 hi0..3 | lo4..7 hi4..7 -> lo0..7 | hi0..7.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), _MM_SHUFFLE(3, 1, 2, 0));
    *a = _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
    *b = _mm256_cvtph_ps(_mm256_extracti128_si256(packed, 1));
}

#include "ops/attention_x86.inc"

}  // namespace

const AttentionKernels kAttentionAvx2 = kTable;

}  // namespace ms
