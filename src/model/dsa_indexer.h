// The lightning indexer of DeepSeek sparse attention (GLM-5, DeepSeek V3.2):
// a small multi-head scorer that picks, for each query, the top_k earlier
// positions its layer's attention reads, so attention costs top_k cache rows a
// token whatever the context. Its keys (one row a position) live in the
// sequence's state beside the compressed KV rows.
#pragma once
#include <cstdint>
#include <vector>

#include "ops/attention.h"
#include "ops/buffer.h"
#include "ops/rope.h"
#include "ops/tensor.h"
#include "ops/thread_pool.h"

namespace ms {

// Sizes from attention.indexer.{head_count,key_length,top_k}. Rope turns the
// first rope.n_rot dims of each head (the model's rope, its other end from
// the MLA heads').
struct IndexerShape {
    int n_head = 0;
    int head_dim = 0;
    int top_k = 0;  // 0: no sparse attention
};

// One layer's weights: indexer.attn_q_b (from the normed compressed q),
// indexer.attn_k and indexer.proj (from the layer's normed input), and the
// keys' LayerNorm.
struct IndexerLayer {
    Tensor wq_b, wk, proj, k_norm, k_norm_bias;

    uint64_t weight_bytes() const;
};

// A layer's key cache: one row of head_dim a position (as KvLayer, no V).
KvLayer indexer_key_layer(const IndexerShape& s, GgmlType type, uint8_t* rows);
int64_t indexer_key_bytes(const IndexerShape& s, GgmlType type);  // per position

// Scratch for indexer_select, sized once for the largest batch and context.
struct IndexerScratch {
    AlignedBuffer iq, ik, w;     // max_batch rows of queries, keys, head weights
    // Per thread: a query's score and candidate per position, and every
    // head's dot products with a chunk of positions.
    AlignedBuffer scores, order, dots;
    int64_t n_ctx = 0;
    uint8_t* acts = nullptr;      // converted activations: the caller's, acts_per_token bytes a token

    void init(const IndexerShape& s, int max_batch, int64_t n_ctx, int n_threads);
    uint64_t bytes() const;  // without acts
    static size_t acts_per_token(const std::vector<IndexerLayer>& layers);
};

// For n tokens at positions pos0.. (x: the layer's normed inputs, qr: the
// normed compressed queries, q_lora wide), appends their keys to `keys` and
// writes the positions each attends to: token t's n_sel[t] positions at
// sel[t * top_k ..], ascending; every position up to its own while there are
// at most top_k, else the top_k by score(t, s) = sum_h w_h max(0, iq_h . ik_s)
// (ties to the earlier position).
void indexer_select(ThreadPool& pool, const IndexerShape& s, const Rope& rope, const IndexerLayer& l,
                    const float* x, const float* qr, int n, int64_t pos0, const float* cos_sin, const KvLayer& keys,
                    IndexerScratch& scratch, int32_t* sel, int32_t* n_sel);

}  // namespace ms
