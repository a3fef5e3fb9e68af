// Rewinding a session whose sliding-window layers keep only a ring of their
// window (golden gemma4 and gpt-oss: window 8; with batches of 4 the ring
// holds 11 positions): going back within what the ring still holds, or
// beyond it (the session then evaluates the kept tokens again), and
// continuing gives the same logits, bit for bit, as evaluating the prompt
// straight through. The DeltaNet layers of qwen35moe and qwen3next hold the
// whole sequence in their recurrent state: every rewind there starts again
// from 0, with the same result.
#include <gtest/gtest.h>

#include <cstring>

#include "../model/golden.h"
#include "runtime/session.h"
#include "../golden_required.h"

namespace ms {
namespace {

class Rewind : public ::testing::TestWithParam<std::string> {};

TEST_P(Rewind, ThroughTheSlidingWindowRing) {
    const golden::Case g = golden::load(GetParam());
    SessionOptions o;
    o.model_path = g.gguf;
    o.n_ctx = 64;
    o.n_batch = 4;
    o.kv_type = GgmlType::F32;
    o.n_threads = 2;
    auto s = Session::open(o);
    const int64_t V = g.n_vocab;
    const size_t n = g.prompt.size();

    s->prefill(g.prompt);
    const std::vector<float> want(s->logits(), s->logits() + V);
    const float* ref = g.logits.data() + (n - 1) * size_t(V);
    EXPECT_LE(golden::rel_l2(want.data(), ref, size_t(V)), golden::tolerance("Q8_0"));

    // n - 3: the 7 positions before it are still in the ring; 20 and 1:
    // overwritten, so the session starts again from 0.
    for (size_t keep : {n - 3, size_t(20), size_t(1)}) {
        SCOPED_TRACE("rewind to " + std::to_string(keep));
        s->rewind(keep);
        EXPECT_EQ(s->tokens(), std::vector<int32_t>(g.prompt.begin(), g.prompt.begin() + ptrdiff_t(keep)));
        s->prefill(std::vector<int32_t>(g.prompt.begin() + ptrdiff_t(keep), g.prompt.end()));
        EXPECT_EQ(0, std::memcmp(s->logits(), want.data(), size_t(V) * 4));
    }
}

INSTANTIATE_TEST_SUITE_P(SlidingWindowFamilies, Rewind, ::testing::Values("gemma4-ple-Q8_0", "gpt-oss-MXFP4_MOE", "qwen35moe-Q8_0",
                                                                     "qwen3next-Q8_0"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return golden::identifier(i.param); });

}  // namespace
}  // namespace ms
