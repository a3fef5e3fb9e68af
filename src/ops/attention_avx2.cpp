// AVX2 + F16C attention loops: ops/attention_x86.inc over 8-float vectors.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/attention_kernels.h"
#include "quant/blocks.h"
#include "quant/isa_target.h"

MS_ISA_BEGIN(MS_ISA_AVX2)
namespace ms {
namespace {

using Vec = __m256;
using Idx = __m256i;
constexpr int kLanes = 8;
constexpr int kAcc = 8;  // accumulators, of the 16 ymm registers
constexpr int kPrefetchRows = 16;
constexpr int kMixRows = 64;  // rows in a value run, at most
constexpr int kMixHeads = 4;  // a value pass's heads: 4 x 2 vectors, half the broadcasts of 8 x 1
constexpr int kMixBytes = 16384;  // a run, and the next one prefetched: 32 KiB, within L1
// Value rows a block asks into L2 while its keys are scored (attention_x86.inc,
// block_partial_tiled): none here. Two AVX2 cores are bound by their FMAs, not
// by memory, and the extra prefetches measured 3-8 % slower.
constexpr int64_t kNearBytes = 0;

inline Vec vzero() { return _mm256_setzero_ps(); }
inline Vec vset1(float x) { return _mm256_set1_ps(x); }
inline Vec vload(const float* p) { return _mm256_loadu_ps(p); }
inline Vec vload(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline Vec vload_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline void vstore(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec vmul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline Vec vadd(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec vmax(Vec a, Vec b) { return _mm256_max_ps(a, b); }
inline Vec vmin(Vec a, Vec b) { return _mm256_min_ps(a, b); }
inline Vec vround(Vec x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline Vec vpow2(Vec n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
inline Vec vzero_where_below(Vec v, Vec x, float limit) {
    return _mm256_and_ps(v, _mm256_cmp_ps(x, _mm256_set1_ps(limit), _CMP_GE_OQ));
}
inline float hsum(Vec v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
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

// The 8 x 8 square in three rounds of unpacks: pairs of rows, then of
// pairs, then of quads.
inline void transpose_f16(const uint16_t* p, int64_t stride, int64_t n, uint16_t* tile) {
    __m128i a[8], t[8];
    for (int l = 0; l < 8; l++)
        a[l] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + std::min<int64_t>(l, n - 1) * stride));
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm_unpacklo_epi16(a[i], a[i + 1]);
        t[i + 1] = _mm_unpackhi_epi16(a[i], a[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        a[i] = _mm_unpacklo_epi32(t[i], t[i + 2]);
        a[i + 1] = _mm_unpackhi_epi32(t[i], t[i + 2]);
        a[i + 2] = _mm_unpacklo_epi32(t[i + 1], t[i + 3]);
        a[i + 3] = _mm_unpackhi_epi32(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        _mm_store_si128(reinterpret_cast<__m128i*>(tile + (2 * i) * 8), _mm_unpacklo_epi64(a[i], a[i + 4]));
        _mm_store_si128(reinterpret_cast<__m128i*>(tile + (2 * i + 1) * 8), _mm_unpackhi_epi64(a[i], a[i + 4]));
    }
}

#include "ops/attention_x86.inc"

}  // namespace
}  // namespace ms
MS_ISA_END

namespace ms {

constinit const AttentionKernels kAttentionAvx2 = kTable;

}  // namespace ms
