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
#include "quant/blocks.h"
#include "quant/isa_target.h"

MS_ISA_BEGIN(MS_ISA_AVX512)
namespace ms {
namespace {

using Vec = __m512;
using Idx = __m512i;
constexpr int kLanes = 16;
constexpr int kAcc = 16;  // accumulators, of the 32 zmm registers
constexpr int kPrefetchRows = 16;
constexpr int kMixRows = 64;  // rows in a value run, at most
constexpr int kMixHeads = 8;  // a value pass's heads: 8 x 2 vectors of the 16 accumulators
constexpr int kMixBytes = 16384;  // a run, and the next one prefetched: 32 KiB, within L1
// Value rows a block asks into L2 while its keys are scored (attention_x86.inc,
// block_partial_tiled): blocks of up to 128 KiB of value rows, as qwen3's
// 256-512 rows of 256 bytes at 4k-16k positions.
constexpr int64_t kNearBytes = 131072;

inline Vec vzero() { return _mm512_setzero_ps(); }
inline Vec vset1(float x) { return _mm512_set1_ps(x); }
inline Vec vload(const float* p) { return _mm512_loadu_ps(p); }
inline Vec vload(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline Vec vload_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline void vstore(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec vmul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
inline Vec vadd(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec vmax(Vec a, Vec b) { return _mm512_max_ps(a, b); }
inline Vec vmin(Vec a, Vec b) { return _mm512_min_ps(a, b); }
inline Vec vround(Vec x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline Vec vpow2(Vec n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}
inline Vec vzero_where_below(Vec v, Vec x, float limit) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(limit), _CMP_GE_OQ), v);
}
inline float hsum(Vec v) { return _mm512_reduce_add_ps(v); }
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

// The 16 x 16 square as four 8 x 8 ones side by side: register i holds row
// i in its low 256 bits and row i + 8 in its high ones, so the three rounds of
// 128-bit-lane unpacks transpose each quarter; the quarters are then put in
// row order (rows 0-7 beside rows 8-15) for columns c and c + 8.
inline void transpose_f16(const uint16_t* p, int64_t stride, int64_t n, uint16_t* tile) {
    auto row = [&](int l) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + std::min<int64_t>(l, n - 1) * stride));
    };
    __m512i a[8], t[8];
    for (int i = 0; i < 8; i++) a[i] = _mm512_inserti64x4(_mm512_castsi256_si512(row(i)), row(i + 8), 1);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_epi16(a[i], a[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi16(a[i], a[i + 1]);
    }
    // t0: rows 0,1 elements 0-3; t1: 4-7; t2, t3: rows 2,3; ...
    for (int i = 0; i < 8; i += 4) {
        a[i] = _mm512_unpacklo_epi32(t[i], t[i + 2]);
        a[i + 1] = _mm512_unpackhi_epi32(t[i], t[i + 2]);
        a[i + 2] = _mm512_unpacklo_epi32(t[i + 1], t[i + 3]);
        a[i + 3] = _mm512_unpackhi_epi32(t[i + 1], t[i + 3]);
    }
    // a0: rows 0-3 elements 0,1; a1: 2,3; a2: 4,5; a3: 6,7; a4-a7: rows 4-7.
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm512_unpacklo_epi64(a[i], a[i + 4]);
        t[2 * i + 1] = _mm512_unpackhi_epi64(a[i], a[i + 4]);
    }
    // t[c]: column c of rows 0-7, column c + 8 of rows 0-7, column c of rows
    // 8-15, column c + 8 of rows 8-15, one per 128-bit lane.
    for (int c = 0; c < 8; c++) {
        const __m512i o = _mm512_shuffle_i64x2(t[c], t[c], _MM_SHUFFLE(3, 1, 2, 0));
        _mm256_store_si256(reinterpret_cast<__m256i*>(tile + c * 16), _mm512_castsi512_si256(o));
        _mm256_store_si256(reinterpret_cast<__m256i*>(tile + (c + 8) * 16), _mm512_extracti64x4_epi64(o, 1));
    }
}

#include "ops/attention_x86.inc"

}  // namespace
}  // namespace ms
MS_ISA_END

namespace ms {

constinit const AttentionKernels kAttentionAvx512 = kTable;

}  // namespace ms
