// Sampler: greedy picks, seeded reproducibility, and the distribution each
// filter leaves, checked against softmax probabilities computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "sampling/sampler.h"

namespace ms {
namespace {

SamplerParams plain(uint64_t seed) {
    SamplerParams p;
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

std::vector<double> frequencies(Sampler& s, const std::vector<float>& logits, int draws) {
    std::vector<double> f(logits.size(), 0.0);
    for (int i = 0; i < draws; i++) f[size_t(s.sample(logits.data()))] += 1.0 / draws;
    return f;
}

// softmax(logits / temp) over the ids in `keep` (others 0), in double.
std::vector<double> expected(const std::vector<float>& logits, double temp, const std::vector<int>& keep) {
    std::vector<double> p(logits.size(), 0.0);
    double sum = 0;
    for (int i : keep) sum += std::exp(logits[size_t(i)] / temp);
    for (int i : keep) p[size_t(i)] = std::exp(logits[size_t(i)] / temp) / sum;
    return p;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want) {
    for (size_t i = 0; i < got.size(); i++) {
        if (want[i] == 0) {
            EXPECT_EQ(got[i], 0.0) << "token " << i;
        } else {
            EXPECT_NEAR(got[i], want[i], 0.015) << "token " << i;
        }
    }
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
    SamplerParams p;
    p.temp = 0;
    Sampler s(p, 5);
    const float a[5] = {0.1f, 3.0f, -1.0f, 2.9f, 0.0f};
    EXPECT_EQ(s.sample(a), 1);
    const float b[5] = {1.0f, 2.0f, 2.0f, 0.0f, 2.0f};
    EXPECT_EQ(s.sample(b), 1);
}

TEST(Sampler, SameSeedSameTokensOtherSeedOthers) {
    std::vector<float> logits(50);
    for (size_t i = 0; i < logits.size(); i++) logits[i] = float(std::sin(double(i)) * 2.0);
    auto run = [&](uint64_t seed) {
        Sampler s(plain(seed), int64_t(logits.size()));
        std::vector<int32_t> out;
        for (int i = 0; i < 200; i++) out.push_back(s.sample(logits.data()));
        return out;
    };
    EXPECT_EQ(run(42), run(42));
    EXPECT_NE(run(42), run(43));

    Sampler s(plain(7), int64_t(logits.size()));
    std::vector<int32_t> first, again;
    for (int i = 0; i < 50; i++) first.push_back(s.sample(logits.data()));
    s.reset();
    for (int i = 0; i < 50; i++) again.push_back(s.sample(logits.data()));
    EXPECT_EQ(first, again);
}

TEST(Sampler, DrawsFollowTheTemperedSoftmax) {
    const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 0.5f};
    Sampler s1(plain(1), 4);
    expect_close(frequencies(s1, logits, 40000), expected(logits, 1.0, {0, 1, 2, 3}));
    SamplerParams p = plain(2);
    p.temp = 0.5f;
    Sampler s2(p, 4);
    expect_close(frequencies(s2, logits, 40000), expected(logits, 0.5, {0, 1, 2, 3}));
}

TEST(Sampler, TopKKeepsTheKBest) {
    const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 0.5f, -1.0f};
    SamplerParams p = plain(3);
    p.top_k = 2;
    Sampler s(p, 5);
    expect_close(frequencies(s, logits, 40000), expected(logits, 1.0, {1, 2}));
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
    // Probabilities 0.5, 0.3, 0.15, 0.05.
    const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
    SamplerParams p = plain(4);
    p.top_p = 0.7f;
    Sampler a(p, 4);
    expect_close(frequencies(a, logits, 40000), expected(logits, 1.0, {0, 1}));
    p.top_p = 0.85f;
    Sampler b(p, 4);
    expect_close(frequencies(b, logits, 40000), expected(logits, 1.0, {0, 1, 2}));
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheBest) {
    const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
    SamplerParams p = plain(5);
    p.min_p = 0.25f;  // keeps p >= 0.125
    Sampler s(p, 4);
    expect_close(frequencies(s, logits, 40000), expected(logits, 1.0, {0, 1, 2}));
}

TEST(Sampler, RepeatPenaltyOverTheLastNTokens) {
    SamplerParams p;
    p.temp = 0;
    p.repeat_penalty = 1.1f;
    p.repeat_last_n = 2;
    Sampler s(p, 4);
    const float pos[4] = {2.0f, 1.9f, 0.0f, 0.0f};  // 2.0 / 1.1 = 1.82 < 1.9
    EXPECT_EQ(s.sample(pos), 0);
    s.accept(0);
    EXPECT_EQ(s.sample(pos), 1);
    s.accept(2);
    s.accept(3);  // token 0 left the 2-token window
    EXPECT_EQ(s.sample(pos), 0);

    const float neg[4] = {-1.0f, -1.05f, -5.0f, -5.0f};  // -1 * 1.1 = -1.1 < -1.05
    Sampler t(p, 4);
    t.accept(0);
    EXPECT_EQ(t.sample(neg), 1);
}

// OpenAI's definition: logit - count * frequency_penalty - (count > 0) *
// presence_penalty, with count the token's occurrences in the window.
TEST(Sampler, PresenceAndFrequencyPenaltiesSubtractPerOccurrence) {
    SamplerParams p;
    p.temp = 0;
    p.repeat_last_n = 8;
    p.frequency_penalty = 0.3f;
    const float logits[4] = {2.0f, 1.5f, 0.0f, 0.0f};
    Sampler f(p, 4);
    f.accept(0);  // 2.0 - 0.3 = 1.7 > 1.5
    EXPECT_EQ(f.sample(logits), 0);
    f.accept(0);  // 2.0 - 0.6 = 1.4 < 1.5
    EXPECT_EQ(f.sample(logits), 1);

    p.frequency_penalty = 0;
    p.presence_penalty = 0.4f;
    Sampler g(p, 4);
    g.accept(0);
    g.accept(0);
    g.accept(0);  // 2.0 - 0.4 once, however often: 1.6 > 1.5
    EXPECT_EQ(g.sample(logits), 0);
    g.accept(1);  // both penalized: 1.6 vs 1.1
    EXPECT_EQ(g.sample(logits), 0);

    p.presence_penalty = -1.0f;  // negative values encourage repeats
    Sampler h(p, 4);
    h.accept(1);
    EXPECT_EQ(h.sample(logits), 1);
}

TEST(Sampler, RejectsBadParameters) {
    SamplerParams p;
    p.top_p = 0;
    EXPECT_THROW(Sampler(p, 4), std::runtime_error);
    EXPECT_THROW(Sampler(SamplerParams{}, 0), std::runtime_error);
}

// Speculative decoding's rule with a one-token draft d: accept d with
// probability p(d), else draw from p without d renormalized. The tokens it
// gives are distributed as p, whatever the draft (checked against softmax
// computed here, with top-k cutting the vocabulary to 4 of 5).
TEST(Sampler, DraftAcceptanceKeepsTheDistribution) {
    const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
    SamplerParams p = plain(7);
    p.top_k = 4;
    const std::vector<double> want = expected(logits, 1.0, {0, 1, 2, 4});
    for (int32_t draft : {1, 2, 3}) {  // likely, unlikely, outside the top-k
        SCOPED_TRACE("draft " + std::to_string(draft));
        Sampler s(p, 5);
        std::vector<double> got(logits.size(), 0.0);
        const int draws = 40000;
        for (int i = 0; i < draws; i++) {
            const int32_t t = s.accept_draft(logits.data(), draft) ? draft : s.sample(logits.data(), draft);
            got[size_t(t)] += 1.0 / draws;
        }
        expect_close(got, want);
    }
    // Greedy: the draft is accepted exactly when it is the argmax; the
    // residual's pick is then the best other token.
    p.temp = 0;
    Sampler g(p, 5);
    EXPECT_TRUE(g.accept_draft(logits.data(), 1));
    EXPECT_FALSE(g.accept_draft(logits.data(), 4));
    EXPECT_EQ(g.sample(logits.data(), 1), 4);
}

}  // namespace
}  // namespace ms
