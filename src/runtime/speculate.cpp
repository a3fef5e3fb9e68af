// Session::step and its drafts: speculative decoding. A pass evaluates the
// sampled token and the drafted ones after it in one forward call (each
// expert the tokens share is read once), accepts drafts while the sampler
// agrees with them, and rolls the cache back past the first it rejects.
// Several sessions' passes run as one call (run_passes: serve's slots),
// so the experts their rows share are read once for all of them.
#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "runtime/session.h"
#include "telemetry/trace.h"

namespace ms {

namespace {

double seconds_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void Session::set_draft(const DraftOptions& o) {
    if (o.mode == DraftMode::Auto) throw std::runtime_error("set_draft: resolve --draft auto first");
    if (o.mode == DraftMode::Mtp && !model_->nextn_enabled()) {
        throw std::runtime_error(file_->path() + ": --draft mtp: the session was opened without the model's NextN "
                                 "layers (SessionOptions::nextn)");
    }
    if (o.mode != DraftMode::Off && o.max < 1) throw std::runtime_error("--draft-max must be at least 1");
    draft_ = o;
    // The pass takes the sampled token and max drafts within one piece of
    // a layer (the scratch rows), which is also what a sliding-window ring
    // can roll back.
    draft_.max = std::min(o.max, state_->options.max_batch - 1);
    if (draft_.max < 1) draft_.mode = DraftMode::Off;  // -ub 1: no room for a draft
    if (draft_.mode == DraftMode::Off) return;
    pass_.reserve(size_t(draft_.max) + 1);
    rows_.resize((size_t(draft_.max) + 1) * size_t(config().n_vocab));
}

int Session::propose(int n_max, const std::function<bool(int32_t)>& on_token, bool ignore_eos, bool* done) {
    *done = false;
    pass_.clear();
    if (n_max < 1) return 0;
    const int32_t tok = sampler_.sample(logits_.data(), exclude_);
    exclude_ = -1;
    sampler_.accept(tok);
    if (!on_token(tok) || (!ignore_eos && tokenizer_.is_eog(tok)) || tokens_.size() >= size_t(n_ctx())) {
        *done = true;
        return 1;
    }
    pass_.assign(1, tok);  // capacity reserved by set_draft when drafting
    // Drafts: only as many as can be emitted in this call and fit the context.
    if (draft_.mode != DraftMode::Off) {
        int k = int(std::min<int64_t>({draft_.max, n_max - 1, n_ctx() - int64_t(tokens_.size()) - 1}));
        if (k > 0 && draft_.mode == DraftMode::Mtp && !draft_.custom) {
            // The NextN block drafts from the cache's last position and tok.
            pass_.resize(size_t(k) + 1);
            k = model_->draft_nextn(*state_, *experts_, *pool_, tok, k, pass_.data() + 1);
            pass_.resize(size_t(k) + 1);
        } else if (k > 0) {
            tokens_.push_back(tok);  // the history the drafts continue (capacity reserved)
            k = draft_.custom ? std::min(k, draft_.custom(tokens_.data(), tokens_.size(), k, &pass_))
                              : propose_ngram(tokens_.data(), tokens_.size(), k, draft_, &pass_);
            pass_.resize(size_t(k) + 1);
            tokens_.pop_back();
        }
    }
    draft_stats.passes++;
    return 1;
}

void Session::run_passes(Session* const* sessions, int n) {
    if (n < 1) return;
    Session& lead = *sessions[0];
    for (int i = 0; i < n; i++) {
        const Session& s = *sessions[i];
        if (s.model_ != lead.model_ || s.experts_ != lead.experts_ || s.pool_ != lead.pool_) {
            throw std::runtime_error("run_passes: the sessions do not share one model, expert source and pool");
        }
        if (s.pass_.empty()) throw std::logic_error("run_passes: a session has no pass to evaluate");
        s.check(s.pass_.data(), s.pass_.size());
    }
    const double t0 = seconds_now();
    const int64_t V = lead.config().n_vocab;
    const int B = lead.state_->options.max_batch;  // set_draft keeps each pass within it
    for (int i0 = 0; i0 < n;) {
        // As many sessions as their rows fit one call.
        int m = 0, rows = 0;
        bool ones = true;
        while (i0 + m < n) {
            const int r = int(sessions[i0 + m]->pass_.size());
            if (m > 0 && rows + r > B) break;
            rows += r;
            ones = ones && r == 1;
            m++;
        }
        if (lead.batch_states_.size() < size_t(m)) lead.batch_states_.resize(size_t(m));
        if (lead.batch_counts_.size() < size_t(m)) lead.batch_counts_.resize(size_t(m));
        if (lead.batch_tokens_.size() < size_t(rows)) lead.batch_tokens_.resize(size_t(rows));
        if (lead.batch_logits_.size() < size_t(rows * V)) lead.batch_logits_.resize(size_t(rows * V));
        for (int i = 0, r = 0; i < m; i++) {
            Session& s = *sessions[i0 + i];
            lead.batch_states_[size_t(i)] = s.state_.get();
            lead.batch_counts_[size_t(i)] = int(s.pass_.size());
            std::copy(s.pass_.begin(), s.pass_.end(), lead.batch_tokens_.begin() + r);
            r += int(s.pass_.size());
            // A pass with drafts may be rolled back (Gated DeltaNet's states).
            if (s.pass_.size() > 1) s.state_->checkpoint();
        }
        // A decode step of m sequences, or a pass with drafts to verify.
        Trace::Span span(active_trace(), ones ? "token" : "verify", "step", ones ? "sequences" : "tokens",
                         int64_t(ones ? m : rows));
        float* logits = lead.batch_logits_.data();
        if (m == 1) {
            lead.model_->forward(*lead.batch_states_[0], *lead.experts_, *lead.pool_, lead.batch_tokens_.data(), rows,
                                 logits, true);
        } else if (ones) {
            lead.model_->forward_batch(lead.batch_states_.data(), m, *lead.experts_, *lead.pool_,
                                       lead.batch_tokens_.data(), logits);
        } else {
            lead.model_->forward_rows(lead.batch_states_.data(), lead.batch_counts_.data(), m, *lead.experts_,
                                      *lead.pool_, lead.batch_tokens_.data(), logits);
        }
        for (int i = 0, r = 0; i < m; i++) {
            Session& s = *sessions[i0 + i];
            const int c = int(s.pass_.size());
            s.pass_pos0_ = s.tokens_.size();
            s.tokens_.insert(s.tokens_.end(), s.pass_.begin(), s.pass_.end());  // capacity reserved for n_ctx
            const float* from = logits + int64_t(r) * V;
            std::copy(from, from + int64_t(c) * V, c == 1 ? s.logits_.begin() : s.rows_.begin());
            r += c;
        }
        i0 += m;
    }
    const double dt = seconds_now() - t0;
    for (int i = 0; i < n; i++) sessions[i]->timings.decode_seconds += dt;
}

int Session::finish(const std::function<bool(int32_t)>& on_token, bool ignore_eos, bool* done) {
    *done = false;
    const int k = int(pass_.size()) - 1;
    if (k < 0) return 0;
    exclude_ = -1;
    if (k == 0) {
        if (draft_.mode != DraftMode::Off) draft_stats.tokens++;
        timings.decode_tokens++;
        pass_.clear();
        return 0;
    }
    const int64_t V = config().n_vocab;
    int emitted = 0, a = 0;
    for (; a < k; a++) {
        const int32_t d = pass_[size_t(a) + 1];
        if (!sampler_.accept_draft(rows_.data() + int64_t(a) * V, d)) break;
        sampler_.accept(d);
        emitted++;
        if (!on_token(d) || (!ignore_eos && tokenizer_.is_eog(d))) {
            *done = true;
            a++;
            break;
        }
    }
    // Keep the sampled token and the accepted drafts; logits() is the row
    // after the last of them.
    const size_t keep = pass_pos0_ + 1 + size_t(a);
    if (keep < tokens_.size()) rewind(keep);
    std::copy(rows_.data() + int64_t(a) * V, rows_.data() + int64_t(a + 1) * V, logits_.begin());
    // A rejected draft: the next token comes from the residual, p without it.
    if (a < k && !*done) exclude_ = pass_[size_t(a) + 1];
    draft_stats.drafted += k;
    draft_stats.accepted += a;
    draft_stats.tokens += 1 + a;
    timings.decode_tokens += 1 + a;
    pass_.clear();
    return emitted;
}

int Session::step(int n_max, const std::function<bool(int32_t)>& on_token, bool ignore_eos, bool* done) {
    const int given = propose(n_max, on_token, ignore_eos, done);
    if (pass_.empty()) return given;
    if (pass_.size() == 1) {  // no drafts: a plain decode step
        draft_stats.tokens++;
        const int32_t tok = pass_[0];
        pass_.clear();
        decode(tok);
        return given;
    }
    Session* self = this;
    run_passes(&self, 1);
    return given + finish(on_token, ignore_eos, done);
}

}  // namespace ms
