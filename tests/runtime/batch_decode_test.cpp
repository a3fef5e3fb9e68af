// Batched decode (Session::decode_batch, Model::forward_batch): sequences at
// different positions decoded together in one forward pass give each the
// same logits, bit for bit, as decoding it alone, on a golden file of every
// runnable family (those on the shared decoder batch, the others fall back to
// one forward call each) and streamed through a store smaller than a batch's
// union of experts; the sequence started from the golden prompt generates
// the reference's greedy tokens.
#include <gtest/gtest.h>

#include <cstring>

#include "../model/golden.h"
#include "batched_equals_alone.h"
#include "runtime/session.h"
#include "store/store.h"
#include "../golden_required.h"

namespace ms {
namespace {

// The family's Q8_0 file if it has one, else its first.
std::string one_file(const std::string& family) {
    const std::vector<std::string> files = golden::family(family);
    for (const std::string& f : files)
        if (f.find("Q8_0") != std::string::npos) return f;
    return files.at(0);
}

std::unique_ptr<Session> open(const golden::Case& g, int store_slots, StoreCounters* counters) {
    SessionOptions o;
    o.model_path = g.gguf;
    o.n_ctx = 64;
    o.n_batch = 64;  // a prompt in one forward call: only decode steps count as such
    o.n_ubatch = 8;
    o.kv_type = GgmlType::F32;
    o.n_threads = 2;
    o.sampling.temp = 0;
    ExpertSourceFactory store;
    if (store_slots > 0) {
        store = [=](const GgufFile& f, const Model& m, uint64_t) -> std::unique_ptr<ExpertSource> {
            StoreOptions so;
            so.io = "pread";
            so.io_options = {4, 2, 2};
            return std::make_unique<Store>(ExpertLayout::gguf(f, m.expert_layers()), store_slots, so, counters);
        };
    }
    return Session::open(o, store);
}

// Compares up to the first step the reference itself calls a near-tie.
void expect_golden_greedy(const golden::Case& g, const std::vector<int32_t>& out) {
    const int64_t V = g.n_vocab;
    for (size_t i = 0; i < g.greedy.size() && i < out.size(); i++) {
        const float* ref_row = i == 0 ? g.logits.data() + (g.prompt.size() - 1) * size_t(V)
                                      : g.gen.data() + (i - 1) * size_t(V);
        if (golden::top2_gap(ref_row, V) < 1e-3f) break;
        EXPECT_EQ(out[i], g.greedy[i]) << "greedy token " << i;
        if (out[i] != g.greedy[i]) break;
    }
}

class BatchDecode : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchDecode, SameLogitsAsAlone) {
    const golden::Case g = golden::load(one_file(GetParam()));
    auto lead = open(g, 0, nullptr);
    expect_golden_greedy(g, batched_equals_alone(g, *lead, 6));
}

INSTANTIATE_TEST_SUITE_P(Families, BatchDecode, ::testing::ValuesIn(golden::runnable_families()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return golden::identifier(i.param); });

// Streamed through a cache of exactly one token's experts: a batch's union
// is acquired in groups, and every generated token counts as a decode step.
// On gemma4 (its own forward pass), gemma4-ple (per-layer embedding rows
// through the same store) and deepseek4 (hyper-connected streams, hash-routed
// layers prefetched from the token ids) as on the shared decoder: the
// batched steps are one forward call each. A step's union outgrows that
// cache, so the store's step fit (on by default) orders the evictions of
// the steps after the first: the logits stay the alone ones.
class BatchDecodeStreamed : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchDecodeStreamed, ThroughASmallCache) {
    const golden::Case g = golden::load(GetParam());
    StoreCounters counters;
    const int k = Model::open(GgufFile::open(g.gguf))->config().n_expert_used;
    auto streamed = open(g, k, &counters);
    const uint64_t decoded_before = counters.decode_steps, calls_before = counters.steps;
    expect_golden_greedy(g, batched_equals_alone(g, *streamed, 6));
    EXPECT_GT(counters.evictions, 0u);
    EXPECT_GT(counters.step_fit_steps, 0u);
    // 6 steps of 3 sequences batched, and the same alone; forward calls: 6
    // prompts, 6 batched steps, 18 alone.
    EXPECT_EQ(counters.decode_steps - decoded_before, 6u * 3 * 2);
    EXPECT_EQ(counters.steps - calls_before, 6u + 6u + 18u);
}

INSTANTIATE_TEST_SUITE_P(Files, BatchDecodeStreamed,
                         ::testing::Values("qwen3moe-Q8_0", "gemma4-Q8_0", "gemma4-ple-Q8_0", "deepseek4-Q8_0"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return golden::identifier(i.param); });

}  // namespace
}  // namespace ms
