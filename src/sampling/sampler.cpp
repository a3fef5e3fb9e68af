#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace ms {

namespace {

uint64_t splitmix64(uint64_t* x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// Best first; equal logits by lower id, so the order is total.
bool better(float la, int32_t ia, float lb, int32_t ib) { return la > lb || (la == lb && ia < ib); }

}  // namespace

Sampler::Sampler(const SamplerParams& params, int64_t n_vocab) : params_(params), n_vocab_(n_vocab) {
    if (n_vocab <= 0) throw std::runtime_error("sampler: empty vocabulary");
    if (params.top_p <= 0) throw std::runtime_error("sampler: top-p must be > 0");
    if (params.repeat_penalty <= 0) throw std::runtime_error("sampler: repeat penalty must be > 0");
    cand_.resize(size_t(n_vocab));
    probs_.resize(size_t(n_vocab));
    history_.resize(size_t(std::max(params.repeat_last_n, 0)));
    reset();
}

void Sampler::reset() {
    history_len_ = history_pos_ = 0;
    uint64_t s = params_.seed;
    for (uint64_t& w : state_) w = splitmix64(&s);
}

double Sampler::uniform() {
    // xoshiro256**: small, fast, and defined bit for bit (unlike the
    // standard library's distributions).
    const uint64_t r = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return double(r >> 11) * 0x1.0p-53;
}

void Sampler::accept(int32_t token) {
    if (history_.empty()) return;
    history_[history_pos_] = token;
    history_pos_ = (history_pos_ + 1) % history_.size();
    history_len_ = std::min(history_len_ + 1, history_.size());
}

int32_t Sampler::sample(const float* logits) { return sample(logits, -1); }

int32_t Sampler::sample(const float* logits, int32_t exclude) {
    if (params_.temp <= 0 && params_.repeat_penalty == 1.0f && params_.presence_penalty == 0.0f &&
        params_.frequency_penalty == 0.0f && params_.logit_bias.empty()) {
        // Plain greedy: distribution()'s argmax without its copy of the
        // vocabulary (a third of a millisecond a token at 152k tokens, which
        // a step of 32 batched sequences pays 32 times).
        int32_t best = -1;
        for (int32_t i = 0; i < int32_t(n_vocab_); i++) {
            if (i == exclude) continue;
            if (best < 0 || better(logits[i], i, logits[best], best)) best = i;
        }
        return best < 0 ? exclude : best;
    }
    size_t n = 0;
    const int32_t greedy = distribution(logits, &n);
    if (greedy >= 0 && greedy != exclude) return greedy;
    if (greedy >= 0) {  // the best but one: ties by lower id, as the order says
        int32_t best = -1;
        for (int32_t i = 0; i < int32_t(n_vocab_); i++) {
            if (i == exclude) continue;
            if (best < 0 || better(cand_[size_t(i)].logit, i, cand_[size_t(best)].logit, best)) best = i;
        }
        return best < 0 ? greedy : best;
    }
    double total = 1.0;
    for (size_t i = 0; i < n; i++)
        if (cand_[i].id == exclude) total -= probs_[i];
    if (total <= 0) return cand_[0].id;  // the excluded token had all the mass
    const double u = uniform() * total;
    double cum = 0;
    size_t last = 0;
    for (size_t i = 0; i < n; i++) {
        if (cand_[i].id == exclude) continue;
        if (probs_[i] <= 0) continue;  // banned or masked (-inf) candidates are never drawn
        cum += probs_[i];
        last = i;
        if (u < cum) return cand_[i].id;
    }
    return cand_[last].id;  // u within rounding of the total
}

bool Sampler::accept_draft(const float* logits, int32_t draft) {
    size_t n = 0;
    const int32_t greedy = distribution(logits, &n);
    if (greedy >= 0) return greedy == draft;
    const double u = uniform();
    for (size_t i = 0; i < n; i++)
        if (cand_[i].id == draft) return u < probs_[i];
    return false;
}

int32_t Sampler::distribution(const float* logits, size_t* n_out) {
    size_t n = size_t(n_vocab_);
    for (size_t i = 0; i < n; i++) cand_[i] = {logits[i], int32_t(i)};
    if (params_.repeat_penalty != 1.0f || params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
        for (size_t i = 0; i < history_len_; i++) {
            const int32_t id = history_[i];
            bool seen = id < 0 || id >= n_vocab_;
            for (size_t j = 0; j < i && !seen; j++) seen = history_[j] == id;
            if (seen) continue;  // once per token, however often it appeared
            float& l = cand_[size_t(id)].logit;
            if (params_.repeat_penalty != 1.0f) l = l > 0 ? l / params_.repeat_penalty : l * params_.repeat_penalty;
            int count = 1;
            for (size_t j = i + 1; j < history_len_; j++) count += history_[j] == id;
            l -= params_.presence_penalty + float(count) * params_.frequency_penalty;
        }
    }
    for (const auto& [id, bias] : params_.logit_bias) {
        if (id < 0 || id >= n_vocab_) continue;
        cand_[size_t(id)].logit = bias <= -100.0f ? -INFINITY : cand_[size_t(id)].logit + bias;
    }
    auto order = [](const Candidate& a, const Candidate& b) { return better(a.logit, a.id, b.logit, b.id); };

    *n_out = n;
    if (params_.temp <= 0) {
        return std::min_element(cand_.begin(), cand_.begin() + ptrdiff_t(n), order)->id;
    }

    // top-k, then the survivors sorted best first.
    if (params_.top_k > 0 && size_t(params_.top_k) < n) {
        std::nth_element(cand_.begin(), cand_.begin() + params_.top_k - 1, cand_.begin() + ptrdiff_t(n), order);
        n = size_t(params_.top_k);
    }
    std::sort(cand_.begin(), cand_.begin() + ptrdiff_t(n), order);

    // top-p and min-p on the softmax of the (untempered) survivors.
    auto softmax = [&](float temp) {
        const float max = cand_[0].logit;
        double sum = 0;
        for (size_t i = 0; i < n; i++) {
            probs_[i] = std::exp((cand_[i].logit - max) / temp);
            sum += probs_[i];
        }
        for (size_t i = 0; i < n; i++) probs_[i] = float(probs_[i] / sum);
    };
    if (params_.top_p < 1.0f) {
        softmax(1.0f);
        double cum = 0;
        size_t keep = n;
        for (size_t i = 0; i < n; i++) {
            cum += probs_[i];
            if (cum >= params_.top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (params_.min_p > 0.0f) {
        const float floor = cand_[0].logit + std::log(params_.min_p);
        size_t keep = 1;
        while (keep < n && cand_[keep].logit >= floor) keep++;
        n = keep;
    }

    softmax(params_.temp);
    *n_out = n;
    return -1;
}

}  // namespace ms
