// The routed-expert half of a MoE layer over a batch of tokens: route each
// token, group the tokens by expert, get each expert through the
// ExpertSource, run it once over all its tokens, and combine every token's
// experts in rank order, so the sum is the same bit for bit whatever order the
// experts arrive in and however many tokens are in the batch.
#pragma once
#include <cstdint>
#include <vector>

#include "model/expert_source.h"
#include "ops/buffer.h"
#include "ops/thread_pool.h"

namespace ms {

// ids/weights of token t are at [t*k, t*k + k), best first: the top k of
// softmax(logits[t]); with renorm the k weights are divided by their sum.
void route_softmax_topk(const float* logits, int n_tok, int n_expert, int k, bool renorm, int32_t* ids,
                        float* weights);

// Where a router's scores come from.
enum class Gating {
    Softmax,        // softmax over all experts (Qwen, Mixtral, OLMoE)
    Sigmoid,        // sigmoid of each logit (GLM-4.5, DeepSeek V3)
    SoftmaxChosen,  // the top k by raw logit, then a softmax over those k only (gpt-oss)
    SqrtSoftplus,   // sqrt(softplus(logit)) of each logit (DeepSeek V4)
};

// How a family turns router logits into experts and weights.
struct Routing {
    Gating gating = Gating::Softmax;
    bool renorm = false;  // the k weights divided by their sum
    float scale = 1.0f;   // then multiplied by this
    // Group-limited choice (DeepSeek V3): the experts in n_group equal groups,
    // only the n_group_used groups with the best sums of their two best
    // (biased) scores are chosen from. 0: no groups.
    int n_group = 0, n_group_used = 0;
};

// Most groups a Routing may have.
constexpr int kMaxExpertGroups = 64;

// route_softmax_topk generalized: the top k by score (plus selection_bias,
// n_expert values or null, which chooses but does not weigh: Sigmoid gating
// only), weights as `r` says. logits (n_tok rows of n_expert) is
// overwritten with the scores.
void route_experts(const Routing& r, float* logits, const float* selection_bias, int n_tok, int n_expert, int k,
                   int32_t* ids, float* weights);

// The weights `r` gives experts already chosen (ids: n_tok x k; DeepSeek
// V4's hash-routed layers take them from the token id) from their scores
// (Sigmoid or SqrtSoftplus gating of logits, which is overwritten).
void weigh_chosen_experts(const Routing& r, float* logits, int n_tok, int n_expert, int k, const int32_t* ids,
                          float* weights);

// Experts predicted for a later layer, hinted to the source right after this
// layer's experts are acquired (pinned), so the hint's reads queue behind
// this layer's misses and cannot evict the experts this layer needs.
struct ExpertHint {
    int layer = -1;
    const int32_t* ids = nullptr;
    int n = 0;
};

// The hint for `layer` from its router's top-k choices for each of n_tok
// tokens (ids: n_tok x k, as route_softmax_topk writes them): one token's k
// choices; for a prefill chunk, the experts at least three of its tokens
// pick, most picked first. Experts one or two tokens pick are the likeliest
// wrong guesses, and wrong guesses are bytes read for nothing (prefill must
// stay near one read per needed expert; two votes still read 3-6 % extra on
// small chunks). votes and hint hold n_expert ints; the hint points into them.
ExpertHint expert_hint(int layer, const int32_t* ids, int n_tok, int k, int n_expert, int32_t* votes,
                       int32_t* hint);

// Per-expert vectors some families keep beside the streamed matrices
// (resident, n_expert rows each; null: none).
struct ExpertVectors {
    const float* gate_bias = nullptr;  // n_ff per expert, added to gate x (gpt-oss)
    const float* up_bias = nullptr;    // n_ff per expert, added to up x
    const float* down_bias = nullptr;  // n_embd per expert, added to the output
    const float* scale = nullptr;      // one per expert: the output times it, before down_bias (Gemma 4)
};

// Work of the same layer that needs none of its experts (a shared expert,
// Gemma 4's MLP): moe_forward runs it once the first reads are issued, so it
// computes while they land instead of before they start.
struct WhileReading {
    void (*fn)(void* ctx) = nullptr;
    void* ctx = nullptr;
};

// What one moe_forward call cost: time blocked waiting for expert reads and
// the expert weight bytes its kernels went through.
struct MoeCost {
    double io_wait_s = 0;
    uint64_t expert_bytes = 0;
};

// A batch's (token, rank) entries t * k + r grouped by the expert each
// chose, tokens ascending within an expert: the experts used, ascending,
// and each one's entries. The CPU's moe_forward and the GPU's prefill pass
// both go expert by expert through it. Sized once for the largest batch.
struct ExpertGroups {
    std::vector<int32_t> count;    // entries per expert
    std::vector<int32_t> first;    // where each expert's entries start
    std::vector<int32_t> entries;  // t * k + r, grouped by expert, tokens ascending
    std::vector<int32_t> used;     // the experts used by the batch, ascending: n_used of them
    std::vector<int32_t> used_rows;  // entries of each of used (count, in used's order)
    int n_used = 0;

    void resize(int n_expert, size_t max_entries);
    // Groups ids[0 .. n), n <= max_entries, each id < n_expert.
    void group(const int32_t* ids, int n);
    uint64_t bytes() const { return 4 * (count.size() + first.size() + entries.size() + used.size() + used_rows.size()); }
};

// Scratch for moe_forward, sized once for the largest batch.
class MoeScratch {
public:
    // layers: the model's expert layers (their types decide activation sizes).
    void init(const std::vector<ExpertLayer>& layers, int max_batch, int k);
    uint64_t bytes() const;

private:
    friend MoeCost moe_forward(ThreadPool&, ExpertSource&, const ExpertLayer&, const float*, int, const int32_t*,
                               const float*, int, MoeScratch&, float*, const ExpertHint&, const ExpertVectors&,
                               const WhileReading&);
    int max_batch_ = 0, k_ = 0;
    // Rows of the experts computed together (each expert's tokens, experts
    // side by side): at least one expert's and at least k, so a decode
    // step's k experts run as one batch.
    int batch_rows_ = 0;
    AlignedBuffer acts_gate_, acts_up_;  // every token's input, converted for gate / up
    AlignedBuffer scaled_;               // weight_input layers: the batch's weighted input rows
    AlignedBuffer rows_gate_, rows_up_;  // the converted rows of the batch's experts' tokens
    AlignedBuffer gate_, up_;            // the batch's gate / up outputs, then their hidden state
    AlignedBuffer acts_down_;            // the hidden state converted for down
    AlignedBuffer down_;                 // the batch's outputs
    AlignedBuffer slots_;                // output of token t's rank-r expert at (t*k + r)
    ExpertGroups groups_;                // the batch's entries by expert
};

// out[t] = sum over r in rank order of weights[t*k+r] * expert ids[t*k+r]
// applied to x[t] (down(act(gate x, up x)), layer.act), with the expert's
// `vectors` applied; for a layer.weight_input layer, the sum of expert
// ids[t*k+r] applied to weights[t*k+r] * x[t]. x and out: n_tok rows of n_embd floats. Each wait for a
// read longer than a few microseconds also goes to the active trace as an
// "io_wait" span. while_reading runs once, after the first acquire (its time
// is in neither io_wait_s nor anything else of the cost).
MoeCost moe_forward(ThreadPool& pool, ExpertSource& source, const ExpertLayer& layer, const float* x, int n_tok,
                    const int32_t* ids, const float* weights, int k, MoeScratch& s, float* out,
                    const ExpertHint& next = {}, const ExpertVectors& vectors = {},
                    const WhileReading& while_reading = {});

}  // namespace ms
