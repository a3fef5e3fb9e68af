#include "server/engine.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <cstdio>

#include "server/reply_text.h"

namespace ms {

namespace {

// log-softmax of logits at token t, and the top `top` tokens' (best first,
// ties by lower id).
void log_softmax_at(const float* logits, int64_t n, int32_t t, int top, TokenLogprob* out) {
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++) max = std::max(max, logits[i]);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += std::exp(double(logits[i]) - double(max));
    const double log_z = double(max) + std::log(sum);
    out->token = t;
    out->logprob = float(double(logits[t]) - log_z);
    out->top.clear();
    if (top <= 0) return;
    std::vector<std::pair<int32_t, float>>& best = out->top;
    auto better = [](const std::pair<int32_t, float>& a, const std::pair<int32_t, float>& b) {
        return a.second > b.second || (a.second == b.second && a.first < b.first);
    };
    for (int64_t i = 0; i < n; i++) {
        const std::pair<int32_t, float> c{int32_t(i), logits[i]};
        if (int(best.size()) == top && !better(c, best.back())) continue;
        best.insert(std::upper_bound(best.begin(), best.end(), c, better), c);
        if (int(best.size()) > top) best.pop_back();
    }
    for (auto& b : best) b.second = float(double(b.second) - log_z);
}

}  // namespace

std::shared_ptr<const TokenTrie> vocabulary_trie(const Tokenizer& tok) {
    std::vector<std::string> bytes(tok.n_vocab());
    for (size_t i = 0; i < bytes.size(); i++)
        if (!tok.is_control(int32_t(i))) bytes[i] = tok.piece(int32_t(i));
    return std::make_shared<const TokenTrie>(bytes);
}

double steady_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Job::Job(GenerationRequest r, std::vector<int32_t> p, double timeout_s)
    : request(std::move(r)), prompt(std::move(p)), deadline(steady_seconds() + timeout_s) {}

bool Job::wait(std::vector<JobOutput>* out, double timeout_s) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, std::chrono::duration<double>(timeout_s), [&] { return done_ || !pending_.empty(); });
    for (JobOutput& o : pending_) out->push_back(std::move(o));
    pending_.clear();
    return done_;
}

void Job::emit(int choice, const std::string& text, const TokenLogprob* logprob, bool token) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (pending_.empty() || pending_.back().choice != choice || !pending_.back().finish_reason.empty()) {
            pending_.emplace_back();
            pending_.back().choice = choice;
        }
        pending_.back().text += text;
        if (token) pending_.back().tokens++;
        if (logprob) pending_.back().logprobs.push_back(*logprob);
    }
    cv_.notify_all();
}

void Job::emit(int choice, const std::string& text, const std::vector<TokenLogprob>& logprobs) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        JobOutput o;
        o.choice = choice;
        o.text = text;
        o.logprobs = logprobs;
        pending_.push_back(std::move(o));
    }
    cv_.notify_all();
}

void Job::end_choice(int choice, const std::string& reason) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        JobOutput o;
        o.choice = choice;
        o.finish_reason = reason;
        pending_.push_back(std::move(o));
    }
    cv_.notify_all();
}

void Job::finish(const Usage& u, const std::string& err) {
    held.reset();  // before the client can hear the end and send its next request
    {
        std::lock_guard<std::mutex> lk(mu_);
        usage = u;
        error = err;
        done_ = true;
    }
    cv_.notify_all();
}

Engine::Engine(const OpenSlots& open_slots, const EngineOptions& options, const StoreCounters* counters)
    : options_(options), counters_(counters) {
    std::exception_ptr failed;
    bool ready = false;
    // The thread reads this constructor's locals only until it sets ready.
    thread_ = std::thread([&] {
        std::exception_ptr error;
        try {
            for (auto& s : open_slots()) {
                Slot slot;
                slot.session = std::move(s);
                slots_.push_back(std::move(slot));
            }
            if (slots_.empty()) throw std::runtime_error("the server needs at least one slot");
        } catch (...) {
            error = std::current_exception();
        }
        {
            std::lock_guard<std::mutex> lk(mu_);
            stats_.slots = int(slots_.size());
            stats_.slot_busy.assign(slots_.size(), 0);
            failed = error;
            ready = true;
        }
        cv_.notify_all();
        if (!error) run();
        slots_.clear();  // the store goes with the thread that used it
    });
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return ready; });
    lk.unlock();
    if (failed) {
        thread_.join();
        std::rethrow_exception(failed);
    }
}

Engine::~Engine() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

bool Engine::submit(const std::shared_ptr<Job>& job) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        // Free slots take queued jobs at once, so they count as queue room.
        const size_t room = slots_.size() + size_t(options_.queue);
        if (stop_ || queue_.size() + size_t(stats_.busy_slots) >= room) return false;
        queue_.push_back(job);
        stats_.queued = int(queue_.size());
    }
    cv_.notify_all();
    return true;
}

EngineStats Engine::stats() {
    EngineStats s;
    {
        std::lock_guard<std::mutex> lk(mu_);
        s = stats_;
    }
    if (counters_) {
        std::lock_guard<std::mutex> lk(forward_mu_);
        s.hits = counters_->total_hits();
        s.misses = counters_->total_misses();
        for (int r = 0; r < kReadReasons; r++) {
            s.needed[r] = counters_->needed[r];
            s.read[r] = counters_->read[r];
        }
    }
    {
        std::lock_guard<std::mutex> lk(forward_mu_);  // the counters move during forward passes
        s.gpu_tier = gpu_tier_counts(slots_[0].session->model(), &s.gpu);
    }
    return s;
}

void Engine::run() {
    for (;;) {
        {
            std::unique_lock<std::mutex> lk(mu_);
            if (stop_) break;
            // FIFO; the front job goes to the free slot whose cache shares
            // most of its prompt, else the least recently used one.
            while (!queue_.empty()) {
                const std::vector<int32_t>& prompt = queue_.front()->prompt;
                Slot* best = nullptr;
                size_t best_common = 0;
                for (Slot& s : slots_) {
                    if (s.job) continue;
                    const std::vector<int32_t>& t = s.session->tokens();
                    size_t common = 0;
                    while (common < t.size() && common < prompt.size() && t[common] == prompt[common]) common++;
                    if (!best || common > best_common || (common == best_common && s.last_used < best->last_used)) {
                        best = &s;
                        best_common = common;
                    }
                }
                if (!best) break;
                std::shared_ptr<Job> job = queue_.front();
                queue_.pop_front();
                best->job = job;
                stats_.busy_slots++;
                stats_.slot_busy[size_t(best - slots_.data())] = 1;
            }
            stats_.queued = int(queue_.size());
            if (stats_.busy_slots == 0) {
                cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
                continue;
            }
        }
        // A prefill chunk for each slot still reading its prompt; then one
        // token for every slot that is decoding, all in one forward pass.
        decoding_.clear();
        for (Slot& s : slots_) {
            if (!s.job) continue;
            if (!s.text) start(s, s.job);
            if (s.job && step(s)) decoding_.push_back(&s);
        }
        decode(decoding_);
    }
    for (Slot& s : slots_) {
        if (s.job) end(s, "", "the server is shutting down");
    }
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& job : queue_) job->finish({}, "the server is shutting down");
    queue_.clear();
}

void Engine::start(Slot& s, std::shared_ptr<Job> job) {
    Session& ss = *s.session;
    const std::vector<int32_t>& prompt = job->prompt;
    size_t keep = 0;
    while (keep < ss.tokens().size() && keep < prompt.size() && ss.tokens()[keep] == prompt[keep]) keep++;
    if (keep == prompt.size()) keep--;  // evaluate at least one token: its logits start the reply
    job->prompt_logprobs.clear();
    if (job->request.echo && job->request.logprobs >= 0) keep = 0;  // every prompt position's logits
    s.next = s.cached = keep;
    s.choice = 0;
    s.prompt_logits.clear();
    job->choices_started = job->choices_running = 1;
    job->cached_tokens = int64_t(keep);
    if (job->request.grammar && !trie_) trie_ = options_.trie ? options_.trie : vocabulary_trie(ss.tokenizer());
    try {
        // Rewinding may evaluate tokens again (sliding-window layers keep only their window).
        std::lock_guard<std::mutex> lk(forward_mu_);
        ss.rewind(keep);
    } catch (const std::exception& e) {
        end(s, "", e.what());
        return;
    }
    begin_choice(s);
}

// A fresh reply after the prompt: its own text, grammar state and sampler
// (choice i draws with seed + i, so the choices differ).
void Engine::begin_choice(Slot& s) {
    Session& ss = *s.session;
    const GenerationRequest& r = s.job->request;
    s.generated = 0;
    s.echoed = false;
    s.text = std::make_unique<ReplyText>(ss.tokenizer(), r.stop, r.show_control);
    if (!r.grammar) s.matcher.reset();
    else if (s.choice > 0 && s.matcher) s.matcher->restart();
    else s.matcher = std::make_unique<GrammarMatcher>(r.grammar, trie_);
    SamplerParams p = r.sampling;
    p.seed += uint64_t(s.choice);
    ss.sampler() = Sampler(p, ss.config().n_vocab);
    // The penalties' history: the prompt's tail, as if just prefilled.
    const size_t kept = std::min(ss.tokens().size(), s.job->prompt.size());
    const size_t window = size_t(std::max(r.sampling.repeat_last_n, 0));
    for (size_t i = kept - std::min(kept, window); i < kept; i++) ss.sampler().accept(ss.tokens()[i]);
}

void Engine::spread_choices(Slot& s) {
    Job& job = *s.job;
    for (Slot& h : slots_) {
        if (job.choices_started >= job.request.n) return;
        if (h.job) continue;
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (!queue_.empty()) return;
        }
        if (!h.session->copy_context(*s.session)) return;  // a family whose state cannot be copied: in turn
        h.job = s.job;
        h.next = job.prompt.size();
        h.cached = 0;
        h.prompt_logits = s.prompt_logits;
        h.choice = job.choices_started++;
        job.choices_running++;
        begin_choice(h);
        std::lock_guard<std::mutex> lk(mu_);
        stats_.busy_slots++;
        stats_.slot_busy[size_t(&h - slots_.data())] = 1;
    }
}

// Each prompt token's log-probability after the tokens before it. A BOS
// the tokenizer added is not in the prompt's text, so not shown; the first
// token shown after nothing has none (NaN: null in the reply).
void Engine::echo_logprobs(Slot& s, const std::vector<int32_t>& piece) {
    Session& ss = *s.session;
    Job& job = *s.job;
    const size_t V = size_t(ss.config().n_vocab), p0 = s.next;
    const Tokenizer& tok = ss.tokenizer();
    const size_t first = tok.add_bos() && job.prompt.size() > 1 && job.prompt[0] == tok.bos() ? 1 : 0;
    s.rows.resize(piece.size() * V);
    ss.prefill_all(piece, s.rows.data());
    if (p0 == 0 && first == 0) {
        TokenLogprob lp;
        lp.token = job.prompt[0];
        lp.logprob = NAN;
        job.prompt_logprobs.push_back(lp);
    }
    for (size_t i = 0; i < piece.size(); i++) {
        const size_t next = p0 + i + 1;  // the token row i predicts
        if (next >= job.prompt.size() || next < first) continue;
        TokenLogprob lp;
        log_softmax_at(&s.rows[i * V], int64_t(V), job.prompt[next], job.request.logprobs, &lp);
        job.prompt_logprobs.push_back(std::move(lp));
    }
}

int32_t Engine::sample(Slot& s, const float* logits) {
    Session& ss = *s.session;
    const int32_t t = ss.sampler().sample(logits);
    if (!s.matcher) return t;
    const Tokenizer& tok = ss.tokenizer();
    // Most tokens a trained model picks fit the grammar: check that one
    // first; only when it does not, mask the vocabulary and draw again
    // (the same distribution as masking first: a rejected draw is
    // followed by a draw from the allowed tokens).
    if (tok.is_eog(t) ? s.matcher->can_end() : s.matcher->allows(t)) return t;
    const std::vector<uint64_t>& mask = s.matcher->mask();
    const size_t n = size_t(ss.config().n_vocab);
    s.masked.resize(n);
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        const bool ok = i < tok.n_vocab() && ((mask[i >> 6] >> (i & 63)) & 1);
        s.masked[i] = ok ? logits[i] : -INFINITY;
        any = any || ok;
    }
    if (s.matcher->can_end()) {
        for (int32_t e : tok.eog_ids()) {
            s.masked[size_t(e)] = logits[e];
            any = true;
        }
    }
    if (!any) return -1;
    return ss.sampler().sample(s.masked.data());
}

bool Engine::step(Slot& s) {
    Job& job = *s.job;
    Session& ss = *s.session;
    if (!job.failure.empty()) {  // another choice failed
        end(s, "", job.failure);
        return false;
    }
    if (job.cancelled.load() || (job.client_alive && !job.client_alive())) {
        end(s, "", "cancelled");
        return false;
    }
    if (steady_seconds() > job.deadline) {
        fprintf(stderr, "serve: a request ran past --timeout; its reply ends here\n");
        end(s, "length");
        return false;
    }
    if (s.next < job.prompt.size()) {
        const double t0 = steady_seconds();
        const bool rows = job.request.echo && job.request.logprobs >= 0;
        try {
            std::lock_guard<std::mutex> lk(forward_mu_);
            // Every position's logits are n_vocab floats: few rows a chunk.
            const int chunk = rows ? kEchoRows : std::max(options_.prefill_chunk, 1);
            const size_t n = std::min(job.prompt.size() - s.next, size_t(chunk));
            const std::vector<int32_t> piece(job.prompt.begin() + ptrdiff_t(s.next), job.prompt.begin() + ptrdiff_t(s.next + n));
            if (rows) {
                echo_logprobs(s, piece);
            } else {
                ss.prefill(piece);
            }
            s.next += n;
            std::lock_guard<std::mutex> st(mu_);
            stats_.prefilled_tokens += n;
            stats_.prefill_seconds += steady_seconds() - t0;
        } catch (const std::exception& e) {
            end(s, "", e.what());
        }
        return false;
    }
    if (job.request.echo && !s.echoed) {
        s.echoed = true;
        job.emit(s.choice, job.request.prompt, job.prompt_logprobs);
    }
    std::string reason;
    const int64_t limit = job.request.max_tokens;
    const TokenLogprob* logprob = nullptr;
    auto on_token = [&](int32_t t) { return take_token(s, t, logprob, &reason); };
    if (ss.draft().mode != DraftMode::Off) {
        // Speculation: the session samples and drafts here; its pass (the
        // token and the drafts) runs with the other slots' in decode().
        bool done = false;
        int given = 0;
        try {
            std::lock_guard<std::mutex> lk(forward_mu_);  // MTP drafts run the model's NextN block
            given = ss.propose(limit > 0 ? int(std::min<int64_t>(limit - s.generated, INT32_MAX)) : INT32_MAX,
                               on_token, job.request.ignore_eos, &done);
        } catch (const std::exception& e) {
            end(s, "", e.what());
            return false;
        }
        {
            std::lock_guard<std::mutex> st(mu_);
            stats_.generated_tokens += uint64_t(given);
        }
        if (ss.has_pass()) return true;
        end(s, reason.empty() ? "length" : reason);  // done: a stop, the limit, or a full context
        return false;
    }
    // Without drafts, Session::step's sampling half: sample from the
    // logits and show the token; the batched decode evaluates it. Every
    // choice starts from the prompt's logits.
    if (job.request.n > 1 && s.prompt_logits.empty()) s.prompt_logits.assign(ss.logits(), ss.logits() + ss.config().n_vocab);
    if (s.generated == 0 && job.choices_started < job.request.n) spread_choices(s);
    if (s.matcher && s.matcher->must_end()) {  // the grammar is complete: nothing may follow
        end(s, "stop");
        return false;
    }
    const float* logits = s.generated == 0 && s.choice > 0 ? s.prompt_logits.data() : ss.logits();
    int32_t t = -1;
    try {
        t = sample(s, logits);
    } catch (const std::exception& e) {  // a grammar too ambiguous to follow
        end(s, "", e.what());
        return false;
    }
    if (t < 0) {  // the vocabulary has no token the grammar allows
        end(s, "stop");
        return false;
    }
    if (s.matcher && !ss.tokenizer().is_eog(t)) s.matcher->accept(t);
    ss.sampler().accept(t);
    TokenLogprob lp;
    if (job.request.logprobs >= 0 && !ss.tokenizer().is_eog(t)) {
        log_softmax_at(logits, ss.config().n_vocab, t, job.request.logprobs, &lp);
        logprob = &lp;
    }
    {
        std::lock_guard<std::mutex> st(mu_);
        stats_.generated_tokens++;
    }
    if (on_token(t) && ss.tokens().size() >= size_t(ss.n_ctx())) reason = "length";
    if (!reason.empty()) {
        end(s, reason);
        return false;
    }
    s.token = t;
    return true;
}

bool Engine::take_token(Slot& s, int32_t t, const TokenLogprob* logprob, std::string* reason) {
    Job& job = *s.job;
    Session& ss = *s.session;
    s.generated++;
    if (ss.tokenizer().is_eog(t) && !job.request.ignore_eos) {
        *reason = "stop";
        return false;
    }
    job.emit(s.choice, s.text->push(t), logprob, true);  // also when the piece is empty: the token counts
    const int64_t limit = job.request.max_tokens;
    if (s.text->stopped()) *reason = "stop";
    else if (limit > 0 && s.generated >= limit) *reason = "length";
    return reason->empty();
}

void Engine::decode(const std::vector<Slot*>& slots) {
    if (slots.empty()) return;
    batch_sessions_.clear();
    for (Slot* s : slots) {
        Session& ss = *s->session;
        if (ss.draft().mode == DraftMode::Off) ss.queue_token(s->token);  // sampled by step()
        batch_sessions_.push_back(&ss);
    }
    const double t0 = steady_seconds();
    // Each drafting slot then keeps the drafts its sampler agrees with;
    // a rollback may evaluate again (Session::rewind), so under the lock too.
    uint64_t accepted_shown = 0, drafted = 0, accepted = 0;
    ending_.assign(slots.size(), std::string());
    try {
        std::lock_guard<std::mutex> lk(forward_mu_);
        Session::run_passes(batch_sessions_.data(), int(slots.size()));
        for (size_t i = 0; i < slots.size(); i++) {
            Slot& s = *slots[i];
            Session& ss = *s.session;
            const bool drafting = ss.draft().mode != DraftMode::Off;
            const DraftStats before = ss.draft_stats;
            std::string& reason = ending_[i];
            bool done = false;
            accepted_shown += uint64_t(ss.finish([&](int32_t t) { return take_token(s, t, nullptr, &reason); },
                                                 s.job->request.ignore_eos, &done));
            if (!drafting) continue;  // step() checks the context before sampling
            drafted += uint64_t(ss.draft_stats.drafted - before.drafted);
            accepted += uint64_t(ss.draft_stats.accepted - before.accepted);
            if (reason.empty() && (done || ss.tokens().size() >= size_t(ss.n_ctx()))) reason = "length";
        }
    } catch (const std::exception& e) {
        for (Slot* s : slots) end(*s, "", e.what());
        return;
    }
    const double dt = steady_seconds() - t0;
    for (size_t i = 0; i < slots.size(); i++)
        if (!ending_[i].empty()) end(*slots[i], ending_[i]);
    std::lock_guard<std::mutex> st(mu_);
    stats_.decode_passes++;
    stats_.decode_seconds += dt;
    stats_.generated_tokens += accepted_shown;
    stats_.drafted_tokens += drafted;
    stats_.accepted_tokens += accepted;
}

void Engine::end(Slot& s, const std::string& reason, const std::string& error) {
    std::shared_ptr<Job> held = s.job;
    Job& job = *held;
    if (error.empty() && s.text) {
        const std::string tail = s.text->finish();
        if (!tail.empty()) job.emit(s.choice, tail);
    }
    if (error.empty()) job.end_choice(s.choice, reason);
    else if (job.failure.empty()) job.failure = error;
    job.completion_tokens += s.generated;
    s.generated = 0;
    if (job.failure.empty() && job.choices_started < job.request.n) {
        if (s.prompt_logits.empty()) {
            // Over before the prompt was read (--timeout): so are the choices not started.
            for (; job.choices_started < job.request.n; job.choices_started++) job.end_choice(job.choices_started, reason);
        } else {
            // The next choice: back to the end of the prompt, whose logits are kept.
            try {
                std::lock_guard<std::mutex> lk(forward_mu_);
                s.session->rewind(job.prompt.size());
                s.choice = job.choices_started++;
                begin_choice(s);
                return;
            } catch (const std::exception& e) {
                return end(s, "", e.what());
            }
        }
    }
    job.choices_running--;
    {
        // Counted free before the client hears the end, so its next request finds room.
        std::lock_guard<std::mutex> lk(mu_);
        stats_.busy_slots--;
        stats_.slot_busy[size_t(&s - slots_.data())] = 0;
    }
    s.job.reset();
    s.text.reset();
    s.matcher.reset();
    s.last_used = ++clock_;
    if (job.choices_running > 0) return;
    Usage u;
    u.prompt_tokens = int64_t(job.prompt.size());
    u.cached_tokens = job.cached_tokens;
    u.completion_tokens = job.completion_tokens;
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (job.failure == "cancelled") stats_.requests_cancelled++;
        else if (!job.failure.empty()) stats_.requests_failed++;
        else stats_.requests_done++;
        stats_.prompt_tokens += uint64_t(u.prompt_tokens);
        stats_.cached_prompt_tokens += uint64_t(u.cached_tokens);
    }
    job.finish(u, job.failure);
}

}  // namespace ms
