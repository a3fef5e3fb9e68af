// Session::step and its drafts: speculative decoding. A pass evaluates the
// sampled token and the drafted ones after it in one forward call (each
// expert the tokens share is read once), accepts drafts while the sampler
// agrees with them, and rolls the cache back past the first it rejects.
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

int Session::step(int n_max, const std::function<bool(int32_t)>& on_token, bool ignore_eos, bool* done) {
    *done = false;
    if (n_max < 1) return 0;
    const int32_t tok = sampler_.sample(logits_.data(), exclude_);
    exclude_ = -1;
    sampler_.accept(tok);
    if (!on_token(tok) || (!ignore_eos && tokenizer_.is_eog(tok)) || tokens_.size() >= size_t(n_ctx())) {
        *done = true;
        return 1;
    }
    // Drafts: only as many as can be emitted in this call and fit the context.
    int k = 0;
    if (draft_.mode != DraftMode::Off) {
        k = int(std::min<int64_t>({draft_.max, n_max - 1, n_ctx() - int64_t(tokens_.size()) - 1}));
        pass_.assign(1, tok);
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
    if (k == 0) {
        draft_stats.tokens++;
        decode(tok);
        return 1;
    }

    check(pass_.data(), pass_.size());
    const double t0 = seconds_now();
    Trace::Span span(active_trace(), "verify", "step", "tokens", int64_t(pass_.size()));
    const int64_t V = config().n_vocab;
    const size_t pos0 = tokens_.size();
    state_->checkpoint();
    model_->forward(*state_, *experts_, *pool_, pass_.data(), k + 1, rows_.data(), true);
    tokens_.insert(tokens_.end(), pass_.begin(), pass_.end());
    int emitted = 1, a = 0;
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
    const size_t keep = pos0 + 1 + size_t(a);
    if (keep < tokens_.size()) rewind(keep);
    std::copy(rows_.data() + int64_t(a) * V, rows_.data() + int64_t(a + 1) * V, logits_.begin());
    // A rejected draft: the next token comes from the residual, p without it.
    if (a < k && !*done) exclude_ = pass_[size_t(a) + 1];
    draft_stats.drafted += k;
    draft_stats.accepted += a;
    draft_stats.tokens += 1 + a;
    timings.decode_seconds += seconds_now() - t0;
    timings.decode_tokens += 1 + a;
    return emitted;
}

}  // namespace ms
