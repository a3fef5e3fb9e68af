#include "runtime/session.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <stdexcept>
#include <thread>

#include "gpu/gpu.h"
#include "model/gpu_decoder.h"
#include "model/ram_experts.h"
#include "telemetry/trace.h"

namespace ms {

namespace {

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int thread_count(int requested) {
    if (requested > 0) return requested;
    const int n = int(std::thread::hardware_concurrency());
    return n > 0 ? n : 1;
}

// The GPU forward pass when asked for and it covers the model, else the CPU's.
std::unique_ptr<Model> open_model(const GgufFile& file, const SessionOptions& o, std::string* backend) {
    if (o.gpu == "off") return Model::open(file);
    if (o.gpu != "auto") throw std::runtime_error("--gpu must be auto or off, not '" + o.gpu + "'");
    std::string why;
    std::unique_ptr<Model> m = open_gpu_model(file, o.gpu_options, &why);
    if (m) {
        *backend = "GPU: " + gpu::describe();
        return m;
    }
    *backend = "CPU (" + why + ")";  // "CPU (no NVIDIA driver found)"
    if (!o.gpu_options.routing_profile.empty()) {
        fprintf(stderr, "note: --routing-profile %s is for the GPU's VRAM tier: not read or written on the CPU\n",
                o.gpu_options.routing_profile.c_str());
    }
    return Model::open(file);
}

}  // namespace

GgmlType parse_kv_type(const std::string& s) {
    if (s == "f16" || s == "F16") return GgmlType::F16;
    if (s == "f32" || s == "F32") return GgmlType::F32;
    if (s == "q8_0" || s == "Q8_0") return GgmlType::Q8_0;
    throw std::runtime_error("--kv-type must be f16, f32 or q8_0, not '" + s + "'");
}

Session::Session(GgufFile file, const SessionOptions& o)
    : file_(std::make_shared<const GgufFile>(std::move(file))),
      model_(open_model(*file_, o, &backend_)),
      tokenizer_(Tokenizer::from_gguf(*file_)),
      pool_(std::make_shared<ThreadPool>(thread_count(o.n_threads))),
      sampler_(o.sampling, model_->config().n_vocab) {}

Session::Session(const Session& base, const SamplerParams& sampling)
    : file_(base.file_),
      model_(base.model_),
      tokenizer_(base.tokenizer_),
      experts_(base.experts_),
      state_(base.model_->new_state(base.state_->options)),
      pool_(base.pool_),
      sampler_(sampling, base.config().n_vocab) {
    backend_ = base.backend_;
    tokens_.reserve(size_t(state_->options.n_ctx));
    logits_.resize(size_t(config().n_vocab));
}

std::unique_ptr<Session> Session::fork(const SamplerParams& sampling) const {
    std::unique_ptr<Session> s(new Session(*this, sampling));
    s->set_draft(draft_);
    return s;
}

std::unique_ptr<Session> Session::open(const SessionOptions& o, const ExpertSourceFactory& make_experts,
                                       const std::function<void(const char*, uint64_t, uint64_t)>& progress) {
    if (o.n_batch < 1 || o.n_ubatch < 0) throw std::runtime_error("-b must be at least 1 and -ub at least 0");
    std::unique_ptr<Session> s(new Session(GgufFile::open(o.model_path), o));
    if (o.experts_per_token > 0) s->model_->set_experts_per_token(o.experts_per_token);
    if (o.nextn) s->model_->enable_nextn(*s->file_);
    const ModelConfig& c = s->model_->config();
    if (int64_t(s->tokenizer_.n_vocab()) > c.n_vocab) {
        throw std::runtime_error(o.model_path + ": tokenizer has " + std::to_string(s->tokenizer_.n_vocab()) +
                                 " tokens but token_embd only " + std::to_string(c.n_vocab) + " rows");
    }

    StateOptions so;
    so.n_ctx = o.n_ctx > 0 ? o.n_ctx : c.n_ctx_train;
    const int ubatch = o.n_ubatch > 0 ? o.n_ubatch : s->model_->default_ubatch(o.n_sequences);
    so.max_batch = int(std::min<int64_t>(std::min(ubatch, o.n_batch), so.n_ctx));
    // Models that run layer by layer take the whole logical batch per call;
    // the others take a piece at a time.
    if (s->model_->layer_major()) so.max_tokens = int(std::min<int64_t>(o.n_batch, so.n_ctx));
    so.kv_type = o.kv_type;
    so.n_threads = s->pool_->size();
    s->state_ = s->model_->new_state(so);

    s->model_->load_resident(
        *s->file_,
        [&](uint64_t done, uint64_t total) {
            if (progress) progress("resident weights", done, total);
        },
        s->pool_.get());
    const uint64_t fixed = s->model_->resident_bytes() + s->state_->bytes();
    if (make_experts) {
        s->experts_ = make_experts(*s->file_, *s->model_, fixed);
    } else {
        s->experts_ = std::make_unique<RamExperts>(*s->file_, s->model_->expert_layers(),
                                                   [&](uint64_t done, uint64_t total) {
                                                       if (progress) progress("experts", done, total);
                                                   });
    }
    s->model_->attach(*s->experts_, *s->pool_);
    s->tokens_.reserve(size_t(so.n_ctx));
    s->logits_.resize(size_t(c.n_vocab));
    return s;
}

std::vector<int32_t> Session::tokenize(const std::string& text, bool add_bos) const {
    return tokenizer_.encode(text, add_bos, true);
}

void Session::check(const int32_t* tokens, size_t n) const {
    if (tokens_.size() + n > size_t(n_ctx())) {
        throw std::runtime_error("context full: " + std::to_string(tokens_.size()) + " + " + std::to_string(n) +
                                 " tokens exceed the context of " + std::to_string(n_ctx()) + " (raise -c)");
    }
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= config().n_vocab) {
            throw std::runtime_error("token id " + std::to_string(tokens[i]) + " is outside the vocabulary of " +
                                     std::to_string(config().n_vocab));
        }
    }
}

void Session::prefill(const std::vector<int32_t>& tokens) {
    if (tokens.empty()) return;
    exclude_ = -1;
    check(tokens.data(), tokens.size());
    const double t0 = now_seconds();
    const size_t T = size_t(state_->max_tokens());
    if (tokens.size() > T) timings.prompt_splits++;
    for (size_t i = 0; i < tokens.size(); i += T) {
        const int n = int(std::min(tokens.size() - i, T));
        Trace::Span span(active_trace(), "prefill_chunk", "step", "tokens", n);
        model_->forward(*state_, *experts_, *pool_, tokens.data() + i, n, logits_.data(), false);
        tokens_.insert(tokens_.end(), tokens.begin() + ptrdiff_t(i), tokens.begin() + ptrdiff_t(i) + n);
    }
    for (int32_t t : tokens) sampler_.accept(t);
    timings.prefill_seconds += now_seconds() - t0;
    timings.prefill_tokens += int64_t(tokens.size());
}

void Session::prefill_all(const std::vector<int32_t>& tokens, float* out) {
    if (tokens.empty()) return;
    exclude_ = -1;
    check(tokens.data(), tokens.size());
    const double t0 = now_seconds();
    const int64_t V = config().n_vocab;
    const size_t T = size_t(state_->max_tokens());
    if (tokens.size() > T) timings.prompt_splits++;
    for (size_t i = 0; i < tokens.size(); i += T) {
        const int n = int(std::min(tokens.size() - i, T));
        model_->forward(*state_, *experts_, *pool_, tokens.data() + i, n, out + int64_t(i) * V, true);
        tokens_.insert(tokens_.end(), tokens.begin() + ptrdiff_t(i), tokens.begin() + ptrdiff_t(i) + n);
    }
    std::copy(out + int64_t(tokens.size() - 1) * V, out + int64_t(tokens.size()) * V, logits_.begin());
    for (int32_t t : tokens) sampler_.accept(t);
    timings.prefill_seconds += now_seconds() - t0;
    timings.prefill_tokens += int64_t(tokens.size());
}

void Session::decode(int32_t token) {
    exclude_ = -1;
    check(&token, 1);
    const double t0 = now_seconds();
    Trace::Span span(active_trace(), "token", "step", "pos", int64_t(tokens_.size()));
    model_->forward(*state_, *experts_, *pool_, &token, 1, logits_.data(), false);
    tokens_.push_back(token);  // capacity reserved for n_ctx: no allocation
    timings.decode_seconds += now_seconds() - t0;
    timings.decode_tokens++;
}

void Session::decode_batch(Session* const* sessions, const int32_t* tokens, int n) {
    for (int i = 0; i < n; i++) sessions[i]->queue_token(tokens[i]);
    run_passes(sessions, n);
    bool done = false;
    for (int i = 0; i < n; i++) sessions[i]->finish({}, false, &done);
}

void Session::rewind(size_t n) {
    exclude_ = -1;
    if (n > tokens_.size()) throw std::runtime_error("rewind past the end of the context");
    // Sliding-window layers keep only their window: going back further than
    // they still hold means evaluating the tokens after where they can resume.
    const size_t keep = size_t(state_->rewind_limit(int64_t(n)));
    const std::vector<int32_t> again(tokens_.begin() + ptrdiff_t(keep), tokens_.begin() + ptrdiff_t(n));
    tokens_.resize(keep);
    state_->n_past = int64_t(keep);
    for (size_t i = 0; i < again.size(); i += size_t(state_->max_tokens())) {
        const int m = int(std::min(again.size() - i, size_t(state_->max_tokens())));
        model_->forward(*state_, *experts_, *pool_, again.data() + i, m, logits_.data(), false);
        tokens_.insert(tokens_.end(), again.begin() + ptrdiff_t(i), again.begin() + ptrdiff_t(i) + m);
    }
}

bool Session::copy_context(const Session& from) {
    if (from.model_ != model_ || !state_->copy_from(*from.state_)) return false;
    tokens_ = from.tokens_;
    logits_ = from.logits_;
    exclude_ = -1;
    return true;
}

size_t Session::prefill_context(const std::vector<int32_t>& context) {
    if (context.empty()) throw std::runtime_error("empty context");
    size_t keep = 0;
    while (keep < tokens_.size() && keep < context.size() && tokens_[keep] == context[keep]) keep++;
    if (keep == context.size()) keep--;
    rewind(keep);
    prefill(std::vector<int32_t>(context.begin() + ptrdiff_t(keep), context.end()));
    return context.size() - keep;
}

std::vector<int32_t> Session::random_tokens(int n, uint64_t seed) const {
    if (n < 1) throw std::runtime_error("a random prompt needs at least 1 token");
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> pick(0, config().n_vocab - 1);
    std::vector<int32_t> out;
    out.reserve(size_t(n));
    if (tokenizer_.add_bos() && tokenizer_.bos() != Tokenizer::kNoToken) out.push_back(tokenizer_.bos());
    while (out.size() < size_t(n)) {
        const int32_t t = pick(rng);
        if (!tokenizer_.is_control(t) && !tokenizer_.is_eog(t)) out.push_back(t);
    }
    return out;
}

int Session::generate(int n_max, const std::function<bool(int32_t)>& on_token, const std::atomic<bool>* stop,
                      bool ignore_eos) {
    if (tokens_.empty()) throw std::runtime_error("generate needs a prompt");
    int n = 0;
    bool done = false;
    while (n < n_max && !done && !(stop && stop->load())) n += step(n_max - n, on_token, ignore_eos, &done);
    return n;
}

}  // namespace ms
