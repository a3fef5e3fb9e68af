// The forward pass of every runnable family against every golden file of
// the family: prompt logits within the README's tolerance, greedy steps
// matching the reference's rows and tokens, and the properties the store
// relies on (batch size and thread count never change a bit of the output);
// every SIMD level within the bound, on the golden files and on a qwen3moe
// model with Q4_K attention.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <random>
#include <utility>

#include "golden_model.h"
#include "synth/synth.h"
#include "quant/cpu.h"
#include "../golden_required.h"

namespace ms {
namespace {

class Golden : public ::testing::TestWithParam<std::string> {};

// Quantized files are held to their main file at 2e-2: the README sends an
// engine with float32 activations to the exact/ files where those are more
// than 2e-2 from the main ones, but ours rounds activations as the reference
// does. The distance to exact/ is printed beside it, for the record.
TEST_P(Golden, PromptLogitsAndGreedySteps) {
    const golden::Case g = golden::load(GetParam());
    const double bound = golden::tolerance(g.meta.at("type").as_string());
    const std::vector<float> logits = golden::expect_matches_reference(g, bound);
    const std::vector<float> exact = golden::exact_logits(g.name);
    if (!exact.empty()) {
        ASSERT_EQ(exact.size(), logits.size());
        printf("%-22s vs exact/ prompt logits relative L2 %.3e\n", g.name.c_str(),
               golden::rel_l2(logits.data(), exact.data(), exact.size()));
    }
}

// The README holds qwen3moe-F16 to its exact/ file at 1e-3: the reference's
// own F16 run is 0.007 away from it, beyond the F16 bound, so the main file
// only gets the quantized bound (golden::tolerance).
TEST(Qwen3MoeExact, F16WithinBoundOfExactFile) {
    const golden::Case g = golden::load("qwen3moe-F16");
    const std::vector<float> exact = golden::exact_logits("qwen3moe-F16");
    golden::LoadedModel m(g.gguf);
    ThreadPool pool(2);
    auto st = m.state(2);
    const int n = int(g.prompt.size());
    std::vector<float> logits(size_t(n * g.n_vocab));
    m.model->forward(*st, *m.experts, pool, g.prompt.data(), n, logits.data(), true);
    const double err = golden::rel_l2(logits.data(), exact.data(), exact.size());
    printf("qwen3moe-F16 vs exact/ prompt logits relative L2 %.3e (bound 1e-03)\n", err);
    EXPECT_LE(err, 1e-3);
}

// glm4moe's NextN block (blk.3, README: not used for the logits) is neither
// run nor read: three expert layers, and the resident bytes are those of the
// tensors outside blk.3 that are not routed experts.
TEST(FamiliesGolden, NextNBlockIsNotRead) {
    GgufFile f = GgufFile::open(golden::models_dir() + "/glm4moe-Q8_0.gguf");
    auto m = Model::open(f);
    EXPECT_EQ(m->config().n_layer, 4);
    EXPECT_EQ(m->config().n_nextn, 1);
    EXPECT_EQ(m->expert_layers().size(), 3u);
    uint64_t want = 0;
    size_t n = 0;
    for (const GgufTensor& t : f.tensors()) {
        if (t.name.rfind("blk.3.", 0) == 0 || t.name.find("_exps.") != std::string::npos) continue;
        want += t.nbytes;
        n++;
    }
    EXPECT_GE(m->resident_bytes(), want);
    EXPECT_LT(m->resident_bytes(), want + 64 * n);  // 64-byte alignment of each tensor
}

// gpt-oss's sliding-window layers (0 and 2, README) keep a ring: per
// position of context the state grows by the full layers' K and V only,
// layers 1 and 3 with 2 KV heads of 64, i.e. 2 x 128 F16 values each, 1024
// bytes a position; attention's per-thread score row adds a little.
TEST(FamiliesGolden, GptOssSlidingWindowCacheDoesNotGrowWithContext) {
    const double per_position =
        golden::state_bytes_per_position(golden::LoadedModel(golden::models_dir() + "/gpt-oss-F32.gguf"));
    printf("gpt-oss state bytes per position of context: %.1f\n", per_position);
    EXPECT_GE(per_position, 1024.0);
    EXPECT_LT(per_position, 1024.0 + 64.0);
}

// qwen35moe's DeltaNet layers (0-2, README) keep fixed-size states in the
// sequence's state: per position of context it grows by layer 3's K and V
// only (2 KV heads of 64, 2 x 128 F16 values, 512 bytes), and besides what
// grows it holds, per DeltaNet layer, the last 3 inputs of the 256-channel
// convolution and 4 value heads' 32 x 32 recurrent matrices, in float32.
TEST(FamiliesGolden, Qwen35MoeRecurrentStatesAreInTheStateBytes) {
    golden::LoadedModel m(golden::models_dir() + "/qwen35moe-F32.gguf");
    const double per_position = golden::state_bytes_per_position(m);
    EXPECT_GE(per_position, 512.0);
    EXPECT_LT(per_position, 512.0 + 64.0);
    StateOptions o;
    o.n_ctx = 4096;
    o.max_batch = 16;
    o.kv_type = GgmlType::F16;
    const double fixed = double(m.model->new_state(o)->bytes()) - per_position * 4096;
    EXPECT_GE(fixed, 3.0 * (3 * 256 + 4 * 32 * 32) * 4);
}

// deepseek2's MLA cache (README: key_length 48 = kv_lora 32 + rope 16, the
// compressed row; V is its first 32 values) holds 48 F16 values a layer per
// position, 3 x 96 = 288 bytes, where full K and V (4 heads of 48 + 32) would
// take 3 x 640 = 1920. glm-dsa's state (README: rows of 64 + 32 in 3 layers,
// and the one indexer layer's keys of 64) grows by 3 x 96 + 64 values, 704
// bytes, against 3 x 4 x (64 + 32) x 2 = 2304 for full K and V; its
// indexer's score row over the context adds a little, attention's scratch
// nothing (it reads top_k = 8 rows).
TEST(FamiliesGolden, MlaCacheHoldsCompressedRowsOnly) {
    const struct {
        const char* name;
        int64_t per_position, full;
    } cases[] = {{"deepseek2-lite-F32", 288, 1920}, {"deepseek3-Q8_0", 288, 1920},
                 {"glm-dsa-F32", 704, 2304},        {"glm-dsa-Q8_0", 704, 2304}};
    for (const auto& c : cases) {
        const golden::LoadedModel m(golden::models_dir() + "/" + c.name + ".gguf");
        const double per_position = golden::state_bytes_per_position(m);
        printf("%s state bytes per position of context: %.1f\n", c.name, per_position);
        EXPECT_GE(per_position, double(c.per_position)) << c.name;
        EXPECT_LT(per_position, double(c.per_position) + 32.0) << c.name;
        StateOptions o;
        o.kv_type = GgmlType::F16;
        const auto st = m.model->new_state(o);
        EXPECT_EQ(st->kv_bytes_per_token, c.per_position) << c.name;
        EXPECT_EQ(st->full_kv_bytes_per_token, c.full) << c.name;
    }
}

// Evaluating the prompt token by token, in chunks, or with another thread
// count gives the same bits as one batch (gpt-oss: its ring wraps in chunks
// of 1 and 5).
TEST_P(Golden, BatchAndThreadsDoNotChangeBits) {
    golden::expect_batch_and_threads_do_not_change_bits(golden::load(GetParam()));
}

TEST_P(Golden, EveryLevelWithinBound) {
    const golden::Case g = golden::load(GetParam());
    golden::expect_every_level_within_bound(g, golden::tolerance(g.meta.at("type").as_string()));
}

INSTANTIATE_TEST_SUITE_P(Families, Golden, ::testing::ValuesIn(golden::runnable_models()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return golden::identifier(i.param); });

TEST(FamiliesGolden, AllTypesPresent) {
    // The README's file count per family; a missing file would silently skip.
    const std::pair<const char*, size_t> counts[] = {
        {"qwen3moe", 12}, {"gemma4", 4},  {"mixtral", 2}, {"olmoe", 2},
        {"qwen2moe", 2},  {"glm4moe", 2}, {"gpt-oss", 3}, {"qwen35moe", 2}, {"qwen3next", 2},
        {"deepseek2-lite", 2}, {"deepseek3", 2}, {"glm-dsa", 2}, {"deepseek4", 2},
    };
    for (const auto& [name, n] : counts) EXPECT_EQ(golden::family(name).size(), n) << name;
    // Families added later are checked by what is there: an F32 source,
    // and an exact/ reference beside every quantized file.
    for (const std::string& name : golden::runnable_families()) {
        if (std::find_if(std::begin(counts), std::end(counts), [&](const auto& c) { return name == c.first; }) !=
            std::end(counts)) {
            continue;
        }
        const std::vector<std::string> files = golden::family(name);
        EXPECT_NE(std::find(files.begin(), files.end(), name + "-F32"), files.end()) << name;
        for (const std::string& f : files) {
            if (f == name + "-F32") continue;
            EXPECT_FALSE(golden::exact_logits(f).empty()) << f;
        }
    }
}

// A qwen3moe Q4_K_M model in the shape of the report: 4 layers, 16 experts
// top-4, expert FFN 256, attn_k and attn_v in Q4_K (attn_v in Q6_K on the
// layers use_more_bits picks) where the golden file has Q8_0. No reference
// engine made logits for it; the AVX2 level stands in, the level the golden
// files agree with, and every level must be within the quantized bound of
// it (the matmuls give the same bits at every level; attention differs by
// rounding). Before the matmul levels took the AVX2 float steps, they were
// this far from it here (synth as of this test's writing): seeds 1, 3, 5 at
// AVX-512 3.2e-3, 4.2e-3, 1.8e-2, at scalar 1.9e-2, 8.2e-3, 1.8e-2.
TEST(Qwen3MoeLevels, Q4KAttentionModelWithinBoundAtEveryLevel) {
    if (best_simd_level() < SimdLevel::Avx2) GTEST_SKIP() << "no AVX2 on this CPU";
    golden::LevelGuard guard;
    for (uint64_t seed : {1, 3, 5}) {
        SynthSpec spec = synth_preset("tiny");
        spec.n_layer = 4;
        spec.n_expert = 16;
        spec.n_expert_used = 4;
        spec.expert_ffn = 256;
        spec.seed = seed;
        const std::string path = "/tmp/moestream-qwen3moe-test-" + std::to_string(getpid()) + "-q4k-attn.gguf";
        write_synth_model(spec, path, nullptr);
        golden::LoadedModel m(path);
        unlink(path.c_str());
        for (const char* t : {"blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.attn_q.weight"})
            ASSERT_EQ(m.file.tensor(t)->type, GgmlType::Q4_K) << t;

        std::mt19937 rng{uint32_t(seed)};
        std::vector<int32_t> tokens(48);
        for (int32_t& t : tokens) t = int32_t(rng() % uint32_t(m.model->config().n_vocab));
        const std::vector<float> avx2 = golden::prompt_logits_at(m, tokens, SimdLevel::Avx2);
        for (SimdLevel l : golden::simd_levels()) {
            const std::vector<float> logits = golden::prompt_logits_at(m, tokens, l);
            printf("seed %d %-6s relative L2 to avx2 %.3e\n", int(seed), simd_level_name(l),
                   golden::rel_l2(logits.data(), avx2.data(), avx2.size()));
            EXPECT_LE(golden::rel_l2(logits.data(), avx2.data(), avx2.size()), golden::tolerance("Q4_K"))
                << "seed " << seed << " " << simd_level_name(l);
        }
    }
}

}  // namespace
}  // namespace ms
