// The server's engine: --parallel slots, each a Session (its own KV cache and
// sampler over one shared model and expert store), fed from a bounded queue
// by one thread. Each round gives every slot still reading its prompt a
// prefill chunk, then decodes one token of every other busy slot in one
// batched forward pass (Session::decode_batch: each MoE layer reads the union
// of the sequences' experts once). A slot keeps its KV cache after a request,
// and a new request goes to the free slot whose cache shares the longest
// prefix with its prompt, so the next turn of a chat only evaluates the new
// tokens.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/gpu_decoder.h"
#include "runtime/session.h"
#include "server/request.h"
#include "telemetry/counters.h"

namespace ms {

struct Usage {
    int64_t prompt_tokens = 0;
    int64_t cached_tokens = 0;      // prompt tokens already in the slot's KV cache
    int64_t completion_tokens = 0;
};

// A generated token's log-probability under the model's distribution (the
// log-softmax of its logits, before penalties, bias, grammar and the
// sampling filters) and the most likely alternatives, best first.
struct TokenLogprob {
    int32_t token = 0;
    float logprob = 0;
    std::vector<std::pair<int32_t, float>> top;
};

// What a job produced for one of its choices since the last wait.
struct JobOutput {
    int choice = 0;
    std::string text;
    std::vector<TokenLogprob> logprobs;
    int tokens = 0;                 // generated tokens the text came from (a partial character's may come later)
    std::string finish_reason;      // "" until this choice is over
};

// One request between the HTTP thread that owns it and the engine. Its
// choices (n) share one evaluation of the prompt: once the prompt is in its
// slot's cache, free slots take copies of that cache and decode further
// choices in the same batched passes; a slot whose choice ends takes the
// next one not started, from the end of the prompt again.
class Job {
public:
    Job(GenerationRequest request, std::vector<int32_t> prompt, double timeout_s);

    const GenerationRequest request;
    const std::vector<int32_t> prompt;
    const double deadline;          // steady-clock seconds
    // Polled by the engine before each forward pass: false stops the
    // sequence (the client went away). Optional.
    std::function<bool()> client_alive;
    std::atomic<bool> cancelled{false};

    // HTTP side: waits up to timeout_s for news; appends what came, in
    // order, to *out. Returns true once the job is over (then usage and error
    // are final, and every choice's finish_reason has come out).
    bool wait(std::vector<JobOutput>* out, double timeout_s);
    Usage usage;
    std::string error;              // a failure inside the engine (e.g. a read error)
    // What the request holds of a server budget (its grammar's bytes),
    // given back when the job finishes. Set before submit.
    std::shared_ptr<void> held;

    // Engine side.
    // token: the text is a generated token's (JobOutput::tokens counts it).
    void emit(int choice, const std::string& text, const TokenLogprob* logprob = nullptr, bool token = false);
    void emit(int choice, const std::string& text, const std::vector<TokenLogprob>& logprobs);
    void end_choice(int choice, const std::string& reason);
    void finish(const Usage& u, const std::string& err = "");
    // The engine thread's bookkeeping of the choices: started, still in a
    // slot, tokens of those over, and the first failure, which ends them all.
    int choices_started = 0, choices_running = 0;
    int64_t completion_tokens = 0, cached_tokens = 0;
    std::string failure;
    // echo with logprobs: the prompt's tokens' (a null one is NaN), made
    // while the prompt is evaluated.
    std::vector<TokenLogprob> prompt_logprobs;

private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<JobOutput> pending_;
    bool done_ = false;
};

struct EngineOptions {
    int queue = 16;               // requests waiting for a slot beyond which new ones are refused
    int prefill_chunk = 512;      // prompt tokens per forward pass (others' tokens wait that long)
    // The vocabulary's trie for grammars (vocabulary_trie), made before the
    // memory plan so it counts in --mem; null: made at the first grammar.
    std::shared_ptr<const TokenTrie> trie;
};

// The token trie grammars are matched over: each token's bytes, none for
// control tokens (they stand for no text; end of generation is decided
// apart).
std::shared_ptr<const TokenTrie> vocabulary_trie(const Tokenizer& tok);

// Totals since start, for /metrics.
struct EngineStats {
    uint64_t requests_done = 0, requests_cancelled = 0, requests_failed = 0;
    uint64_t prompt_tokens = 0, cached_prompt_tokens = 0, prefilled_tokens = 0, generated_tokens = 0;
    double prefill_seconds = 0, decode_seconds = 0;
    // Speculative decoding: decode forward passes, tokens drafted and accepted.
    uint64_t decode_passes = 0, drafted_tokens = 0, accepted_tokens = 0;
    int queued = 0, busy_slots = 0, slots = 0;
    std::vector<char> slot_busy;  // per slot: generating (GET /slots)
    // The store's counters at the same moment (zero without a store).
    uint64_t hits = 0, misses = 0;
    uint64_t needed[kReadReasons] = {}, read[kReadReasons] = {};
    // The GPU's VRAM expert cache at the same moment (model/gpu_decoder.h;
    // gpu_tier false where the model is not on the GPU or VRAM holds every
    // expert).
    bool gpu_tier = false;
    GpuTierCounts gpu;
};

class Engine {
public:
    // open_slots makes the sessions, all sharing one model and expert source
    // (Session::fork). It runs on the engine's thread, which then makes every
    // forward pass: io_uring rings accept submissions from one thread only.
    // Its exceptions come out of the constructor. counters: the store's, read
    // between forward passes (may be null).
    using OpenSlots = std::function<std::vector<std::unique_ptr<Session>>()>;
    Engine(const OpenSlots& open_slots, const EngineOptions& options, const StoreCounters* counters = nullptr);
    ~Engine();

    // Queues a job; false when the queue is full (the caller answers 503).
    bool submit(const std::shared_ptr<Job>& job);
    EngineStats stats();
    const Session& session() const { return *slots_[0].session; }

private:
    struct Slot {
        std::unique_ptr<Session> session;
        std::shared_ptr<Job> job;
        size_t next = 0;             // prompt tokens evaluated so far
        size_t cached = 0;           // of which the KV cache already held
        std::unique_ptr<class ReplyText> text;
        int64_t generated = 0;
        uint64_t last_used = 0;
        int32_t token = 0;           // sampled, to be evaluated by the next batched decode
        int choice = 0;              // of the job's n
        std::vector<float> prompt_logits;  // n > 1: the prompt's logits, which start every choice
        std::unique_ptr<GrammarMatcher> matcher;  // the request's grammar, if any
        std::vector<float> masked;   // logits with the grammar's disallowed tokens at -inf
        bool echoed = false;         // the choice's text has begun with the prompt (echo)
        std::vector<float> rows;     // echo with logprobs: a prefill chunk's logits
    };
    // The next token of a slot under its grammar (if any); -1 when the
    // grammar allows nothing more and cannot end.
    int32_t sample(Slot& s, const float* logits);
    void begin_choice(Slot& s);
    // n > 1: free slots copy s's cache (the prompt) and start the job's
    // next choices, while no queued job waits for them.
    void spread_choices(Slot& s);
    // echo with logprobs: evaluates a piece of the prompt with every
    // position's logits, appending the log-probabilities of the tokens they
    // predict to the job's prompt_logprobs.
    void echo_logprobs(Slot& s, const std::vector<int32_t>& piece);
    static constexpr int kEchoRows = 8;  // prompt tokens a chunk then (rows of n_vocab floats)
    void run();
    void start(Slot& s, std::shared_ptr<Job> job);
    // A prefill chunk, or sampling the next token from the slot's logits;
    // true when that token is to be decoded (the reply goes on).
    bool step(Slot& s);
    // A token the slot generated: shown to the job; false (and *reason set)
    // when the choice ends with it.
    bool take_token(Slot& s, int32_t t, const TokenLogprob* logprob, std::string* reason);
    // One forward pass for every decoding slot: the sampled token of each,
    // and a drafting slot's drafts after it, whose accepted ones it shows.
    void decode(const std::vector<Slot*>& slots);
    void end(Slot& s, const std::string& reason, const std::string& error = "");

    std::vector<Slot> slots_;
    std::shared_ptr<const TokenTrie> trie_;  // the vocabulary's bytes, made at the first grammar
    std::vector<Slot*> decoding_;    // this round's decoding slots, and their sessions and tokens
    std::vector<Session*> batch_sessions_;
    std::vector<std::string> ending_;  // decode(): why each slot's reply ends ("": it goes on)
    EngineOptions options_;
    const StoreCounters* counters_;
    std::mutex mu_;                  // queue_, stats_
    std::condition_variable cv_;
    std::deque<std::shared_ptr<Job>> queue_;
    EngineStats stats_;
    std::mutex forward_mu_;          // held during each forward pass: the store's counters are stable outside it
    uint64_t clock_ = 0;
    bool stop_ = false;
    std::thread thread_;
};

double steady_seconds();

}  // namespace ms
