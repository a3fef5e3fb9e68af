// Speculative decoding on every golden file of every runnable family:
// greedy generation with n-gram drafts, with forced drafts (every pass
// checks draft-max tokens, so most are rejected and the cache is rolled
// back) and with drafts that are mostly right, gives the same tokens as
// plain decoding, and its first tokens are
// the reference's greedy tokens (as in golden_test, up to the reference's
// own near-ties). Families whose state cannot go back a few positions
// (DeltaNet's recurrence, DeepSeek V4's compressed blocks) are covered:
// their rollbacks go through checkpoint() or re-evaluation.
#include <gtest/gtest.h>

#include <cstdio>

#include "../model/golden.h"
#include "runtime/session.h"

namespace ms {
namespace {

std::vector<int32_t> generate(const golden::Case& g, DraftMode mode, int draft_max, int n, DraftStats* stats,
                              const std::vector<int32_t>* oracle = nullptr) {
    SessionOptions o;
    o.model_path = g.gguf;
    o.n_ctx = 128;
    o.kv_type = GgmlType::F32;
    o.n_threads = 2;
    o.n_batch = 16;
    o.n_ubatch = 8;
    o.sampling.temp = 0;
    auto s = Session::open(o);
    DraftOptions d;
    d.mode = mode;
    d.max = draft_max;
    // Drafts from the plain run's tokens, every seventh position wrong: most
    // passes accept some drafts and reject one, so the cache is cut back
    // in the middle of what a pass wrote.
    if (oracle) {
        const size_t base = g.prompt.size();
        d.custom = [oracle, base](const int32_t*, size_t len, int k, std::vector<int32_t>* out) {
            int m = 0;
            for (size_t i = len - base; i < oracle->size() && m < k; i++, m++)
                out->push_back(i % 7 == 3 ? ((*oracle)[i] + 1) % 7 : (*oracle)[i]);
            return m;
        };
    }
    s->set_draft(d);
    s->prefill(g.prompt);
    std::vector<int32_t> out;
    s->generate(n, [&](int32_t t) {
        out.push_back(t);
        return true;
    }, nullptr, true);
    EXPECT_EQ(s->tokens().size(), g.prompt.size() + out.size());
    if (stats) *stats = s->draft_stats;
    return out;
}

class Speculate : public ::testing::TestWithParam<std::string> {};

TEST_P(Speculate, GreedyTokensIdenticalWithDrafts) {
    const golden::Case g = golden::load(GetParam());
    const int n = 32;
    const std::vector<int32_t> plain = generate(g, DraftMode::Off, 1, n, nullptr);
    ASSERT_EQ(plain.size(), size_t(n));
    // The reference's own greedy tokens, up to its first near-tie.
    const int64_t V = g.n_vocab;
    for (size_t i = 0; i < g.greedy.size(); i++) {
        const float* ref_row = i == 0 ? g.logits.data() + (g.prompt.size() - 1) * size_t(V)
                                      : g.gen.data() + (i - 1) * size_t(V);
        if (golden::top2_gap(ref_row, V) < 1e-3f) break;
        ASSERT_EQ(plain[i], g.greedy[i]) << "greedy token " << i;
    }
    for (auto [mode, k] : {std::pair{DraftMode::Ngram, 4}, std::pair{DraftMode::Forced, 5}}) {
        SCOPED_TRACE(std::string(draft_mode_name(mode)) + " " + std::to_string(k));
        DraftStats st;
        EXPECT_EQ(generate(g, mode, k, n, &st), plain);
        EXPECT_EQ(st.tokens, n);
        printf("%s %s %d: %lld drafted, %lld accepted, %lld passes\n", g.name.c_str(), draft_mode_name(mode), k,
               (long long)st.drafted, (long long)st.accepted, (long long)st.passes);
        if (mode == DraftMode::Forced) {
            EXPECT_GT(st.drafted, 0);
        }
    }
    {
        SCOPED_TRACE("oracle drafts");
        DraftStats st;
        EXPECT_EQ(generate(g, DraftMode::Ngram, 4, n, &st, &plain), plain);
        EXPECT_GT(st.accepted, n / 3);
        EXPECT_LT(st.passes, n);
        printf("%s oracle: %lld drafted, %lld accepted, %lld passes\n", g.name.c_str(), (long long)st.drafted,
               (long long)st.accepted, (long long)st.passes);
    }
}

INSTANTIATE_TEST_SUITE_P(Families, Speculate, ::testing::ValuesIn(golden::runnable_models()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return golden::identifier(i.param); });

}  // namespace
}  // namespace ms
