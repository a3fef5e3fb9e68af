// A model: its configuration, its resident weights (read into RAM, not
// mapped), the file description of its routed experts, and the forward pass
// of its architecture. Each architecture has its own file (model/qwen3moe.cpp
// ...) that wires shared blocks (model/decoder.h) or writes its own loops
// over ops/.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/expert_source.h"
#include "ops/buffer.h"
#include "ops/tensor.h"
#include "ops/thread_pool.h"
#include "telemetry/time_split.h"

namespace ms {

class GgufFile;
struct GgufTensor;

struct StateOptions {
    int64_t n_ctx = 4096;               // positions the KV cache holds
    int max_batch = 512;                // most tokens one piece of a forward call takes (scratch rows)
    int max_tokens = 0;                 // most tokens one forward call takes, for layer_major() models
                                        // (0: max_batch); each layer runs over them in max_batch pieces
    GgmlType kv_type = GgmlType::F16;   // F16, F32 or Q8_0 (not MLA, the indexer, deepseek4 or the GPU)
    int n_threads = 1;                  // size of the pool forward() runs on
};

// Everything a forward pass changes: the KV cache, the position, scratch.
class ModelState {
public:
    virtual ~ModelState() = default;
    StateOptions options;
    int64_t n_past = 0;  // positions filled; the next forward writes at n_past.
                         // Lowering it forgets the tail (chat rewinds this way).
    // Most tokens one forward call takes: options.max_tokens for a
    // layer-major model (Session sets it only for those), else max_batch.
    int max_tokens() const { return std::max(options.max_batch, options.max_tokens); }
    virtual uint64_t bytes() const = 0;  // KV cache + scratch
    // KV cache bytes one more position of context takes over all layers,
    // and what full per-head K and V would take (more where MLA caches
    // compressed rows); 0 where a family does not say.
    int64_t kv_bytes_per_token = 0, full_kv_bytes_per_token = 0;
    // The longest prefix of at most n positions that n_past can be lowered
    // to and continue from: n, unless a sliding-window ring has overwritten
    // positions the token after it needs (then less, often 0); the positions
    // in between must be evaluated again.
    virtual int64_t rewind_limit(int64_t n) const { return n; }
    // Speculative decoding: saves, at n_past, what a forward call changes
    // for good (recurrent layers' states), so that a later rewind_limit()
    // can return this position and forward() continue from it. No-op where
    // positions are all the state there is.
    virtual void checkpoint() {}
    // Makes this state continue where `other` (made by the same model with
    // the same options) stands: its cache, position and recurrent state,
    // so several sequences can share one evaluation of a prompt (serve's
    // n > 1). False where a family cannot; then this state is unchanged.
    virtual bool copy_from(const ModelState& other) { (void)other; return false; }
    // Where forward() spent its time: calls over several tokens (prefill)
    // and over one (decode), kept apart.
    TimeSplit prefill_time, decode_time;
};

class Model {
public:
    // Reads the configuration and checks every tensor the architecture needs
    // (name, shape, type) without reading weight data. Throws naming the
    // unknown architecture, the missing tensor, the wrong shape (expected vs
    // actual) or the unsupported type.
    static std::unique_ptr<Model> open(const GgufFile& file);
    // Architectures open() accepts.
    static std::vector<std::string> architectures();
    // Those of them built from a DecoderSpec (decoder_spec() answers true),
    // which the GPU forward pass (model/gpu_decoder.h) may take.
    static std::vector<std::string> decoder_architectures();

    virtual ~Model() = default;
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    // Reads the resident weights into RAM; progress(done, total) in bytes,
    // called on the calling thread. With a pool, its threads fault the fresh
    // pages in and read pieces of the file side by side: on a VM whose fresh
    // pages cost a hypervisor trap each, that is most of a cold start.
    void load_resident(const GgufFile& file, const std::function<void(uint64_t, uint64_t)>& progress = {},
                       ThreadPool* pool = nullptr);
    uint64_t resident_bytes() const { return resident_bytes_; }

    const ModelConfig& config() const { return config_; }
    // Routed experts per layer (index = layer; n_expert == 0 for dense layers).
    const std::vector<ExpertLayer>& expert_layers() const { return expert_layers_; }

    virtual std::unique_ptr<ModelState> new_state(const StateOptions& options) const = 0;

    // Evaluates tokens[0..n) at positions n_past.., causally, appending to
    // the KV cache and advancing n_past. Requires 1 <= n <= max_tokens()
    // of the state, n_past + n <= n_ctx and token ids < n_vocab (callers
    // check). Writes n rows of n_vocab logits when all_logits, else the last
    // token's row. Allocates nothing.
    virtual void forward(ModelState& state, ExpertSource& experts, ThreadPool& pool, const int32_t* tokens, int n,
                         float* logits, bool all_logits) const = 0;

    // One decode step of n sequences, each its own state (KV cache and
    // position, states[i]->n_past) made by this model, with one token each:
    // writes n rows of n_vocab logits, row i the same bits forward() would
    // give sequence i alone, and advances each n_past. The same conditions
    // as forward() per sequence. The default runs forward() on each in turn;
    // a model that batches them (model/decoder.cpp) runs one pass in which
    // each MoE layer acquires the union of the sequences' experts once.
    virtual void forward_batch(ModelState* const* states, int n, ExpertSource& experts, ThreadPool& pool,
                               const int32_t* tokens, float* logits) const;

    // Several sequences' next tokens in one call, counts[i] >= 1 of them
    // for sequence i (states[i]): tokens holds each sequence's in order,
    // sequence after sequence, and logits gets a row for every token, the
    // same bits forward(*states[i], ..., counts[i], ..., all_logits) would
    // give the sequence alone; each n_past advances by its count. Speculation
    // of several sequences: each one's sampled token and drafts verified in
    // one pass. The same conditions as forward() per sequence. The default
    // runs forward() on each in turn; a model that batches (LayerMajorModel)
    // runs one pass in which each MoE layer acquires the rows' union once.
    virtual void forward_rows(ModelState* const* states, const int* counts, int n, ExpertSource& experts,
                              ThreadPool& pool, const int32_t* tokens, float* logits) const;

    // Called once the session's expert source exists, before any forward
    // call: what a model sets up against it. The GPU model copies its
    // weights to VRAM and page-locks or fills from the source here, so that
    // the first forward call's time is the forward's own (it does this at
    // the first forward call when nothing called attach). Default: nothing.
    // pool: the threads the session's forward calls will use.
    virtual void attach(ExpertSource& experts, ThreadPool& pool) const { (void)experts, (void)pool; }

    // Whether forward() runs layer by layer over more than max_batch tokens
    // (StateOptions::max_tokens), so a long prompt reads each expert once.
    virtual bool layer_major() const { return false; }

    // Whether forward() evaluates a call's tokens one after another (the GPU
    // model's), so a speculative verify pass of K+1 tokens costs K+1 steps
    // and drafts cannot pay.
    virtual bool one_token_per_pass() const { return false; }

    // Tokens a piece of a layer takes when -ub is not given (its scratch
    // rows), for a model that `sequences` sequences will share (each keeps
    // its own rows): the CPU's pieces stay small (the rows count in --mem
    // and a piece's experts are read once either way); the GPU's passes run
    // each expert's tokens as tensor-core tiles, which fill better with more.
    virtual int default_ubatch(int sequences) const {
        (void)sequences;
        return 512;
    }

    // Routes each token to k experts instead of the file's expert_used_count
    // (Flash-MoE's speed knob: fewer experts, fewer bytes a token, other
    // logits): the router's top k, weighted as the family weights its top
    // experts. Call before new_state(). Throws naming the model when k is not
    // in [1, n_expert] or the family picks its experts another way.
    void set_experts_per_token(int k);
    // expert_used_count as the file gives it.
    int trained_experts_per_token() const { return trained_experts_per_token_; }

    // Multi-token prediction: the NextN block the file carries after its
    // layers (nextn_predict_layers). enable_nextn() declares the first
    // block's weights (resident ones, and its routed experts as one more
    // expert layer, read through the ExpertSource like any other) and gives
    // every later new_state() its KV cache; from then on forward() and
    // draft_nextn() run the block over each position once the token after
    // it is known, so its cache follows the sequence (rewinds included).
    // Call before new_state() and load_resident().
    // Throws naming the file when the model has no NextN block or its family
    // does not run one.
    virtual void enable_nextn(const GgufFile& file);
    virtual bool nextn_enabled() const { return false; }
    // Drafts up to k tokens after `token`, the token that follows the
    // state's last evaluated position: the NextN block over the main
    // layers' last hidden state and `token` gives the next token's argmax,
    // then runs again on its own output and that token (depth > 1). Writes
    // the drafts to out and returns how many (0 when the block has no hidden
    // state to start from: a rewind past the last forward call). Leaves
    // n_past as it is; the block's cache rows past it are provisional, made
    // again once the pass that checks the drafts has run.
    virtual int draft_nextn(ModelState& state, ExpertSource& experts, ThreadPool& pool, int32_t token, int k,
                            int32_t* out) const;

protected:
    explicit Model(ModelConfig config) : config_(std::move(config)), trained_experts_per_token_(config_.n_expert_used) {}

    // Whether some layer takes exactly expert_used_count experts whatever the
    // router says (DeepSeek V4's token-id tables).
    virtual bool fixed_experts_per_token() const { return false; }

    // Declares a resident tensor that must exist with exactly this shape
    // (ne[0] first) and a type the kernels can run; its data is read by
    // load_resident() into *out. 1-D tensors (norms) must be F32.
    void need(const GgufFile& file, const std::string& name, std::vector<int64_t> shape, Tensor* out);
    // The same, for a tensor a family may omit; returns false if absent.
    bool maybe(const GgufFile& file, const std::string& name, std::vector<int64_t> shape, Tensor* out);
    // Declares a resident I32 tensor (DeepSeek V4's token -> experts table)
    // that must exist with exactly this shape; read like need().
    void need_i32(const GgufFile& file, const std::string& name, std::vector<int64_t> shape, Tensor* out);
    // Checks a tensor the model carries but never reads (a NextN block's):
    // its shape and type when present; false when absent. Reads nothing.
    bool present(const GgufFile& file, const std::string& name, std::vector<int64_t> shape) const;
    // Declares layer `layer`'s routed experts: ffn_{gate,up,down}_exps of
    // n_ff x n_embd (down: n_embd x n_ff) per expert, n_expert of each; or a
    // fused ffn_gate_up_exps of 2 n_ff x n_embd (gate rows first) and down.
    void need_experts(const GgufFile& file, int layer, int n_expert, int64_t n_embd, int64_t n_ff);

    ModelConfig config_;
    std::vector<ExpertLayer> expert_layers_;
    int trained_experts_per_token_ = 0;

private:
    struct Pending {
        std::string name;  // tensor in the file
        Tensor* out;
        uint64_t offset;   // in arena_
        uint64_t bytes;
    };
    // Queues t's data (checked) to be read into the arena as *out.
    void declare(const GgufTensor& t, const std::string& name, const std::vector<int64_t>& shape, Tensor* out);
    std::vector<Pending> pending_;
    AlignedBuffer arena_;
    uint64_t resident_bytes_ = 0;
};

// Throws unless the KV cache type is F16 or F32 and the context, batch and
// thread count are at least 1: what every new_state() needs.
void check_state_options(const StateOptions& options);

// The architectures with forward passes of their own, one per file; the
// others are DecoderSpecs (model/decoder.h).
std::unique_ptr<Model> open_gemma4(const GgufFile& file, ModelConfig config);
std::unique_ptr<Model> open_deepseek4(const GgufFile& file, ModelConfig config);

}  // namespace ms
