// Session behaviour on a golden model: seeded generation is reproducible,
// chat-style re-prefill evaluates only the new suffix and gives the same
// logits as starting fresh, and bad requests are clear errors.
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/session.h"
#include "../golden_required.h"

namespace ms {
namespace {

const std::string kModel = std::string(MOESTREAM_GOLDEN_DIR) + "/models/qwen3moe-Q4_K_M.gguf";

std::unique_ptr<Session> open(uint64_t seed, int64_t n_ctx = 128, int threads = 2) {
    SessionOptions o;
    o.model_path = kModel;
    o.n_ctx = n_ctx;
    o.n_batch = 16;
    o.n_threads = threads;
    o.sampling.temp = 1.0f;
    o.sampling.top_k = 0;
    o.sampling.top_p = 1.0f;
    o.sampling.min_p = 0.0f;
    o.sampling.seed = seed;
    return Session::open(o);
}

std::vector<int32_t> generate(Session& s, int n) {
    std::vector<int32_t> out;
    s.generate(n, [&](int32_t t) {
        out.push_back(t);
        return true;
    });
    return out;
}

bool same_logits(const Session& a, const Session& b) {
    return std::memcmp(a.logits(), b.logits(), size_t(a.config().n_vocab) * 4) == 0;
}

TEST(Session, SeedMakesGenerationReproducible) {
    auto run = [](uint64_t seed, int threads) {
        auto s = open(seed, 128, threads);
        s->prefill(s->tokenize("The GNU General Public License"));
        return generate(*s, 24);
    };
    const std::vector<int32_t> a = run(11, 2);
    EXPECT_EQ(a.size(), 24u);  // a random model rarely ends its turn; if it did, sizes would still match
    EXPECT_EQ(a, run(11, 2));
    EXPECT_EQ(a, run(11, 1));  // thread count changes no bit
    EXPECT_NE(a, run(12, 2));
}

TEST(Session, PrefillContextEvaluatesOnlyTheNewSuffix) {
    auto s = open(1);
    const std::vector<int32_t> a = s->tokenize("The GNU General Public License is a free");
    const std::vector<int32_t> b = s->tokenize(" copyleft license for software");
    std::vector<int32_t> ab = a;
    ab.insert(ab.end(), b.begin(), b.end());

    EXPECT_EQ(s->prefill_context(a), a.size());
    EXPECT_EQ(s->prefill_context(ab), b.size());
    EXPECT_EQ(s->tokens(), ab);
    auto fresh = open(1);
    fresh->prefill(ab);
    EXPECT_TRUE(same_logits(*s, *fresh));

    // A context that diverges after 3 tokens re-evaluates from there.
    std::vector<int32_t> other(ab.begin(), ab.begin() + 3);
    other.insert(other.end(), b.begin(), b.end());
    EXPECT_EQ(s->prefill_context(other), b.size());
    auto fresh2 = open(1);
    fresh2->prefill(other);
    EXPECT_TRUE(same_logits(*s, *fresh2));

    // The same context again still gives fresh logits (its last token).
    EXPECT_EQ(s->prefill_context(other), 1u);
    EXPECT_TRUE(same_logits(*s, *fresh2));
}

TEST(Session, GenerateStopsWhenAsked) {
    auto s = open(3);
    s->prefill(s->tokenize("The GNU"));
    std::atomic<bool> stop{true};
    EXPECT_EQ(s->generate(10, [](int32_t) { return true; }, &stop), 0);
    int calls = 0;
    EXPECT_EQ(s->generate(10, [&](int32_t) { return ++calls < 3; }), 3);
    EXPECT_EQ(calls, 3);
}

TEST(Session, GenerationStopsAtTheEndOfTheContext) {
    auto s = open(4, 12);
    const std::vector<int32_t> p = s->tokenize("The GNU General");
    s->prefill(p);
    const std::vector<int32_t> out = generate(*s, 100);
    EXPECT_EQ(s->tokens().size(), 12u);
    EXPECT_LE(out.size(), 12 - p.size() + 1);
}

// -ub 0 (the default) takes the backend's piece size, capped by -b and the
// context; a given -ub is kept. The CPU's default is 512.
TEST(Session, UbatchDefaultsToTheBackends) {
    SessionOptions o;
    o.model_path = kModel;
    o.n_ctx = 4096;
    o.n_threads = 1;
    EXPECT_EQ(Session::open(o)->ubatch(), 512);
    o.n_sequences = 3;  // several sequences: at most 512 on any backend
    EXPECT_EQ(Session::open(o)->ubatch(), 512);
    o.n_sequences = 1;
    o.n_ubatch = 100;
    EXPECT_EQ(Session::open(o)->ubatch(), 100);
    o.n_ubatch = 0;
    o.n_batch = 64;
    EXPECT_EQ(Session::open(o)->ubatch(), 64);
    o.n_ubatch = -1;
    EXPECT_THROW(Session::open(o), std::runtime_error);
}

TEST(Session, BadRequestsAreErrors) {
    auto s = open(5, 16);
    std::vector<int32_t> many(17, 1);
    EXPECT_THROW(s->prefill(many), std::runtime_error);
    EXPECT_THROW(s->prefill({int32_t(s->config().n_vocab)}), std::runtime_error);
    EXPECT_THROW(s->prefill({-1}), std::runtime_error);
    EXPECT_TRUE(s->tokens().empty());
    EXPECT_THROW(s->rewind(1), std::runtime_error);
    EXPECT_THROW(parse_kv_type("q8"), std::runtime_error);

    SessionOptions o;
    o.model_path = "/nonexistent/model.gguf";
    EXPECT_THROW(Session::open(o), std::runtime_error);
}

}  // namespace
}  // namespace ms
