// The forward pass's only way to routed-expert weights: it names experts by
// (layer, expert id) and an ExpertSource makes their bytes available, from
// RAM (RamExperts) or streamed from the drive by the store.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "quant/types.h"

namespace ms {

class RoutingTrace;

// One matrix (gate, up or down) of every routed expert of a layer, as stored
// in the GGUF. Expert e's rows are the bytes [offset(e), offset(e) + bytes)
// of split `split`. A fused gate_up tensor appears as two matrices naming the
// same tensor: gate at the start of each expert's slice, up right after it.
struct ExpertMatrix {
    std::string tensor;              // "blk.3.ffn_gate_exps.weight"
    GgmlType type = GgmlType::F32;
    int64_t cols = 0;                // row length: the input width
    int64_t rows = 0;                // output width
    int split = 0;                   // which file of a split set
    uint64_t base = 0;               // absolute file offset of expert 0's rows
    uint64_t stride = 0;             // bytes from one expert to the next in the file
    size_t bytes = 0;                // bytes of one expert's matrix (rows x row bytes)

    uint64_t offset(int expert) const { return base + uint64_t(expert) * stride; }
};

// How an expert joins its gate and up outputs: silu(gate) * up (SwiGLU),
// gelu(gate) * up (GeGLU, Gemma), or gpt-oss's clamped form: with
// g = min(gate, 7), u = clamp(up, -7, 7), g * sigmoid(1.702 g) * (u + 1);
// or DeepSeek V4's: silu(min(gate, c)) * clamp(up, -c, c), c = ExpertLayer::clamp.
enum class GatedActivation { SwiGlu, GeGlu, SwiGluOai, SwiGluClamp };

// The routed experts of one layer; n_expert == 0 for a layer without routed
// experts (a dense FFN layer).
struct ExpertLayer {
    int layer = 0;
    int n_expert = 0;
    ExpertMatrix gate, up, down;
    GatedActivation act = GatedActivation::SwiGlu;
    float clamp = 0;  // SwiGluClamp's limit
    // The router's weight scales the expert's input instead of its output
    // (Llama 4): expert(w x) rather than w expert(x).
    bool weight_input = false;
    // Not experts but rows of a table each token reads one of (gemma4's
    // per-layer embeddings): "expert" e is row e, its bytes in gate; up and
    // down are empty. The store reads them under ReadReason::Rows.
    bool rows = false;

    size_t expert_bytes() const { return gate.bytes + up.bytes + down.bytes; }
};

// One expert's matrices in memory, laid out exactly as in the file (rows of
// the ExpertMatrix's type), so kernels use them as they would the tensor.
struct ExpertView {
    const uint8_t* gate = nullptr;
    const uint8_t* up = nullptr;
    const uint8_t* down = nullptr;
};

// Protocol, driven from one thread (the forward pass), per layer:
//   start_step(n_tokens)                      once per forward call
//   acquire(layer, ids, n)                    n <= capacity(), ids distinct
//   while ((i = next_ready(layer, &v)) >= 0)  compute expert ids[i] from v
//   release(layer)
// Several layers may be acquired at once (reading layer l+1 while computing
// layer l) as long as their total stays within capacity(). Because experts
// come back in arrival order, callers write each expert's result to the slot
// of its index and combine slots in index order, so the output is the same
// bit for bit whatever order the reads complete in.
class ExpertSource {
public:
    virtual ~ExpertSource() = default;

    // Most experts that can be held (acquired and not released) at once;
    // callers split larger sets (e.g. a prefill chunk's union) into groups.
    virtual int capacity() const = 0;

    // A forward call over n_tokens tokens starts: the routing trace (if
    // any) opens the call's tokens, then the source's begin_step.
    void start_step(int n_tokens);

    // A forward call over n_tokens tokens starts (1: decode step; more:
    // prefill chunk). For accounting only.
    virtual void begin_step(int n_tokens) { (void)n_tokens; }

    // A decode step of n_seqs sequences, one token each, in one forward
    // call (Model::forward_batch): start_step for decoding, not prefill.
    void start_decode_step(int n_seqs);
    virtual void begin_decode_step(int n_seqs) { begin_step(n_seqs); }

    // Starts making experts ids[0..n) of `layer` available and pins them
    // until release(layer). Those already in memory are ready at once; all
    // others are requested together, as one batch. rows (optional): how
    // many of the step's rows chose each (a cache counts them as uses).
    virtual void acquire(int layer, const int32_t* ids, int n, const int32_t* rows = nullptr) = 0;

    // Blocks until an acquired expert of `layer` not yet handed out is in
    // memory; returns its index i into the acquire's ids and sets *view,
    // valid until release(layer). Returns -1 once all n have been handed out.
    // Throws std::runtime_error naming layer and expert on a read error.
    virtual int next_ready(int layer, ExpertView* view) = 0;
    // next_ready without the wait: -2 when experts of `layer` are still
    // being read but none is ready now. Lets a caller batch the experts
    // already in memory without waiting for the rest.
    static constexpr int kNoneReadyYet = -2;
    virtual int next_ready_now(int layer, ExpertView* view) { return next_ready(layer, view); }

    // Unpins the layer's acquired experts; their views become invalid.
    virtual void release(int layer) = 0;

    // Hint: experts ids[0..n) of `layer` are likely wanted soon. Low
    // priority, never displaces pinned experts; free to ignore.
    virtual void prefetch(int layer, const int32_t* ids, int n) {
        (void)layer, (void)ids, (void)n;
    }

    // Whether prefetch() hints are worth their cost (predicting costs the
    // forward pass a router matvec per layer): false for sources that hold
    // every expert in memory.
    virtual bool wants_prefetch() const { return false; }

    // Whether hints known to be right are wanted (a hash-routed layer's
    // experts, read off the token ids): they cost nothing to compute and
    // are never wrong, so a source that reads ahead takes them unless told
    // not to.
    virtual bool wants_certain_prefetch() const { return false; }

    // The host memory views point into (address, bytes), so a GPU backend
    // can page-lock it once and copy experts from it by DMA; none: views
    // may point anywhere (copies then go through the driver's staging).
    virtual std::vector<std::pair<uint8_t*, size_t>> host_memory() const { return {}; }
    // Set by whoever page-locked host_memory(); the source calls it with
    // each region's address before freeing it (a stale registration would
    // otherwise outlive the memory).
    std::function<void(uint8_t*)> unpin;

    // When set, moe_forward records every token's chosen experts here
    // (run --routing-trace, bench routing).
    RoutingTrace* routing_trace = nullptr;
};

}  // namespace ms
