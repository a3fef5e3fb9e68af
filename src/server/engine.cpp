#include "server/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>

#include "server/reply_text.h"

namespace ms {

double steady_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Job::Job(GenerationRequest r, std::vector<int32_t> p, double timeout_s)
    : request(std::move(r)), prompt(std::move(p)), deadline(steady_seconds() + timeout_s) {}

bool Job::wait(std::string* text, double timeout_s) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, std::chrono::duration<double>(timeout_s), [&] { return done_ || !pending_.empty(); });
    *text += pending_;
    pending_.clear();
    return done_;
}

void Job::emit(const std::string& text) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        pending_ += text;
    }
    cv_.notify_all();
}

void Job::finish(const std::string& reason, const Usage& u, const std::string& err) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        finish_reason = reason;
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
    for (auto& job : queue_) job->finish("", {}, "the server is shutting down");
    queue_.clear();
}

void Engine::start(Slot& s, std::shared_ptr<Job> job) {
    Session& ss = *s.session;
    const std::vector<int32_t>& prompt = job->prompt;
    size_t keep = 0;
    while (keep < ss.tokens().size() && keep < prompt.size() && ss.tokens()[keep] == prompt[keep]) keep++;
    if (keep == prompt.size()) keep--;  // evaluate at least one token: its logits start the reply
    s.next = s.cached = keep;
    s.generated = 0;
    s.text = std::make_unique<ReplyText>(ss.tokenizer(), job->request.stop, job->request.show_control);
    try {
        // Rewinding may evaluate tokens again (sliding-window layers keep only their window).
        std::lock_guard<std::mutex> lk(forward_mu_);
        ss.rewind(keep);
        ss.sampler() = Sampler(job->request.sampling, ss.config().n_vocab);
    } catch (const std::exception& e) {
        end(s, "", e.what());
        return;
    }
    // The penalties' history: the kept prefix's tail, as if just prefilled.
    const size_t window = size_t(std::max(job->request.sampling.repeat_last_n, 0));
    for (size_t i = keep - std::min(keep, window); i < keep; i++) ss.sampler().accept(ss.tokens()[i]);
}

bool Engine::step(Slot& s) {
    Job& job = *s.job;
    Session& ss = *s.session;
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
        try {
            std::lock_guard<std::mutex> lk(forward_mu_);
            const size_t n = std::min(job.prompt.size() - s.next, size_t(std::max(options_.prefill_chunk, 1)));
            ss.prefill(std::vector<int32_t>(job.prompt.begin() + ptrdiff_t(s.next),
                                            job.prompt.begin() + ptrdiff_t(s.next + n)));
            s.next += n;
            std::lock_guard<std::mutex> st(mu_);
            stats_.prefilled_tokens += n;
            stats_.prefill_seconds += steady_seconds() - t0;
        } catch (const std::exception& e) {
            end(s, "", e.what());
        }
        return false;
    }
    std::string reason;
    const int64_t limit = job.request.max_tokens;
    auto on_token = [&](int32_t t) {
        s.generated++;
        if (ss.tokenizer().is_eog(t) && !job.request.ignore_eos) {
            reason = "stop";
            return false;
        }
        const std::string piece = s.text->push(t);
        if (!piece.empty()) job.emit(piece);
        if (s.text->stopped()) reason = "stop";
        else if (limit > 0 && s.generated >= limit) reason = "length";
        return reason.empty();
    };
    if (ss.draft().mode != DraftMode::Off) {
        // Speculation: this slot's own pass, which may give several tokens.
        const double t0 = steady_seconds();
        int generated = 0;
        const DraftStats before = ss.draft_stats;
        try {
            std::lock_guard<std::mutex> lk(forward_mu_);
            bool done = false;
            generated = ss.step(limit > 0 ? int(std::min<int64_t>(limit - s.generated, INT32_MAX)) : INT32_MAX,
                                on_token, job.request.ignore_eos, &done);
            if (reason.empty() && ss.tokens().size() >= size_t(ss.n_ctx())) reason = "length";
        } catch (const std::exception& e) {
            end(s, "", e.what());
            return false;
        }
        {
            std::lock_guard<std::mutex> st(mu_);
            stats_.generated_tokens += uint64_t(generated);
            stats_.decode_passes++;
            stats_.drafted_tokens += uint64_t(ss.draft_stats.drafted - before.drafted);
            stats_.accepted_tokens += uint64_t(ss.draft_stats.accepted - before.accepted);
            stats_.decode_seconds += steady_seconds() - t0;
        }
        if (!reason.empty()) end(s, reason);
        return false;
    }
    // Without drafts, Session::step's sampling half: sample from the
    // logits and show the token; the batched decode evaluates it.
    const int32_t t = ss.sampler().sample(ss.logits());
    ss.sampler().accept(t);
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

void Engine::decode(const std::vector<Slot*>& slots) {
    if (slots.empty()) return;
    batch_sessions_.clear();
    batch_tokens_.clear();
    for (Slot* s : slots) {
        batch_sessions_.push_back(s->session.get());
        batch_tokens_.push_back(s->token);
    }
    const double t0 = steady_seconds();
    try {
        std::lock_guard<std::mutex> lk(forward_mu_);
        Session::decode_batch(batch_sessions_.data(), batch_tokens_.data(), int(slots.size()));
    } catch (const std::exception& e) {
        for (Slot* s : slots) end(*s, "", e.what());
        return;
    }
    std::lock_guard<std::mutex> st(mu_);
    stats_.decode_passes++;
    stats_.decode_seconds += steady_seconds() - t0;
}

void Engine::end(Slot& s, const std::string& reason, const std::string& error) {
    Job& job = *s.job;
    if (error.empty() && s.text) {
        const std::string tail = s.text->finish();
        if (!tail.empty()) job.emit(tail);
    }
    Usage u;
    u.prompt_tokens = int64_t(job.prompt.size());
    u.cached_tokens = int64_t(s.cached);
    u.completion_tokens = s.generated;
    {
        // Counted free before the client hears the end, so its next request finds room.
        std::lock_guard<std::mutex> lk(mu_);
        stats_.busy_slots--;
        stats_.slot_busy[size_t(&s - slots_.data())] = 0;
        if (error == "cancelled") stats_.requests_cancelled++;
        else if (!error.empty()) stats_.requests_failed++;
        else stats_.requests_done++;
        stats_.prompt_tokens += uint64_t(u.prompt_tokens);
        stats_.cached_prompt_tokens += uint64_t(u.cached_tokens);
    }
    job.finish(reason, u, error);
    s.job.reset();
    s.text.reset();
    s.last_used = ++clock_;
}

}  // namespace ms
