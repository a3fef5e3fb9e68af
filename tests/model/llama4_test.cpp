// What is particular to llama4 beside the checks every family gets
// (golden_test.cpp): attention-temperature tuning against the README's
// formula at the positions where it acts (the golden prompts end long before
// 8191, where it is exactly 1), and the chunked layers' cache: layers 0-2
// attend within 8192-position chunks, so past two chunks the state grows by
// layer 3's K and V only.
#include <gtest/gtest.h>

#include <cmath>

#include "golden_model.h"
#include "model/attention_block.h"
#include "../golden_required.h"

namespace ms {
namespace {

// README §llama4: q at position p times 1 + 0.1 * ln(floor((p + 1) / 8192) + 1).
double readme_temperature(int64_t p) { return 1.0 + 0.1 * std::log(std::floor(double(p + 1) / 8192.0) + 1.0); }

TEST(Llama4Temperature, MatchesTheReadmeFormula) {
    const AttentionTemperature t{0.1f, 8192};
    for (int64_t p : {0, 1, 100, 8190}) EXPECT_EQ(attention_temperature(t, p), 1.0f) << p;
    for (int64_t p : {8191, 8192, 16382, 16383, 24575, 100000, 1000000, 10000000}) {
        EXPECT_GT(attention_temperature(t, p), 1.0f) << p;
        EXPECT_NEAR(attention_temperature(t, p), readme_temperature(p), 1e-6 * readme_temperature(p)) << p;
    }
    EXPECT_EQ(attention_temperature(AttentionTemperature{}, 100000), 1.0f);  // none
}

// Per position of context (F16 cache) between contexts of 32768 and 65536,
// both past two chunks plus a batch: layer 3's 2 KV heads of 32, K and V,
// 256 bytes; all four layers would be 1024. Attention's per-thread score
// row adds a little.
TEST(Llama4State, ChunkedLayersCacheAtMostAChunk) {
    const double per_position =
        golden::state_bytes_per_position(golden::LoadedModel(golden::models_dir() + "/llama4-F32.gguf"), 32768);
    printf("llama4 state bytes per position of context past two chunks: %.1f\n", per_position);
    EXPECT_GE(per_position, 256.0);
    EXPECT_LT(per_position, 256.0 + 64.0);
}

}  // namespace
}  // namespace ms
