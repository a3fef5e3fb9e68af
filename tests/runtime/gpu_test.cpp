// The CUDA forward pass (--gpu) on the golden qwen3moe files: prompt logits
// against the reference's float32-activation (exact/) logits within 1e-3
// and its greedy tokens; and experts streamed through a VRAM cache of a few
// slots give the same logits, bit for bit, as every expert resident. Skips,
// saying why, without a CUDA device.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "../model/golden.h"
#include "gpu/gpu.h"
#include "runtime/session.h"

namespace ms {
namespace {

std::unique_ptr<Session> open_gpu(const std::string& gguf, uint64_t gpu_mem) {
    SessionOptions o;
    o.model_path = gguf;
    o.n_ctx = 64;
    o.kv_type = GgmlType::F32;
    o.n_threads = 2;
    o.sampling.temp = 0;
    o.gpu = "auto";
    o.gpu_mem = gpu_mem;
    return Session::open(o);
}

class GpuGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuGolden, ExactLogitsAndGreedyTokens) {
    std::string why;
    if (!gpu::available(&why)) GTEST_SKIP() << why;
    const std::string name = "qwen3moe-" + GetParam();
    const std::string base = golden::models_dir() + "/" + name;
    if (!std::filesystem::exists(base + ".gguf")) GTEST_SKIP() << base << ".gguf is not here";
    const golden::Case g = golden::load(name);
    // Float32 activations: the exact/ run is the reference (the F32 file's own).
    std::vector<float> ref = golden::exact_logits(name);
    std::vector<int32_t> greedy = g.greedy;
    const bool exact = !ref.empty();
    if (!exact) {
        ref = g.logits;
    } else {
        greedy = golden::ints(Json::parse_file(golden::models_dir() + "/exact/" + name + ".json").at("greedy_tokens"));
    }
    auto s = open_gpu(g.gguf, 0);
    ASSERT_EQ(s->backend().rfind("GPU", 0), 0u) << s->backend();
    const int64_t V = g.n_vocab;
    std::vector<float> logits(g.prompt.size() * size_t(V));
    s->prefill_all(g.prompt, logits.data());
    const double err = golden::rel_l2(logits.data(), ref.data(), logits.size());
    printf("%s on the GPU: relative L2 of prompt logits vs %s = %.3g\n", name.c_str(),
           exact ? "exact/" : "its own logits", err);
    EXPECT_LE(err, 1e-3);

    std::vector<int32_t> out;
    s->generate(int(greedy.size()), [&](int32_t t) {
        out.push_back(t);
        return true;
    });
    EXPECT_EQ(out, greedy);
}

INSTANTIATE_TEST_SUITE_P(Types, GpuGolden, ::testing::Values("F32", "F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M"));

TEST(GpuStreaming, FewVramSlotsMatchResidentBitForBit) {
    std::string why;
    if (!gpu::available(&why)) GTEST_SKIP() << why;
    const std::string gguf = golden::models_dir() + "/qwen3moe-Q4_K_M.gguf";
    if (!std::filesystem::exists(gguf)) GTEST_SKIP() << gguf << " is not here";
    const golden::Case g = golden::load("qwen3moe-Q4_K_M");
    const int64_t V = g.n_vocab;
    std::vector<std::vector<float>> logits;
    std::vector<std::vector<int32_t>> text;
    for (uint64_t gpu_mem : {uint64_t(0), uint64_t(512) << 10}) {  // every expert; about 4 of the 24
        auto s = open_gpu(g.gguf, gpu_mem);
        logits.emplace_back(g.prompt.size() * size_t(V));
        s->prefill_all(g.prompt, logits.back().data());
        text.emplace_back();
        s->generate(16, [&](int32_t t) {
            text.back().push_back(t);
            return true;
        });
    }
    EXPECT_EQ(memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0);
    EXPECT_EQ(text[0], text[1]);
}

}  // namespace
}  // namespace ms
