// Multi-head latent attention (DeepSeek V2/V3) in its split, absorbed form:
// the KV cache holds one compressed row per token, [c | k_pe] (kv_lora +
// rope values shared by all heads), and each head's query is moved into that
// latent space (attn_k_b) so attention runs as one-KV-head attention over
// the compressed rows; the heads' latent outputs go back through attn_v_b.
#pragma once
#include <cstdint>
#include <vector>

#include "ops/attention.h"
#include "ops/buffer.h"
#include "ops/rope.h"
#include "ops/tensor.h"
#include "ops/thread_pool.h"

namespace ms {

// Sizes from the metadata (attention.*_lora_rank, *_length_mla,
// rope.dimension_count).
struct MlaShape {
    int n_head = 0;
    int q_lora = 0;   // 0: q straight from attn_q
    int kv_lora = 0;  // the compressed row's latent part, also what V reads
    int nope = 0;     // per-head q.k dims without rope
    int rope = 0;     // per-head dims with rope (k_pe is shared by the heads)
    int v = 0;        // per-head value size after attn_v_b
    float scale = 1.0f;  // applied to q.k (YaRN's magnitude correction included)

    int row() const { return kv_lora + rope; }  // the cache row (K; V is its first kv_lora)
    int q_head() const { return nope + rope; }
};

// One layer's weights. Either wq, or wq_a -> q_a_norm -> wq_b.
struct MlaLayer {
    Tensor wq, wq_a, q_a_norm, wq_b;
    Tensor wkv_a, kv_a_norm;  // attn_kv_a_mqa (kv_lora + rope rows), the norm of its kv_lora part
    Tensor wk_b, wv_b;        // n_head stacked matrices each: kv_lora rows of nope, v rows of kv_lora
    Tensor wo;

    uint64_t weight_bytes() const;
};

// The cache of a layer: k is the compressed rows, V a view of their first
// kv_lora values (no V bytes of its own).
KvLayer mla_kv_layer(const MlaShape& s, GgmlType type, uint8_t* rows);

// Bytes per token the compressed cache takes, and what full per-head K and V
// of the same sizes would take (n_head x (nope + rope + v)).
int64_t mla_row_bytes(const MlaShape& s, GgmlType type);
int64_t mla_full_kv_bytes(const MlaShape& s, GgmlType type);

// Scratch for mla_attention_block, sized once for the largest batch.
struct MlaScratch {
    AlignedBuffer qa, q, kv, q_lat, head_in, head_out, lat, o;
    AlignedBuffer scores;  // attention()'s per-thread scratch
    uint8_t* acts = nullptr;  // converted activations: the caller's, acts_per_token bytes a token

    // top_k > 0: attention reads the selected positions only (mla_attend).
    void init(const MlaShape& s, int max_batch, int64_t n_ctx, int n_threads, int top_k = 0);
    uint64_t bytes() const;  // without acts
    static size_t acts_per_token(const std::vector<MlaLayer>& layers);
};

// The positions each query reads under sparse attention: query t reads the
// n_sel[t] positions sel[t * top_k ..], ascending (model/dsa_indexer.h).
struct MlaSelection {
    const int32_t* sel = nullptr;
    const int32_t* n_sel = nullptr;
    int top_k = 0;
};

// The block's two halves, for callers that act between them (the sparse
// indexer reads the normed compressed q, scratch.qa): mla_project appends
// the tokens' compressed rows to kv and leaves their latent queries in
// scratch; mla_attend attends (over every earlier position, or over `sel`'s
// when given) and writes out.
void mla_project(ThreadPool& pool, const MlaShape& s, float rms_eps, const Rope& rope, const MlaLayer& l,
                 const float* x, int n, int64_t pos0, const float* cos_sin, const KvLayer& kv, MlaScratch& scratch);
void mla_attend(ThreadPool& pool, const MlaShape& s, const MlaLayer& l, int n, int64_t pos0, const KvLayer& kv,
                int64_t n_ctx, const MlaSelection* sel, MlaScratch& scratch, float* out);

// out (n rows of n_embd) = the layer's attention over x (n normed rows) at
// positions pos0.., appending the tokens' compressed rows to kv.
void mla_attention_block(ThreadPool& pool, const MlaShape& s, float rms_eps, const Rope& rope, const MlaLayer& l,
                         const float* x, int n, int64_t pos0, const float* cos_sin, const KvLayer& kv, int64_t n_ctx,
                         MlaScratch& scratch, float* out);

}  // namespace ms
