// The feed-forward half of a layer, one layer over a batch of tokens: either
// a dense SwiGLU FFN, or a MoE block: the router (optional bias), a Routing,
// the routed experts through ExpertSource + moe_forward, plus an optional
// shared expert whose output may be scaled by a sigmoid gate.
#pragma once
#include <cstdint>
#include <vector>

#include "model/expert_source.h"
#include "model/moe.h"
#include "ops/buffer.h"
#include "ops/tensor.h"
#include "ops/thread_pool.h"

namespace ms {

// down(silu(gate x) * up x), resident weights; with clamp > 0, DeepSeek V4's
// silu(min(gate x, clamp)) * clamp(up x, -clamp, clamp).
struct DenseFfn {
    Tensor gate, up, down;
    float clamp = 0;

    bool empty() const { return gate.empty(); }
    uint64_t weight_bytes() const { return gate.bytes() + up.bytes() + down.bytes(); }
};

// One layer's feed-forward weights. Optional tensors are empty when absent.
struct FfnLayer {
    Tensor norm;            // the pre-norm of the block's input (the caller applies it)
    DenseFfn dense;         // a layer without routed experts (expert_layer's n_expert == 0)
    Tensor router;          // ffn_gate_inp: n_expert logits
    Tensor router_bias;     // added to the logits (gpt-oss)
    Tensor selection_bias;  // exp_probs_b: chooses experts, does not weigh them
    Routing routing;
    Tensor gate_bias, up_bias, down_bias;  // per-expert bias rows (gpt-oss), F32
    DenseFfn shared;        // shared expert, run on every token
    Tensor shared_gate;     // n_embd: the shared expert's output times sigmoid(shared_gate . x)

    bool moe() const { return !router.empty(); }
};

// Scratch for the blocks below, sized once for the largest batch.
struct FfnScratch {
    void init(const std::vector<FfnLayer>& layers, const std::vector<ExpertLayer>& experts, int max_batch, int k,
              int64_t n_embd);
    uint64_t bytes() const;  // without acts

    AlignedBuffer logits;            // router output, max_batch x n_expert
    AlignedBuffer ids, weights;      // the chosen experts, max_batch x k
    AlignedBuffer next_ids, next_weights, next_union, next_votes;  // a later layer's predicted experts
    AlignedBuffer hidden_gate, hidden_up;  // dense FFN / shared expert hidden state
    AlignedBuffer shared_out, shared_gate;  // the shared expert's output and gate logit (when there is one)
    MoeScratch moe;
    // Converted activations for one linear(): the caller's buffer, shared
    // with the other blocks, of acts_per_token(layers) bytes per token.
    uint8_t* acts = nullptr;

    static size_t acts_per_token(const std::vector<FfnLayer>& layers);
};

// out (n rows of n_embd) = the dense FFN over x.
void dense_ffn(ThreadPool& pool, const DenseFfn& f, const float* x, int n, FfnScratch& s, float* out);

// The layer's per-expert bias rows (gpt-oss) for moe_forward; none where
// the layer has none.
ExpertVectors expert_biases(const FfnLayer& l);

// The router over x (n rows) chooses k experts per token: s.ids, s.weights
// (or ids / weights when given).
void route_tokens(ThreadPool& pool, const FfnLayer& l, const float* x, int n, int k, FfnScratch& s,
                  int32_t* ids = nullptr, float* weights = nullptr);

// What one ffn_block call did: the routed experts' cost, and the weights the
// resident parts (dense FFN, shared expert) read.
struct FfnCost {
    MoeCost moe;
    uint64_t dense_bytes = 0;
};

// out (n rows of n_embd) = the layer's feed-forward over x: the dense FFN,
// or the experts s.ids / s.weights chose (route_tokens first) plus the
// shared expert.
FfnCost ffn_block(ThreadPool& pool, ExpertSource& source, const ExpertLayer& experts, const FfnLayer& l,
                  const float* x, int n, int k, FfnScratch& s, float* out, const ExpertHint& next = {});

}  // namespace ms
