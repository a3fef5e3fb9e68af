// AVX-512 (F/BW/VL/DQ + VNNI) kernels: the 256-bit bodies of
// quant/dot_x86.inc with VNNI integer dots, 512-bit row kernels for Q4_K,
// Q6_K and (with AVX512-BF16) BF16 (same NT = 1 / 4 contract as dot_x86.inc),
// matmul tiles for Q4_K, Q6_K and Q8_0, and the activation converters. Every
// result but BF16's pair dots has the AVX2 kernels' bits (the reference
// engine's float steps); only integer work is arranged differently.
// GCC 12's AVX-512 insert/zero-extend intrinsics pass a deliberately
// uninitialized vector to their builtins, which -Wuninitialized reports once
// inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "quant/blocks.h"
#include "quant/half.h"
#include "quant/isa_target.h"
#include "quant/kernels.h"

MS_ISA_BEGIN(MS_ISA_AVX512)
namespace ms {
namespace {

inline __m256i mul_sum_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
inline __m256i madd_acc(__m256i acc, __m256i p16, __m256i s16) { return _mm256_dpwssd_epi32(acc, p16, s16); }

#include "quant/dot_x86.inc"

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

// GCC's _mm512_reduce_add_ps addition tree (256-bit halves, then hsum8),
// spelled out so that results do not depend on the compiler's.
inline float reduce_add(__m512 v) { return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1))); }

inline __m512i join256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_zextsi256_si512(lo), hi, 1); }

// The K-quant kernels below gather a block's integer sums in 16 int32 lanes,
// where the AVX2 kernels (the reference engine's steps) have 8: lane l of
// those holds what lanes l and l + 8 hold here. Folding the halves (exact)
// before the block's one float FMA keeps the reference's roundings; FMAs into
// 16 lanes, summed at the end, would round differently and, through near-tied
// expert choices, move a model's logits by percents.
inline __m256i fold_halves(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }

// ---- Q4_K: 128 weights per 64 loaded bytes ----------------------------------

// int16 lanes 0-15 = s[j], 16-31 = s[j + 1] (a 64-element vector spanning two sub-blocks).
inline __m512i scale_pair_512(__m512i s16, int j) {
    __m512i lo = _mm512_set1_epi16(int16_t(j)), hi = _mm512_set1_epi16(int16_t(j + 1));
    return _mm512_permutexvar_epi16(_mm512_mask_blend_epi16(0xffff0000u, lo, hi), s16);
}

template <int NT>
void dot_q4_k_512(const void* wv, const void* act, size_t stride, int64_t n, float* out) {
    const BlockQ4_K* x = static_cast<const BlockQ4_K*>(wv);
    const __m512i m4 = _mm512_set1_epi8(0xf);
    __m256 acc[NT];
    __m128 accm[NT];
    for (int t = 0; t < NT; ++t) { acc[t] = _mm256_setzero_ps(); accm[t] = _mm_setzero_ps(); }
    for (int64_t i = 0; i < n / QK_K; ++i) {
        alignas(16) uint8_t sm[16];
        k4_unpack(x[i].scales, sm);
        __m128i s8 = _mm_load_si128(reinterpret_cast<const __m128i*>(sm));
        __m512i s16 = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(s8));  // scales 0-7 in int16 lanes 0-7
        __m128i mins16 = _mm_cvtepu8_epi16(_mm_srli_si128(s8, 8));
        // 64 bytes of qs hold sub-blocks 2h (low nibbles of bytes 0-31), 2h+1 (high
        // nibbles), 2h+2, 2h+3 (bytes 32-63); reorder the 128-bit lanes so each
        // vector covers two consecutive sub-blocks, matching contiguous activations.
        __m512i w[4];
        for (int h = 0; h < 2; ++h) {
            __m512i q = load512(x[i].qs + 64 * h);
            __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            w[2 * h] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
            w[2 * h + 1] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
        }
        __m512i isum[NT];
        for (int t = 0; t < NT; ++t) isum[t] = _mm512_setzero_si512();
        for (int k = 0; k < 4; ++k) {
            __m512i s = scale_pair_512(s16, 2 * k);
            for (int t = 0; t < NT; ++t) {
                const int8_t* a = act_row<BlockQ8_K>(act, stride, t)[i].qs + 64 * k;
                isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(w[k], load512(a)), s);
            }
        }
        float dw = f16(x[i].d), dmw = f16(x[i].dmin);
        for (int t = 0; t < NT; ++t) {
            const BlockQ8_K& a = act_row<BlockQ8_K>(act, stride, t)[i];
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), _mm256_cvtepi32_ps(fold_halves(isum[t])), acc[t]);
            __m128i m = _mm_madd_epi16(mins16, bsum_pairs(a.bsums));
            accm[t] = _mm_fmadd_ps(_mm_set1_ps(dmw * a.d), _mm_cvtepi32_ps(m), accm[t]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]) - hsum4(accm[t]);
}

// ---- Q6_K: one 512-bit vector per 64 elements ------------------------------

// int16 lanes 8g..8g+7 (g = 0..3) = s[j + g]: four groups of 16 elements.
inline __m512i scale_quad_512(__m512i s16, int j) {
    const __m512i step = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2,
                                          1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_epi16(_mm512_add_epi16(step, _mm512_set1_epi16(int16_t(j))), s16);
}

template <int NT>
void dot_q6_k_512(const void* wv, const void* act, size_t stride, int64_t n, float* out) {
    const BlockQ6_K* x = static_cast<const BlockQ6_K*>(wv);
    const __m512i m4 = _mm512_set1_epi8(0xf), m2 = _mm512_set1_epi8(3);
    // Per 16-bit lane shifts picking qh's bit pairs: elements 0-31 bits 0-1,
    // 32-63 bits 2-3 (first vector); 64-95 bits 4-5, 96-127 bits 6-7 (second).
    const __m512i sh01 = join256(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
    const __m512i sh23 = join256(_mm256_set1_epi16(4), _mm256_set1_epi16(6));
    __m256 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
        __m512i s16 = _mm512_zextsi256_si512(sc16);
        __m512i isum[NT];
        for (int t = 0; t < NT; ++t) {
            // -32 * sum over groups of scale * bsum, folded in up front (exact int32).
            __m256i bias = _mm256_madd_epi16(load256(act_row<BlockQ8_K>(act, stride, t)[i].bsums), sc16);
            isum[t] = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(bias, 5)));
        }
        for (int h = 0; h < 2; ++h) {
            __m512i ql = load512(x[i].ql + 64 * h);
            __m512i qh = _mm512_broadcast_i64x4(load256(x[i].qh + 32 * h));
            __m512i h01 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh01), m2), 4);
            __m512i h23 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh23), m2), 4);
            __m512i v0 = _mm512_or_si512(_mm512_and_si512(ql, m4), h01);
            __m512i v1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), h23);
            __m512i s0 = scale_quad_512(s16, 8 * h), s1 = scale_quad_512(s16, 8 * h + 4);
            for (int t = 0; t < NT; ++t) {
                const int8_t* a = act_row<BlockQ8_K>(act, stride, t)[i].qs + 128 * h;
                isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(v0, load512(a)), s0);
                isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(v1, load512(a + 64)), s1);
            }
        }
        float dw = f16(x[i].d);
        for (int t = 0; t < NT; ++t) {
            float da = act_row<BlockQ8_K>(act, stride, t)[i].d;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * da), _mm256_cvtepi32_ps(fold_halves(isum[t])), acc[t]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
}

// ---- BF16 ----------------------------------------------------------------------
//
// F32 and F16 keep dot_x86.inc's dot_float: its two 8-lane accumulators are
// the rounding the golden files were made with (qwen3moe-MXFP4_MOE: 0 from
// the reference with those bits; 1.4e-3 with two 16-lane accumulators, whose
// F32 router logits flipped a near-tied expert choice), and one 16-lane
// accumulator, the only 512-bit form with the same bits, is no faster.

// BF16 with the AVX512-BF16 pair dot (32 products per instruction).
template <int NT>
void dot_bf16_dp(const void* wv, const void* act, size_t stride, int64_t n, float* out) {
    const uint8_t* w = static_cast<const uint8_t*>(wv);
    __m512 acc0[NT], acc1[NT];
    for (int t = 0; t < NT; ++t) { acc0[t] = _mm512_setzero_ps(); acc1[t] = _mm512_setzero_ps(); }
    int64_t i = 0;
    auto step = [&](const uint8_t* wp, const uint8_t* const* ap) {
        __m512bh w0 = (__m512bh)load512(wp), w1 = (__m512bh)load512(wp + 64);
        for (int t = 0; t < NT; ++t) {
            acc0[t] = _mm512_dpbf16_ps(acc0[t], (__m512bh)load512(ap[t]), w0);
            acc1[t] = _mm512_dpbf16_ps(acc1[t], (__m512bh)load512(ap[t] + 64), w1);
        }
    };
    for (; i + 64 <= n; i += 64) {
        const uint8_t* ap[NT];
        for (int t = 0; t < NT; ++t) ap[t] = act_row<uint8_t>(act, stride, t) + i * 2;
        step(w + i * 2, ap);
    }
    if (i < n) {
        alignas(64) uint8_t wt[128] = {}, at[NT][128] = {};
        std::memcpy(wt, w + i * 2, size_t(n - i) * 2);
        const uint8_t* ap[NT];
        for (int t = 0; t < NT; ++t) {
            std::memcpy(at[t], act_row<uint8_t>(act, stride, t) + i * 2, size_t(n - i) * 2);
            ap[t] = at[t];
        }
        step(wt, ap);
    }
    for (int t = 0; t < NT; ++t) out[t] = reduce_add(_mm512_add_ps(acc0[t], acc1[t]));
}

// ---- Tiles: a band of rows times NT tokens --------------------------------
//
// Per token every tile below performs its dot1 kernel's float operations in
// the same order (block scale dw * da, one FMA per block into the same lanes,
// the same reduction), and its integer block sums land in the same int32
// lanes; only integer work moves (exact in any order) and per-token setup is
// shared: the tokens' activation scales sit side by side in scratch, so one
// multiply forms the block scale of all NT tokens, which the FMAs then read
// as broadcast memory operands.

// Rows are prefetched this far ahead: weights stream from DRAM on the first
// pass over a band and from L2 after it.
constexpr size_t kTilePrefetchBytes = 2048;

inline void prefetch_ahead(const uint8_t* W, size_t w_stride, int64_t r, int64_t nrows) {
    const int64_t ahead = int64_t((kTilePrefetchBytes + w_stride - 1) / w_stride);
    if (r + ahead >= nrows) return;
    const uint8_t* p = W + size_t(r + ahead) * w_stride;
    for (size_t off = 0; off < w_stride; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
}

// Horizontal sums of many accumulators at once, each with exactly the
// addition tree of hsum8 (128-bit halves, then lanes {0,1} + {2,3}, then the
// two) or of hsum4 (its last two steps). Float addition is commutative, so
// only the tree matters.

// x, y each hold two 8-lane partial sums; 128-bit lane j of the result
// is the 4-lane sum (low + high 128 bits) of the j-th of those four.
inline __m512 sum_quarters(__m512 x, __m512 y) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
}
// The last two steps for sixteen 4-lane sums: lane 4j + k = (v0 + v2) + (v1 + v3) of
// 128-bit lane j of c[k].
inline __m512 sum_fours(__m512 c0, __m512 c1, __m512 c2, __m512 c3) {
    __m512 g0 = _mm512_add_ps(_mm512_shuffle_ps(c0, c1, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(c0, c1, _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 g1 = _mm512_add_ps(_mm512_shuffle_ps(c2, c3, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(c2, c3, _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_ps(g0, g1, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(g0, g1, _MM_SHUFFLE(3, 1, 3, 1)));
}

// The Q8_K tiles keep tokens in pairs: lanes 0-7 of acc[p] are token 2p's
// 8-lane dot1 accumulator, lanes 8-15 token 2p + 1's (acc padded to whole
// quads of tokens). Their hsum8s as four-lane sums: 128-bit lane j of c[m]
// belongs to token 4m + j; c[m] = 0 for 4m >= NT.
template <int NT>
inline void reduce_pairs_to_fours(const __m512* acc, __m512 c[4]) {
    for (int m = 0; m < 4; ++m) c[m] = 4 * m < NT ? sum_quarters(acc[2 * m], acc[2 * m + 1]) : _mm512_setzero_ps();
}

// fold_halves of a and b side by side: lanes 0-7 from a, 8-15 from b.
inline __m512i fold_pair(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}

// Y[t * y_stride + r] for t < valid from lane 4j + k = token 4k + j (sum_fours' order).
inline void store_fours(float* Y, size_t y_stride, int64_t r, int valid, __m512 v) {
    alignas(64) float out[16];
    _mm512_store_ps(out, v);
    for (int t = 0; t < valid; ++t) Y[size_t(t) * y_stride + size_t(r)] = out[4 * (t % 4) + t / 4];
}

// Q8_K activations of NT <= 16 tokens, rearranged per block: a header, then
// each token's 256 quants, 64-byte aligned, then its 16 bsums. In place the
// quants sit 4 bytes into a 292-byte block, so nearly every 64-byte load would
// straddle two cache lines, which costs as much as the arithmetic. The header
// holds the scales d of token pairs (dp[p]: token 2p's in lanes 0-7, 2p + 1's
// in 8-15, zero past NT) and, for Q4_K's mins, four tokens per 512-bit vector:
// token 4q + u's d in float lanes 4u..4u+3 of dq[q] and its bsum pairs in int16
// lanes 8u..8u+7 of bp[q], so one madd and one FMA do for four tokens what
// dot1's 128-bit min step does for one.
struct TileQ8KHead {
    float dp[8][16];
    float dq[4][16];
    int16_t bp[4][32];
};
static_assert(sizeof(TileQ8KHead) == 1024);

constexpr size_t q8_k_bsums(int nt) { return sizeof(TileQ8KHead) + 256 * size_t(nt); }  // offset in a record
constexpr size_t q8_k_record(int nt) { return (q8_k_bsums(nt) + 32 * size_t(nt) + 63) / 64 * 64; }
size_t tile_q8_k_scratch(int nt, int64_t n) { return size_t(n / QK_K) * q8_k_record(nt); }

// Tokens t >= valid take token valid - 1's activations (a padded tile).
template <int NT, bool Mins>
void prep_q8_k(const uint8_t* act, size_t stride, int valid, int64_t nb, uint8_t* scratch) {
    for (int64_t i = 0; i < nb; ++i) {
        uint8_t* rec = scratch + size_t(i) * q8_k_record(NT);
        TileQ8KHead* h = reinterpret_cast<TileQ8KHead*>(rec);
        if constexpr (Mins && NT % 4 != 0) std::memset(h, 0, sizeof(*h));  // the last quad's unused lanes
        for (int p = 0; p < (NT + 1) / 2; ++p) _mm512_store_ps(h->dp[p], _mm512_setzero_ps());
        for (int t = 0; t < NT; ++t) {
            const BlockQ8_K& a = act_row<BlockQ8_K>(act, stride, std::min(t, valid - 1))[i];
            _mm256_store_si256(reinterpret_cast<__m256i*>(rec + q8_k_bsums(NT) + 32 * t), load256(a.bsums));
            _mm256_store_ps(h->dp[t / 2] + 8 * (t % 2), _mm256_set1_ps(a.d));
            if constexpr (Mins) {
                _mm_store_ps(h->dq[t / 4] + 4 * (t % 4), _mm_set1_ps(a.d));
                _mm_store_si128(reinterpret_cast<__m128i*>(h->bp[t / 4] + 8 * (t % 4)), bsum_pairs(a.bsums));
            }
            for (int k = 0; k < 4; ++k)
                _mm512_store_si512(rec + sizeof(TileQ8KHead) + 256 * t + 64 * k, load512(a.qs + 64 * k));
        }
    }
}

// The token loop of the Q8_K tiles, for one block: weight vectors w[k]
// (elements 64k..64k+63) with their int16 scales s[k] against each token's
// quants, into the int32 lanes dot1 uses, folded to dot1's 8 lanes, then one
// FMA per token pair (acc[p], see reduce_pairs_to_fours) with the block scales
// dw * d. Q6_K's sums start from its bias (bsums times bias16); Q4_K's from
// zero, so their first step is a madd. U tokens are interleaved so that their
// dependency chains overlap in program order.
template <int NT>
inline void tile_tokens_q8_k(const __m512i w[4], const __m512i s[4], float dw, const uint8_t* rec,
                             const __m512i* bias16, __m512* acc) {
    constexpr int U = NT < 4 ? NT : 4;
    static_assert(NT % U == 0);
    const TileQ8KHead* h = reinterpret_cast<const TileQ8KHead*>(rec);
    const int8_t* qs = reinterpret_cast<const int8_t*>(rec + sizeof(TileQ8KHead));
    const int16_t* bsums = reinterpret_cast<const int16_t*>(rec + q8_k_bsums(NT));
    const __m512 dwv = _mm512_set1_ps(dw);
    for (int t0 = 0; t0 < NT; t0 += U) {
        __m512i isum[U];
        for (int u = 0; u < U; ++u) {
            const int8_t* q = qs + 256 * (t0 + u);
            isum[u] = bias16 ? _mm512_madd_epi16(_mm512_castsi256_si512(_mm256_load_si256(
                                                     reinterpret_cast<const __m256i*>(bsums + 16 * (t0 + u)))), *bias16)
                             : _mm512_madd_epi16(_mm512_maddubs_epi16(w[0], _mm512_load_si512(q)), s[0]);
        }
        for (int k = bias16 ? 0 : 1; k < 4; ++k)
            for (int u = 0; u < U; ++u)
                isum[u] = _mm512_dpwssd_epi32(isum[u], _mm512_maddubs_epi16(w[k], _mm512_load_si512(qs + 256 * (t0 + u) + 64 * k)), s[k]);
        for (int u = 0; u < U; u += 2) {  // U is 1 only for NT = 1: the pair's second half then repeats it
            const int p = (t0 + u) / 2;
            const __m512i folded = fold_pair(isum[u], isum[u + 1 < U ? u + 1 : u]);
            acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(dwv, _mm512_load_ps(h->dp[p])), _mm512_cvtepi32_ps(folded), acc[p]);
        }
    }
}

template <int NT>
void tile_q4_k(const uint8_t* W, size_t w_stride, int64_t nrows, const uint8_t* act, size_t stride, int valid,
               int64_t n, float* Y, size_t y_stride, uint8_t* scratch) {
    constexpr int NP = (NT + 3) / 4 * 4, NQ = NP / 4;  // accumulators padded to whole quads
    static_assert(NT <= 16);
    const int64_t nb = n / QK_K;
    prep_q8_k<NT, true>(act, stride, valid, nb, scratch);
    const __m512i m4 = _mm512_set1_epi8(0xf);
    const __m512i nib_shift = join256(_mm256_setzero_si256(), _mm256_set1_epi16(4));
    for (int64_t r = 0; r < nrows; ++r) {
        prefetch_ahead(W, w_stride, r, nrows);
        const BlockQ4_K* x = reinterpret_cast<const BlockQ4_K*>(W + size_t(r) * w_stride);
        __m512 acc[NP / 2], accm[NQ];
        for (int p = 0; p < NP / 2; ++p) acc[p] = _mm512_setzero_ps();
        for (int q = 0; q < NQ; ++q) accm[q] = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const uint8_t* rec = scratch + size_t(i) * q8_k_record(NT);
            const TileQ8KHead* h = reinterpret_cast<const TileQ8KHead*>(rec);
            // The weight decode of dot_q4_k_512, once for all NT tokens.
            alignas(16) uint8_t sm[16];
            k4_unpack(x[i].scales, sm);
            __m128i s8 = _mm_load_si128(reinterpret_cast<const __m128i*>(sm));
            __m512i s16 = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(s8));
            __m512i mins = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_srli_si128(s8, 8)));
            // Vector k: sub-blocks 2k, 2k + 1 = low, then high nibbles of qs[32k..32k+32).
            __m512i w[4], s[4];
            for (int k = 0; k < 4; ++k) {
                w[k] = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(load256(x[i].qs + 32 * k)), nib_shift), m4);
                s[k] = scale_pair_512(s16, 2 * k);
            }
            tile_tokens_q8_k<NT>(w, s, f16(x[i].d), rec, nullptr, acc);
            const __m512 dmw = _mm512_set1_ps(f16(x[i].dmin));
            for (int q = 0; q < NQ; ++q) {
                __m512i m = _mm512_madd_epi16(mins, _mm512_load_si512(h->bp[q]));
                accm[q] = _mm512_fmadd_ps(_mm512_mul_ps(dmw, _mm512_load_ps(h->dq[q])), _mm512_cvtepi32_ps(m), accm[q]);
            }
        }
        // dot1: hsum8(acc) - hsum4(accm); accm[q] is already in four-lane form.
        __m512 c[4], cm[4];
        reduce_pairs_to_fours<NT>(acc, c);
        for (int q = 0; q < 4; ++q) cm[q] = q < NQ ? accm[q] : _mm512_setzero_ps();
        store_fours(Y, y_stride, r, valid, _mm512_sub_ps(sum_fours(c[0], c[1], c[2], c[3]), sum_fours(cm[0], cm[1], cm[2], cm[3])));
    }
}

template <int NT>
void tile_q6_k(const uint8_t* W, size_t w_stride, int64_t nrows, const uint8_t* act, size_t stride, int valid,
               int64_t n, float* Y, size_t y_stride, uint8_t* scratch) {
    constexpr int NP = (NT + 3) / 4 * 4;
    static_assert(NT <= 16);
    const int64_t nb = n / QK_K;
    prep_q8_k<NT, false>(act, stride, valid, nb, scratch);
    const __m512i m4 = _mm512_set1_epi8(0xf), m2 = _mm512_set1_epi8(3);
    const __m512i sh01 = join256(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
    const __m512i sh23 = join256(_mm256_set1_epi16(4), _mm256_set1_epi16(6));
    for (int64_t r = 0; r < nrows; ++r) {
        prefetch_ahead(W, w_stride, r, nrows);
        const BlockQ6_K* x = reinterpret_cast<const BlockQ6_K*>(W + size_t(r) * w_stride);
        __m512 acc[NP / 2];
        for (int p = 0; p < NP / 2; ++p) acc[p] = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const uint8_t* rec = scratch + size_t(i) * q8_k_record(NT);
            // The weight decode of dot_q6_k_512: v[k] covers elements 64k..64k+63.
            __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
            // dot1's bias -32 * (b0*s0 + b1*s1) is the same int32 as b0*(-32 s0) + b1*(-32 s1);
            // -32 s fits int16, so one madd per token forms it.
            // Its upper 256 bits are zero, which zeroes whatever sits above the
            // 256-bit bsums in the 512-bit madd.
            __m512i bias16 = _mm512_zextsi256_si512(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, 5)));
            __m512i s16 = _mm512_zextsi256_si512(sc16);
            __m512i v[4], s[4];
            for (int j = 0; j < 2; ++j) {
                __m512i ql = load512(x[i].ql + 64 * j);
                __m512i qh = _mm512_broadcast_i64x4(load256(x[i].qh + 32 * j));
                __m512i h01 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh01), m2), 4);
                __m512i h23 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh23), m2), 4);
                v[2 * j] = _mm512_or_si512(_mm512_and_si512(ql, m4), h01);
                v[2 * j + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), h23);
            }
            for (int k = 0; k < 4; ++k) s[k] = scale_quad_512(s16, 4 * k);
            tile_tokens_q8_k<NT>(v, s, f16(x[i].d), rec, &bias16, acc);
        }
        __m512 c[4];
        reduce_pairs_to_fours<NT>(acc, c);
        store_fours(Y, y_stride, r, valid, sum_fours(c[0], c[1], c[2], c[3]));
    }
}

// Q8_0 tiles pair rows instead: float lanes 0-7 carry row r's 256-bit dot1
// accumulator, lanes 8-15 row r + 1's. VNNI multiplies unsigned by signed
// bytes, so the activations are stored as a + 128 (scratch) and each int32
// lane subtracts 128 * (sum of its four weights), formed once per row pair
// and block: the lane holds sum(w * a) exactly, as dot1's sign trick does
// (activations never hold -128).
// Per block: float d[16], then nt x 32 biased bytes, padded to 64 bytes.
constexpr size_t q8_0_record(int nt) { return (64 + 32 * size_t(nt) + 63) / 64 * 64; }

size_t tile_q8_0_scratch(int nt, int64_t n) { return size_t(n / QK) * q8_0_record(nt); }

template <int NT>
void tile_q8_0(const uint8_t* W, size_t w_stride, int64_t nrows, const uint8_t* act, size_t stride, int valid,
               int64_t n, float* Y, size_t y_stride, uint8_t* scratch) {
    constexpr int NP = NT + NT % 2, U = NT < 4 ? NT : 4;  // accumulators padded to pairs
    static_assert(NT <= 16 && NT % U == 0);
    constexpr size_t rec = q8_0_record(NT);
    const int64_t nb = n / QK;
    const __m256i flip = _mm256_set1_epi8(int8_t(0x80));
    for (int64_t i = 0; i < nb; ++i) {
        float* d = reinterpret_cast<float*>(scratch + size_t(i) * rec);
        _mm512_store_ps(d, _mm512_setzero_ps());
        for (int t = 0; t < NT; ++t) {
            const BlockQ8_0& a = act_row<BlockQ8_0>(act, stride, std::min(t, valid - 1))[i];
            d[t] = f16(a.d);
            _mm256_store_si256(reinterpret_cast<__m256i*>(scratch + size_t(i) * rec + 64 + 32 * t),
                               _mm256_xor_si256(load256(a.qs), flip));
        }
    }
    const __m512i bias = _mm512_set1_epi8(int8_t(0x80));
    for (int64_t r = 0; r < nrows; r += 2) {
        prefetch_ahead(W, w_stride, r, nrows);
        prefetch_ahead(W, w_stride, r + 1, nrows);
        const BlockQ8_0* x0 = reinterpret_cast<const BlockQ8_0*>(W + size_t(r) * w_stride);
        const BlockQ8_0* x1 = r + 1 < nrows ? reinterpret_cast<const BlockQ8_0*>(W + size_t(r + 1) * w_stride) : x0;
        __m512 acc[NP];
        for (int t = 0; t < NP; ++t) acc[t] = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            __m512i w = join256(load256(x0[i].qs), load256(x1[i].qs));
            __m512i neg = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, w));
            __m512 dw = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(f16(x0[i].d))),
                                           _mm256_set1_ps(f16(x1[i].d)), 1);
            const uint8_t* rp = scratch + size_t(i) * rec;
            const float* d = reinterpret_cast<const float*>(rp);
            for (int t0 = 0; t0 < NT; t0 += U) {
                __m512i isum[U];
                for (int u = 0; u < U; ++u)
                    isum[u] = _mm512_dpbusd_epi32(
                        neg, _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(rp + 64 + 32 * (t0 + u)))), w);
                for (int u = 0; u < U; ++u)
                    acc[t0 + u] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(d[t0 + u])), _mm512_cvtepi32_ps(isum[u]), acc[t0 + u]);
            }
        }
        // hsum8 of each half: 128-bit lane 2u + h of sum_quarters(acc[t], acc[t + 1])
        // holds token t + u's row r + h; sum_fours then puts token 8g + 2k + u,
        // row r + h at lane 4 * (2u + h) + k of group g.
        for (int g = 0; g < (NT + 7) / 8; ++g) {
            __m512 c[4];
            for (int k = 0; k < 4; ++k)
                c[k] = 8 * g + 2 * k < NT ? sum_quarters(acc[8 * g + 2 * k], acc[8 * g + 2 * k + 1]) : _mm512_setzero_ps();
            alignas(64) float out[16];
            _mm512_store_ps(out, sum_fours(c[0], c[1], c[2], c[3]));
            for (int k = 0; k < 4 && 8 * g + 2 * k < valid; ++k)
                for (int u = 0; u < 2 && 8 * g + 2 * k + u < valid; ++u)
                    for (int h = 0; h < 2 && r + h < nrows; ++h)
                        Y[size_t(8 * g + 2 * k + u) * y_stride + size_t(r + h)] = out[4 * (2 * u + h) + k];
        }
    }
}

// ---- Activation conversion ---------------------------------------------------
//
// dot.cpp's scalar converters sixteen lanes at a time, byte for byte: the same
// float operations (a lane's IEEE multiply and divide round as a scalar's
// do), the same round-half-even trick, NaN passed over by the absolute
// maximum as std::max and '>' pass it over (vmaxps returns its second operand
// when either is NaN), int8 by truncation, and vcvtps2ph, which rounds every
// float exactly as fp32_to_fp16 does (checked over all 2^32 inputs).

inline __m512 abs512(__m512 v) { return _mm512_andnot_ps(_mm512_set1_ps(-0.f), v); }

// dot.cpp's round_even(a * b): adding 1.5 * 2^23 pushes the fraction out of
// the mantissa. The explicitly rounded forms keep GCC from contracting the
// multiply and add into one FMA (it contracts plain vector arithmetic), which
// would skip the product's rounding that the scalar code performs.
inline __m512i round_even_product(__m512 a, __m512 b) {
    constexpr int rn = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    __m512 t = _mm512_add_round_ps(_mm512_mul_round_ps(a, b, rn), _mm512_set1_ps(12582912.f), rn);
    return _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(t), _mm512_set1_epi32(0x007fffff)),
                            _mm512_set1_epi32(0x00400000));
}

// Q8_0 / Q8_1: the scales of up to 16 blocks come from one divide each.
template <typename Block>
void quantize_q8_32_512(const float* x, void* dst, int64_t n) {
    Block* y = static_cast<Block*>(dst);
    const int64_t nb = n / QK;
    for (int64_t b0 = 0; b0 < nb; b0 += 16) {
        const int count = int(std::min<int64_t>(16, nb - b0));
        alignas(64) float amax[16] = {};
        for (int k = 0; k < count; ++k) {
            const float* xb = x + (b0 + k) * QK;
            __m512 m = _mm512_max_ps(abs512(_mm512_loadu_ps(xb)), _mm512_setzero_ps());
            amax[k] = _mm512_reduce_max_ps(_mm512_max_ps(abs512(_mm512_loadu_ps(xb + 16)), m));
        }
        const __m512 am = _mm512_load_ps(amax), q127 = _mm512_set1_ps(127.f);
        const __m512 d = _mm512_div_ps(am, q127);
        alignas(64) float dv[16], idv[16];
        alignas(32) uint16_t d16[16];
        _mm512_store_ps(dv, d);
        _mm512_store_ps(idv, _mm512_maskz_div_ps(_mm512_cmp_ps_mask(am, _mm512_setzero_ps(), _CMP_NEQ_OQ), q127, am));
        _mm256_store_si256(reinterpret_cast<__m256i*>(d16), _mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        for (int k = 0; k < count; ++k) {
            const float* xb = x + (b0 + k) * QK;
            Block& yb = y[b0 + k];
            const __m512 id = _mm512_set1_ps(idv[k]);
            __m512i q0 = round_even_product(_mm512_loadu_ps(xb), id);
            __m512i q1 = round_even_product(_mm512_loadu_ps(xb + 16), id);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(yb.qs), _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(yb.qs + 16), _mm512_cvtepi32_epi8(q1));
            yb.d = d16[k];
            if constexpr (sizeof(Block) == sizeof(BlockQ8_1))
                yb.s = fp32_to_fp16(dv[k] * float(_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1))));
        }
    }
}

void quantize_q8_k_512(const float* x, void* dst, int64_t n) {
    BlockQ8_K* y = static_cast<BlockQ8_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        __m512 m = _mm512_setzero_ps();
        for (int k = 0; k < 16; ++k) m = _mm512_max_ps(abs512(_mm512_loadu_ps(x + 16 * k)), m);
        const float amax = _mm512_reduce_max_ps(m);
        if (amax == 0.f) {
            std::memset(&y[i], 0, sizeof(BlockQ8_K));
            continue;
        }
        // The scalar loop keeps the first element of largest magnitude.
        int first = 0;
        for (int k = 0; k < 16; ++k) {
            __mmask16 eq = _mm512_cmp_ps_mask(abs512(_mm512_loadu_ps(x + 16 * k)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (eq) {
                first = 16 * k + __builtin_ctz(eq);
                break;
            }
        }
        const float iscale = -127.f / x[first];
        const __m512 is = _mm512_set1_ps(iscale);
        const __m512i flip = _mm512_set1_epi8(int8_t(0x80));
        __m512i sad[4];
        for (int k4 = 0; k4 < 4; ++k4) {
            __m128i q8[4];
            for (int j = 0; j < 4; ++j) {
                __m512i q = round_even_product(is, _mm512_loadu_ps(x + 64 * k4 + 16 * j));
                q8[j] = _mm512_cvtepi32_epi8(_mm512_min_epi32(q, _mm512_set1_epi32(127)));
            }
            __m512i q64 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(q8[1], q8[0])),
                                             _mm256_set_m128i(q8[3], q8[2]), 1);
            _mm512_storeu_si512(y[i].qs + 64 * k4, q64);
            // u64 lane l: the sum of bytes 8l..8l+7 biased by +128 each.
            sad[k4] = _mm512_sad_epu8(_mm512_xor_si512(q64, flip), _mm512_setzero_si512());
        }
        // Group g (16 bytes) = u64 lanes 2g, 2g + 1 of its 64-byte vector.
        const __m512i even = _mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0), odd = _mm512_set_epi64(15, 13, 11, 9, 7, 5, 3, 1);
        __m512i g0 = _mm512_add_epi64(_mm512_permutex2var_epi64(sad[0], even, sad[1]), _mm512_permutex2var_epi64(sad[0], odd, sad[1]));
        __m512i g1 = _mm512_add_epi64(_mm512_permutex2var_epi64(sad[2], even, sad[3]), _mm512_permutex2var_epi64(sad[2], odd, sad[3]));
        __m256i sums = _mm256_set_m128i(_mm512_cvtepi64_epi16(g1), _mm512_cvtepi64_epi16(g0));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].bsums), _mm256_sub_epi16(sums, _mm256_set1_epi16(16 * 128)));
        y[i].d = 1 / iscale;
    }
}

template <int NT>
constexpr void fill_512(RowDotFn* k, bool bf16) {
    if (bf16) k[int(GgmlType::BF16)] = dot_bf16_dp<NT>;
    k[int(GgmlType::Q4_K)] = dot_q4_k_512<NT>;
    k[int(GgmlType::Q6_K)] = dot_q6_k_512<NT>;
}

// Evaluated at compile time only (the constinit tables below).
constexpr LevelKernels kernels_512(bool bf16) {
    LevelKernels k = kernels_256();
    fill_512<1>(k.dot1, bf16);
    fill_512<4>(k.dot4, bf16);
    k.tiles[int(GgmlType::Q4_K)] = {{tile_q4_k<16>, tile_q4_k<8>, tile_q4_k<4>, tile_q4_k<2>, tile_q4_k<1>}, tile_q8_k_scratch};
    k.tiles[int(GgmlType::Q6_K)] = {{tile_q6_k<16>, tile_q6_k<8>, tile_q6_k<4>, tile_q6_k<2>, tile_q6_k<1>}, tile_q8_k_scratch};
    k.tiles[int(GgmlType::Q8_0)] = {{tile_q8_0<16>, tile_q8_0<8>, tile_q8_0<4>, tile_q8_0<2>, tile_q8_0<1>}, tile_q8_0_scratch};
    k.quantize[int(ActType::Q8_0)] = quantize_q8_32_512<BlockQ8_0>;
    k.quantize[int(ActType::Q8_1)] = quantize_q8_32_512<BlockQ8_1>;
    k.quantize[int(ActType::Q8_K)] = quantize_q8_k_512;
    return k;
}

}  // namespace
}  // namespace ms
MS_ISA_END

namespace ms {

constinit const LevelKernels kDotAvx512 = kernels_512(false);
constinit const LevelKernels kDotAvx512Bf16 = kernels_512(true);

}  // namespace ms
