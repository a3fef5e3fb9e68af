// What is particular to gemma4 beside the checks every family gets
// (golden_test.cpp: prompt logits, greedy steps; batch size, chunking through
// the sliding-window ring, thread count and SIMD level never changing a bit):
// both of its variants' files are there, and the ring keeps the
// sliding-window layers' cache from growing with the context.
#include <gtest/gtest.h>

#include "golden_model.h"
#include "../golden_required.h"

namespace ms {
namespace {

std::vector<std::string> cases() { return golden::family("gemma4"); }


TEST(Gemma4GoldenFiles, AllPresent) {
    // The README lists gemma4 and gemma4-ple, each F32 and Q8_0.
    EXPECT_EQ(cases(), (std::vector<std::string>{"gemma4-F32", "gemma4-Q8_0", "gemma4-ple-F32", "gemma4-ple-Q8_0"}));
}

// Per position of context, the state grows by the full-attention layers'
// K and V only: in the golden gemma4 (README) layers 1 and 3 hold 1 KV head
// of 64, i.e. 2 x 64 F16 values each, 512 bytes a position. Sliding-window
// layers 0 and 2 (2 KV heads of 32) would add as much again if they kept
// every position; attention's per-thread score row adds a little.
TEST(Gemma4State, SlidingWindowCacheDoesNotGrowWithContext) {
    const double per_position =
        golden::state_bytes_per_position(golden::LoadedModel(golden::models_dir() + "/gemma4-F32.gguf"));
    printf("state bytes per position of context: %.1f\n", per_position);
    EXPECT_GE(per_position, 512.0);
    EXPECT_LT(per_position, 512.0 + 64.0);
}

}  // namespace
}  // namespace ms
