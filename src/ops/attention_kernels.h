// Internal to ops/: the SIMD inner loops of attention (attention_avx2.cpp,
// attention_avx512.cpp), chosen by attention.cpp at the active quant/cpu.h
// level. Each call serves all the query heads that share one KV head, so a
// cache row is loaded (and widened from F16) once for the whole group rather
// than once per head. The scalar loops in attention.cpp are the reference
// they are tested against.
#pragma once
#include <cstdint>

namespace ms {

struct AttentionKernels {
    // For each of n_q query heads (q: n_q rows of dim floats) and j in
    // [0, n_pos): scores[h * s_stride + j] = dot(q row h, k row j), the k rows
    // `stride` elements apart. For an F16 cache q holds F16 values widened.
    void (*scores_f32)(const float* q, int n_q, const float* k, int64_t stride, int dim, int64_t n_pos,
                       float* scores, int64_t s_stride);
    void (*scores_f16)(const float* q, int n_q, const uint16_t* k, int64_t stride, int dim, int64_t n_pos,
                       float* scores, int64_t s_stride);
    // x[0..n) = softmax(x * scale) with the sink logit, the same bits as
    // ms::softmax. x has room for n rounded up to a multiple of
    // kAttentionSimdWidth; the padding is overwritten.
    void (*softmax)(float* x, int64_t n, float scale, float sink);
    // out[h * dim + d] = sum over j in [0, n_pos), in order, of
    // p[h * p_stride + j] * v row j [d], for h in [0, n_q).
    void (*mix_f32)(const float* p, int64_t p_stride, int n_q, const float* v, int64_t stride, int dim,
                    int64_t n_pos, float* out);
    void (*mix_f16)(const float* p, int64_t p_stride, int n_q, const uint16_t* v, int64_t stride, int dim,
                    int64_t n_pos, float* out);
};

// Both tables need dim (head_dim and head_dim_v) to be a multiple of this.
// It is also the widest vector, in floats.
constexpr int kAttentionSimdWidth = 16;

extern const AttentionKernels kAttentionAvx2;
extern const AttentionKernels kAttentionAvx512;

}  // namespace ms
