// AVX-512 (F/BW/VL/DQ + VNNI) row kernels: the 256-bit bodies of
// quant/dot_x86.inc with VNNI integer dots, plus 512-bit kernels for the types
// that carry most bytes (Q4_K, Q6_K, Q8_0, MXFP4, F16, BF16, F32). Same
// NT = 1 / 4 contract as dot_x86.inc.
// GCC 12's AVX-512 insert/zero-extend intrinsics pass a deliberately
// uninitialized vector to their builtins, which -Wuninitialized reports once
// inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "quant/blocks.h"
#include "quant/cpu.h"
#include "quant/kernels.h"

namespace ms {
namespace {

inline __m256i mul_sum_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
inline __m256i madd_acc(__m256i acc, __m256i p16, __m256i s16) { return _mm256_dpwssd_epi32(acc, p16, s16); }

#include "quant/dot_x86.inc"

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

inline __m512i join256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_zextsi256_si512(lo), hi, 1); }

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
    __m512 acc[NT];
    __m128 accm[NT];
    for (int t = 0; t < NT; ++t) { acc[t] = _mm512_setzero_ps(); accm[t] = _mm_setzero_ps(); }
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
            acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(dw * a.d), _mm512_cvtepi32_ps(isum[t]), acc[t]);
            __m128i m = _mm_madd_epi16(mins16, bsum_pairs(a.bsums));
            accm[t] = _mm_fmadd_ps(_mm_set1_ps(dmw * a.d), _mm_cvtepi32_ps(m), accm[t]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = _mm512_reduce_add_ps(acc[t]) - hsum4(accm[t]);
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
    __m512 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
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
            acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(dw * da), _mm512_cvtepi32_ps(isum[t]), acc[t]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = _mm512_reduce_add_ps(acc[t]);
}

// ---- F32 / F16 / BF16 ----------------------------------------------------------

inline __m512 load16_f32(const void* p) { return _mm512_loadu_ps(p); }
inline __m512 load16_f16(const void* p) { return _mm512_cvtph_ps(load256(p)); }
inline __m512 load16_bf16(const void* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load256(p)), 16));
}

// Two accumulators of 16 lanes per token; a ragged tail goes through
// zero-padded copies.
template <int NT, int ES, __m512 (*load16)(const void*)>
void dot_float_512(const void* wv, const void* act, size_t stride, int64_t n, float* out) {
    const uint8_t* w = static_cast<const uint8_t*>(wv);
    __m512 acc0[NT], acc1[NT];
    for (int t = 0; t < NT; ++t) { acc0[t] = _mm512_setzero_ps(); acc1[t] = _mm512_setzero_ps(); }
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 w0 = load16(w + i * ES), w1 = load16(w + (i + 16) * ES);
        for (int t = 0; t < NT; ++t) {
            const uint8_t* a = act_row<uint8_t>(act, stride, t) + i * ES;
            acc0[t] = _mm512_fmadd_ps(w0, load16(a), acc0[t]);
            acc1[t] = _mm512_fmadd_ps(w1, load16(a + 16 * ES), acc1[t]);
        }
    }
    if (i < n) {
        alignas(64) uint8_t wt[32 * ES] = {}, at[32 * ES];
        std::memcpy(wt, w + i * ES, size_t(n - i) * ES);
        __m512 w0 = load16(wt), w1 = load16(wt + 16 * ES);
        for (int t = 0; t < NT; ++t) {
            std::memset(at, 0, sizeof(at));
            std::memcpy(at, act_row<uint8_t>(act, stride, t) + i * ES, size_t(n - i) * ES);
            acc0[t] = _mm512_fmadd_ps(w0, load16(at), acc0[t]);
            acc1[t] = _mm512_fmadd_ps(w1, load16(at + 16 * ES), acc1[t]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[t], acc1[t]));
}

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
    for (int t = 0; t < NT; ++t) out[t] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[t], acc1[t]));
}

template <int NT>
void fill_512(RowDotFn* k) {
    k[int(GgmlType::F32)] = dot_float_512<NT, 4, load16_f32>;
    k[int(GgmlType::F16)] = dot_float_512<NT, 2, load16_f16>;
    k[int(GgmlType::BF16)] = cpu_features().avx512bf16 ? dot_bf16_dp<NT> : dot_float_512<NT, 2, load16_bf16>;
    k[int(GgmlType::Q4_K)] = dot_q4_k_512<NT>;
    k[int(GgmlType::Q6_K)] = dot_q6_k_512<NT>;
}

}  // namespace

void add_avx512_kernels(LevelKernels& k) {
    fill_256_kernels(k);
    fill_512<1>(k.dot1);
    fill_512<4>(k.dot4);
}

}  // namespace ms
