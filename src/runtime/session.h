// A session: one model with its tokenizer, expert source, KV cache, thread
// pool and sampler, and the tokens its cache holds. Prefill in batches,
// single-token decode (allocation-free), rewind for chat, generation that
// stops at end-of-generation tokens, and prefill/decode timings.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/gpu_decoder.h"
#include "model/model.h"
#include "runtime/draft.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace ms {

struct SessionOptions {
    std::string model_path;
    int64_t n_ctx = 4096;              // 0: the model's training context
    int n_batch = 4096;                // most prompt tokens per forward call, evaluated layer by layer
    int n_ubatch = 0;                  // most tokens per piece of a layer (scratch rows); 0: Model::default_ubatch
    // Sequences that will share the model (serve's slots, run --parallel),
    // each keeping its own pass rows: what -ub 0's default is chosen for.
    int n_sequences = 1;
    GgmlType kv_type = GgmlType::F16;  // F16, F32 or Q8_0
    int n_threads = 0;                 // 0: one per CPU
    std::string gpu = "off";           // "auto": the CUDA forward pass where it covers the model (model/gpu_decoder.h)
    GpuOptions gpu_options;            // --gpu-mem and the other --gpu-* flags (model/gpu_decoder.h)
    int experts_per_token = 0;         // 0: the model's expert_used_count (Model::set_experts_per_token)
    bool nextn = false;                // load and run the model's NextN block (Model::enable_nextn): --draft mtp
    SamplerParams sampling;
};

// Makes the expert source once resident weights are loaded. fixed_bytes is
// what the session holds besides experts (resident + KV + scratch), for a
// memory budget. The default reads every expert into RAM (RamExperts).
using ExpertSourceFactory =
    std::function<std::unique_ptr<ExpertSource>(const GgufFile& file, const Model& model, uint64_t fixed_bytes)>;

struct Timings {
    int64_t prefill_tokens = 0, decode_tokens = 0;
    int64_t prompt_splits = 0;  // prompts longer than one forward call takes (each split reads its experts again)
    double prefill_seconds = 0, decode_seconds = 0;
    double prefill_tps() const { return prefill_seconds > 0 ? double(prefill_tokens) / prefill_seconds : 0; }
    double decode_tps() const { return decode_seconds > 0 ? double(decode_tokens) / decode_seconds : 0; }
};

class Session {
public:
    // Opens the model, reads its resident weights and tokenizer, makes the
    // expert source and the KV cache. progress(what, done, total) reports
    // loading in bytes.
    static std::unique_ptr<Session> open(
        const SessionOptions& options, const ExpertSourceFactory& experts = {},
        const std::function<void(const char* what, uint64_t done, uint64_t total)>& progress = {});

    // A new session over this one's file, model, tokenizer, expert source
    // and thread pool, with its own KV cache (of the same size), sampler and
    // tokens: serve's slots. Sessions that share these must not run forward
    // passes at the same time; the shared parts live as long as any of them.
    std::unique_ptr<Session> fork(const SamplerParams& sampling) const;

    const Model& model() const { return *model_; }
    const ModelConfig& config() const { return model_->config(); }
    const Tokenizer& tokenizer() const { return tokenizer_; }
    const GgufFile& file() const { return *file_; }
    ExpertSource& experts() { return *experts_; }
    // Where the forward pass runs: "GPU: <device>" or "CPU" with the reason
    // a requested GPU was not used.
    const std::string& backend() const { return backend_; }
    Sampler& sampler() { return sampler_; }
    int64_t n_ctx() const { return state_->options.n_ctx; }
    int n_threads() const { return pool_->size(); }
    int ubatch() const { return state_->options.max_batch; }  // tokens a piece of a layer takes
    GgmlType kv_type() const { return state_->options.kv_type; }
    uint64_t state_bytes() const { return state_->bytes(); }
    // KV cache bytes per token of context, and what full K/V would take
    // (ModelState; 0 where the model does not say).
    int64_t kv_bytes_per_token() const { return state_->kv_bytes_per_token; }
    int64_t full_kv_bytes_per_token() const { return state_->full_kv_bytes_per_token; }

    // Text to tokens the way the model's own tokenizer does it (special
    // tokens parsed, BOS added when the model's metadata says so).
    std::vector<int32_t> tokenize(const std::string& text, bool add_bos = true) const;

    // Tokens in the KV cache, in order.
    const std::vector<int32_t>& tokens() const { return tokens_; }
    // Appends tokens to the context and evaluates them in batches; logits()
    // is then the last one's row, and the sampler's repeat-penalty history
    // has seen them. Throws when the context would overflow or an id is
    // outside the vocabulary.
    void prefill(const std::vector<int32_t>& tokens);
    // The same, writing every position's logits to out (tokens x n_vocab).
    void prefill_all(const std::vector<int32_t>& tokens, float* out);
    // Appends one token (not shown to the sampler); allocates nothing.
    void decode(int32_t token);
    // decode() of tokens[i] on sessions[i] for each i < n, as one forward
    // call per max_batch sessions (Model::forward_batch: each MoE layer reads
    // the union of their experts once); every logits() has the same bits
    // decode() alone would give. The sessions must be forks of one another
    // (one model, expert source and pool). Each one's decode timings get the
    // whole call. Allocates only the first time sessions[0] batches n.
    static void decode_batch(Session* const* sessions, const int32_t* tokens, int n);
    // Logits after the last evaluated token (n_vocab floats).
    const float* logits() const { return logits_.data(); }
    // Keeps the first n tokens of the context, forgets the rest (evaluating
    // again those a sliding-window cache no longer holds the window of).
    void rewind(size_t n);
    // Makes this session's context a copy of `from`'s (cache, tokens,
    // logits), from a fork of one another: serve's n > 1 choices share one
    // evaluation of the prompt. False where the model's state cannot be
    // copied (this session is then unchanged).
    bool copy_context(const Session& from);
    // Makes the cache hold exactly `context` (e.g. a re-rendered chat),
    // evaluating only the tokens after its longest common prefix with what
    // the cache holds, and at least one so logits() is fresh. Returns how many
    // tokens were evaluated.
    size_t prefill_context(const std::vector<int32_t>& context);

    // Samples up to n_max tokens after the current context, calling
    // on_token(id) for each (eog tokens included, before stopping). Stops at
    // an end-of-generation token (unless ignore_eos: benchmarks that need a
    // fixed length), at n_max, when the context is full, when on_token
    // returns false or when *stop becomes true. Returns the number of tokens
    // generated.
    int generate(int n_max, const std::function<bool(int32_t)>& on_token, const std::atomic<bool>* stop = nullptr,
                 bool ignore_eos = false);
    // One forward pass of generate(): samples a token, calls on_token for
    // it, and evaluates it; with drafts (set_draft) the same pass checks up
    // to min(draft max, n_max - 1) drafted tokens after it, calls on_token
    // for each one accepted, and rolls the cache back past the first one
    // rejected. Returns the tokens given to on_token; *done says generation
    // must stop (on_token returned false, an end-of-generation token, or the
    // context is full). Greedy output is the same token for token as
    // without drafts; sampled output has the same distribution.
    int step(int n_max, const std::function<bool(int32_t)>& on_token, bool ignore_eos, bool* done);
    // step() in three parts, so that the passes of several sessions run as
    // one forward call (serve --parallel with drafts): propose() samples the
    // token, calls on_token for it and drafts after it (returns the tokens
    // given to on_token: 0 when n_max < 1, else 1; has_pass() then says
    // whether there is a pass to evaluate); run_passes() evaluates the
    // passes of sessions[0..n) (forks of one another), each sequence's
    // rows in one call per max_batch rows (Model::forward_rows), each row
    // the bits step() alone would give; finish() accepts the drafts the
    // sampler agrees with as step() does and returns the tokens it gave to
    // on_token.
    int propose(int n_max, const std::function<bool(int32_t)>& on_token, bool ignore_eos, bool* done);
    bool has_pass() const { return !pass_.empty(); }
    // A pass of one token sampled elsewhere (serve's grammar-aware
    // sampling), for run_passes: evaluated as decode() would.
    void queue_token(int32_t token) { pass_.assign(1, token); }
    static void run_passes(Session* const* sessions, int n);
    int finish(const std::function<bool(int32_t)>& on_token, bool ignore_eos, bool* done);
    // Turns speculative decoding on (mode Ngram, Mtp, Forced) or off. Auto
    // must be resolved by the caller. Throws when the mode cannot run here.
    void set_draft(const DraftOptions& options);
    const DraftOptions& draft() const { return draft_; }
    DraftStats draft_stats;

    // n prompt tokens drawn at random from the vocabulary (no control
    // tokens), after BOS when the model adds one: llama-bench's synthetic
    // prompt, reproducible from seed.
    std::vector<int32_t> random_tokens(int n, uint64_t seed) const;

    // Where the forward pass spent its time, prefill and decode apart.
    const TimeSplit& prefill_time() const { return state_->prefill_time; }
    const TimeSplit& decode_time() const { return state_->decode_time; }

    Timings timings;

private:
    Session(GgufFile file, const SessionOptions& options);
    Session(const Session& base, const SamplerParams& sampling);
    void check(const int32_t* tokens, size_t n) const;

    std::string backend_ = "CPU";  // before model_: open_model sets it
    std::shared_ptr<const GgufFile> file_;
    std::shared_ptr<Model> model_;
    Tokenizer tokenizer_;  // copies share one immutable table
    std::shared_ptr<ExpertSource> experts_;
    std::unique_ptr<ModelState> state_;
    std::shared_ptr<ThreadPool> pool_;
    Sampler sampler_;
    std::vector<int32_t> tokens_;
    std::vector<float> logits_;
    // Speculation: a pass's tokens (the sampled one, then the drafts), the
    // logits of each, and the draft rejected at the last position, whose
    // probability the next sample leaves out (-1: none).
    DraftOptions draft_;
    std::vector<int32_t> pass_;  // empty: no pass waiting for run_passes()
    size_t pass_pos0_ = 0;       // tokens_ before the pass (run_passes)
    std::vector<float> rows_;
    int32_t exclude_ = -1;
    // run_passes' and decode_batch's rows, when this session leads a batch.
    std::vector<ModelState*> batch_states_;
    std::vector<int> batch_counts_;
    std::vector<int32_t> batch_tokens_;
    std::vector<float> batch_logits_;
};

// "f16" / "f32" -> the KV cache type; throws on anything else.
GgmlType parse_kv_type(const std::string& s);

}  // namespace ms
