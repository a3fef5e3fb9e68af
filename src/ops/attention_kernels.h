// Internal to ops/: the SIMD inner loops of attention (attention_avx2.cpp,
// attention_avx512.cpp), chosen by attention.cpp at the active quant/cpu.h
// level. Each call serves all the query heads that share one KV head, so a
// cache row is loaded (and widened from F16) once for the whole group rather
// than once per head. The scalar loops in attention.cpp are the reference
// they are tested against, within rounding bounds (products are fused, the
// exponentials are a polynomial: not the reference's bits).
#pragma once
#include <cstdint>

#include "ops/attention.h"
#include "quant/blocks.h"

namespace ms {

// block_f16_tiled's arguments: one block of flash-decoding over K in tiles.
struct TiledBlock {
    const float* q = nullptr;
    int n_q = 0;
    const uint16_t* k = nullptr;
    int k_skip = 0, dim = 0;
    const uint16_t* v = nullptr;
    int64_t v_stride = 0;
    int dim_v = 0;
    int64_t n_pos = 0;
    float scale = 0;
    float* scores = nullptr;
    int64_t s_stride = 0;
    float *max = nullptr, *sum = nullptr, *out = nullptr;
};

struct AttentionKernels {
    // For each of n_q query heads (q: n_q rows of dim floats) and j in
    // [0, n_pos): scores[h * s_stride + j] = dot(q row h, k row j), the k rows
    // `stride` elements apart. For an F16 cache q holds F16 values widened.
    void (*scores_f32)(const float* q, int n_q, const float* k, int64_t stride, int dim, int64_t n_pos,
                       float* scores, int64_t s_stride);
    void (*scores_f16)(const float* q, int n_q, const uint16_t* k, int64_t stride, int dim, int64_t n_pos,
                       float* scores, int64_t s_stride);
    // out[h * dim + d] = sum over j in [0, n_pos), in order, of
    // p[h * p_stride + j] * v row j [d], for h in [0, n_q).
    void (*mix_f32)(const float* p, int64_t p_stride, int n_q, const float* v, int64_t stride, int dim,
                    int64_t n_pos, float* out);
    void (*mix_f16)(const float* p, int64_t p_stride, int n_q, const uint16_t* v, int64_t stride, int dim,
                    int64_t n_pos, float* out);
    // One block of flash-decoding: for each of n_q query heads against the
    // n_pos keys and values (rows k_stride and v_stride elements apart),
    // max[h] = the largest score * scale, sum[h] = the sum over j of e_j =
    // e^(score_j * scale - max[h]), and out[h * dim_v + d] = sum of e_j *
    // v_j[d]. scores: n_q rows of s_stride floats, s_stride at least n_pos
    // rounded up to a multiple of kAttentionSimdWidth; overwritten.
    void (*block_f32)(const float* q, int n_q, const float* k, int64_t k_stride, int dim, const float* v,
                      int64_t v_stride, int dim_v, int64_t n_pos, float scale, float* scores, int64_t s_stride,
                      float* max, float* sum, float* out);
    void (*block_f16)(const float* q, int n_q, const uint16_t* k, int64_t k_stride, int dim, const uint16_t* v,
                      int64_t v_stride, int dim_v, int64_t n_pos, float scale, float* scores, int64_t s_stride,
                      float* max, float* sum, float* out);
    // block_f16 over K kept in tiles (attention.h, KvLayer::k_tiled): k is
    // the first tile, the block's first key k_skip rows into it. Lane l sums
    // key l's products in element order, as block_f16 does: the same bits.
    void (*block_f16_tiled)(const float* q, int n_q, const uint16_t* k, int k_skip, int dim, const uint16_t* v,
                            int64_t v_stride, int dim_v, int64_t n_pos, float scale, float* scores, int64_t s_stride,
                            float* max, float* sum, float* out);
    // block_f16_tiled cut in two, for a thread's run of blocks: the scores
    // and softmax terms of block `score` (its max and sum) and the value
    // loop of block `mix` (its out, from the terms an earlier call left in
    // its scores), either null. A block's results are block_f16_tiled's,
    // bit for bit. Where both take 8 heads and the value rows of `mix`
    // were asked into L2 by its own score loop, the two loops run
    // interleaved, a step of each in turn, so that the value loop's FMAs
    // fill the score loop's waits on memory. Null where the level has no
    // such loop (AVX2).
    void (*tiled_pipe)(const TiledBlock* score, const TiledBlock* mix);
    // The same over a Q8_0 cache: rows of dim / 32 blocks, k_stride and
    // v_stride counted in blocks; each key and value element is its block's
    // scale times its int8, widened in registers.
    void (*block_q8)(const float* q, int n_q, const BlockQ8_0* k, int64_t k_stride, int dim, const BlockQ8_0* v,
                     int64_t v_stride, int dim_v, int64_t n_pos, float scale, float* scores, int64_t s_stride,
                     float* max, float* sum, float* out);
};

// Both tables need dim (head_dim and head_dim_v) to be a multiple of this.
// It is also the widest vector, in floats.
constexpr int kAttentionSimdWidth = 16;

extern const AttentionKernels kAttentionAvx2;
extern const AttentionKernels kAttentionAvx512;

}  // namespace ms
