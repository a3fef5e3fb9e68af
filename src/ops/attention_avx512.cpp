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
using Idx = __m512i;
constexpr int kLanes = 16;
constexpr int kAcc = 16;  // accumulators, of the 32 zmm registers
constexpr int kPrefetchRows = 16;
constexpr int kMixRows = 64;  // of up to 512 bytes: 32 KiB, within L1

inline Vec vzero() { return _mm512_setzero_ps(); }
inline Vec vset1(float x) { return _mm512_set1_ps(x); }
inline Vec vload(const float* p) { return _mm512_loadu_ps(p); }
inline Vec vload(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline void vstore(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec vmul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
// GCC writes these intrinsics as plain vector arithmetic and, with FMA
// enabled, fuses a multiply feeding an add into one FMA (one rounding where
// the scalar reference has two); the empty asm hides the product from it.
inline Vec vadd_product(Vec acc, Vec a, Vec b) {
    Vec p = vmul(a, b);
    __asm__("" : "+v"(p));
    return _mm512_add_ps(acc, p);
}
inline Vec vmax(Vec a, Vec b) { return _mm512_max_ps(a, b); }
inline float hmax(Vec v) { return _mm512_reduce_max_ps(v); }

inline Idx row_offsets(int64_t stride, int64_t n) {
    alignas(64) int32_t o[kLanes];
    for (int l = 0; l < kLanes; l++) o[l] = int32_t(std::min<int64_t>(l, n - 1) * stride);
    return _mm512_load_si512(o);
}

inline void gather_pair(const float* p, Idx idx, Vec* a, Vec* b) {
    *a = _mm512_i32gather_ps(idx, p, 4);
    *b = _mm512_i32gather_ps(idx, p + 1, 4);
}

// Elements d and d + 1 of a row share one aligned 32-bit word (rows and d
// are even): one gather, split into low and high halves.
inline void gather_pair(const uint16_t* p, Idx idx, Vec* a, Vec* b) {
    const __m512i w = _mm512_i32gather_epi32(idx, p, 2);
    *a = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w));
    *b = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(w, 16)));
}

#include "ops/attention_x86.inc"

}  // namespace

const AttentionKernels kAttentionAvx512 = kTable;

}  // namespace ms
