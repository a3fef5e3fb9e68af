// gemma4 against llama.cpp on dimensions the golden files do not have
// (tests/data/gemma4-dims/README.md): 6 layers in the pattern (sliding
// window, sliding window, full) x 2 with KV heads 2 2 1 2 2 1, 12 experts,
// n_embd 32, heads of 16 and 32, window 6, another seed and prompt. The F32
// model is written here (model/gemma4_dims_model.h, the bytes the reference
// ran on); the Q8_0 file is llama-quantize's. Held to the golden tolerances:
// prompt logits within 1e-3 (F32) and 2e-2 (Q8_0), the greedy tokens and
// rows; batch size, threads and SIMD level never change a bit.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>

#include "gemma4_dims_model.h"
#include "golden_model.h"

namespace ms {
namespace {

const std::string kData = std::string(MOESTREAM_SOURCE_DIR) + "/tests/data/gemma4-dims";

// The F32 model the reference ran on: README's make_model flags are Dims'
// defaults with seed 3.
std::string write_f32_model() {
    gemma4_dims::Dims d;
    d.seed = 3;
    const std::string path = "/tmp/moestream-gemma4-dims-" + std::to_string(getpid()) + "-F32.gguf";
    gemma4_dims::write_model(golden::models_dir() + "/gemma4-F32.gguf", path, d);
    return path;
}

// The F32 file is written with golden gemma4-F32's tokenizer; the Q8_0 one
// (tests/data) carries it.
TEST(Gemma4Dims, F32MatchesReference) {
    SKIP_WITHOUT_GOLDEN();
    golden::Case g = golden::load("gemma4-dims-F32", kData);
    g.gguf = write_f32_model();
    golden::expect_matches_reference(g, golden::tolerance("F32"));
    std::remove(g.gguf.c_str());
}

TEST(Gemma4Dims, Q8_0MatchesReference) {
    const golden::Case g = golden::load("gemma4-dims-Q8_0", kData);
    golden::expect_matches_reference(g, golden::tolerance("Q8_0"));
}

TEST(Gemma4Dims, EveryLevelWithinBound) {
    golden::expect_every_level_within_bound(golden::load("gemma4-dims-Q8_0", kData), golden::tolerance("Q8_0"));
}

TEST(Gemma4Dims, BatchAndThreadsDoNotChangeBits) {
    golden::expect_batch_and_threads_do_not_change_bits(golden::load("gemma4-dims-Q8_0", kData));
}

}  // namespace
}  // namespace ms
