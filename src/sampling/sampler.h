// Picks the next token from a row of logits: repeat, presence and frequency
// penalties over the last N tokens, logit_bias, then top-k, top-p, min-p, temperature and a draw from a seeded
// generator (the reference engine's order). Temperature 0 is greedy. The
// same seed and the same logits give the same tokens on every machine.
// Buffers are sized once, so sampling allocates nothing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ms {

struct SamplerParams {
    float temp = 0.8f;            // <= 0: greedy (argmax)
    int top_k = 40;               // <= 0: all tokens
    float top_p = 0.95f;          // >= 1: off
    float min_p = 0.05f;          // <= 0: off; keep p >= min_p * p_max
    float repeat_penalty = 1.0f;  // 1: off; > 1 discourages repeats
    int repeat_last_n = 64;       // tokens of history the penalties look at
    // OpenAI's additive penalties over the same history: a token seen there
    // loses presence_penalty once plus frequency_penalty per occurrence.
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    uint64_t seed = 0;
    // OpenAI's logit_bias: added to a token's logit before everything
    // else; -100 or less bans the token outright.
    std::vector<std::pair<int32_t, float>> logit_bias;
};

class Sampler {
public:
    Sampler(const SamplerParams& params, int64_t n_vocab);

    // Picks a token from logits[0..n_vocab). Does not record it: call
    // accept() with the token actually used (prompt tokens too).
    int32_t sample(const float* logits);
    // The same draw with `exclude`'s probability set to zero and the rest
    // renormalized (-1: none): speculative decoding's residual after a
    // rejected draft, max(0, p - q) for a draft q that is one token.
    int32_t sample(const float* logits, int32_t exclude);
    // Speculative decoding's test of a drafted token: true with probability
    // p(draft) under the distribution sample() draws from (greedy: whether
    // it is the argmax). Records nothing.
    bool accept_draft(const float* logits, int32_t draft);
    void accept(int32_t token);
    // Forgets the history and restarts the generator from the seed.
    void reset();

    const SamplerParams& params() const { return params_; }

private:
    struct Candidate {
        float logit;
        int32_t id;
    };
    double uniform();  // [0, 1)
    // Penalties, then the greedy pick (returned) or, when sampling, the
    // surviving candidates cand_[0..*n) with their probabilities probs_
    // (returns -1).
    int32_t distribution(const float* logits, size_t* n);

    SamplerParams params_;
    int64_t n_vocab_;
    std::vector<Candidate> cand_;
    std::vector<float> probs_;
    std::vector<int32_t> history_;  // ring of the last repeat_last_n tokens
    size_t history_len_ = 0, history_pos_ = 0;
    uint64_t state_[4];  // xoshiro256** state
};

}  // namespace ms
