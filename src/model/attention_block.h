// Self-attention as the MoE families wire it, one layer over a batch of
// tokens: q/k/v projections with optional biases, optional RMS norm of q and
// k (per head, or over the whole projection), RoPE on each head's leading
// dims (or none, with optional attention-temperature tuning), grouped-query
// attention over the KV cache (optionally windowed or chunked, with optional
// per-head sinks), the output projection with an optional bias.
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "ops/attention.h"
#include "ops/buffer.h"
#include "ops/rope.h"
#include "ops/tensor.h"
#include "ops/thread_pool.h"

namespace ms {

enum class QkNorm {
    None,
    PerHead,  // each head of q and k normed on its own, weights head_dim wide (Qwen3, GLM-4.5)
    Whole,    // one norm over all of q and one over all of k, weights q_dim / kv_dim wide (OLMoE)
    PlainAfterRope,  // each head normed after RoPE, no weights (Llama 4's roped layers)
};

// Attention-temperature tuning (Llama 4's layers without RoPE): q at
// position p times 1 + scale * ln(floor((p + 1) / floor_len) + 1), exactly 1
// before position floor_len - 1. scale 0: none.
struct AttentionTemperature {
    float scale = 0.0f;
    int64_t floor_len = 0;
};

// The factor q is multiplied by at position pos, in float as the reference
// computes it.
float attention_temperature(const AttentionTemperature& t, int64_t pos);

// One layer's weights. Optional tensors are empty when a family has none.
struct AttentionLayer {
    Tensor norm;            // attn_norm, the pre-norm of the block's input (the caller applies it)
    Tensor wq, wk, wv, wo;
    Tensor bq, bk, bv, bo;  // biases of the four projections
    QkNorm qk_norm = QkNorm::None;
    Tensor q_norm, k_norm;
    Tensor sinks;           // n_head logits (gpt-oss)
    int window = 0;         // sliding window in positions; 0: full causal attention
    int64_t chunk = 0;      // > 0: chunked attention (ops/attention.h AttentionShape)
    bool rope = true;       // false: no position encoding, q tuned by `temperature` instead
    AttentionTemperature temperature;
    bool q_gate = false;    // wq emits per head [q | gate]; each head's output times sigmoid(gate) (Qwen3-Next)

    uint64_t weight_bytes() const { return wq.bytes() + wk.bytes() + wv.bytes() + wo.bytes(); }
};

// Scratch for attention_block, sized once for the largest batch.
struct AttentionScratch {
    AlignedBuffer q, k, v, att;  // projections and attention output, max_batch rows each
    AlignedBuffer qg;            // wq's rows of q and gate, when a layer has q_gate
    AlignedBuffer scores;        // attention()'s per-thread scratch
    // Converted activations for one linear(): the caller's buffer, shared
    // with the other blocks, of acts_per_token(layers) bytes per token.
    uint8_t* acts = nullptr;

    void init(const ModelConfig& c, const std::vector<AttentionLayer>& layers, int max_batch, int64_t n_ctx,
              int n_threads);
    uint64_t bytes() const;  // without acts
    static size_t acts_per_token(const std::vector<AttentionLayer>& layers);
};

// The shape attention() runs with: the config's heads, scale 1/sqrt(head_dim),
// the layer's window, sinks and chunk.
AttentionShape attention_shape(const ModelConfig& c, const AttentionLayer& l);

// out (n rows of n_embd) = the layer's attention over x (n rows of the
// normed residual) at positions pos0..pos0+n-1, whose K and V it appends to
// kv. cos_sin holds each token's rope angles (rope.n_rot floats apart).
void attention_block(ThreadPool& pool, const ModelConfig& c, const Rope& rope, const AttentionLayer& l,
                     const float* x, int n, int64_t pos0, const float* cos_sin, const KvLayer& kv, int64_t n_ctx,
                     AttentionScratch& s, float* out);

}  // namespace ms
