// The shipped demo model (models/, made by scripts/demo/) against the
// PyTorch model it was exported from: the same prompt tokens, the same
// greedy continuation, prompt logits within the quantization's error, and
// held-out perplexity within 1 % of PyTorch's float32 value.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "../model/golden.h"
#include "json/json.h"
#include "run_cli.h"

using ms::Json;

namespace {

const std::string kModels = std::string(MOESTREAM_SOURCE_DIR) + "/models/";

}  // namespace

TEST(DemoModel, LogitsMatchPyTorch) {
    const Json ref = Json::parse_file(kModels + "demo-reference.json");
    const std::vector<int32_t> greedy = ms::golden::ints(ref.at("greedy_tokens"));
    const std::string prefix = "/tmp/moestream-demo-" + std::to_string(getpid());
    CliResult r = run_cli("logits -t 2 -m " + kModels + "demo-Q8_0.gguf -p '" + ref.at("prompt").as_string() +
                              "' -o " + prefix + " -n " + std::to_string(greedy.size()),
                          true);
    ASSERT_EQ(r.rc, 0) << r.out;
    const Json ours = Json::parse_file(prefix + ".json");
    const std::vector<float> logits = ms::golden::read_f32(prefix + ".logits.f32");
    for (const char* ext : {".json", ".logits.f32", ".gen.f32"}) std::remove((prefix + ext).c_str());
    EXPECT_EQ(ms::golden::ints(ours.at("prompt_tokens")), ms::golden::ints(ref.at("prompt_tokens")));
    EXPECT_EQ(ms::golden::ints(ours.at("greedy_tokens")), greedy);
    const std::vector<float> want = ms::golden::read_f32(kModels + "demo-reference.logits.f32");
    ASSERT_EQ(logits.size(), want.size());
    // Q8_0 weights against float32 ones; a router choice that flips moves a
    // position's logits by several percent (the golden README's qwen3moe
    // Q8_0 file is 0.094 from its F32 one). Measured here: 0.035.
    EXPECT_LT(ms::golden::rel_l2(logits.data(), want.data(), want.size()), 0.05);
}

TEST(DemoModel, HeldOutPerplexityMatchesPyTorch) {
    const Json train = Json::parse_file(kModels + "demo-train.json");
    CliResult r = run_cli("perplexity --json -t 2 -c 128 -m " + kModels + "demo-Q8_0.gguf -f " + kModels +
                              "demo-heldout-sample.txt",
                          false);
    ASSERT_EQ(r.rc, 0) << r.out;
    const Json j = Json::parse(r.out);
    EXPECT_EQ(j.at("tokens_scored").as_int(), train.at("sample_tokens_scored").as_int());
    const double want = train.at("sample_ppl_ctx128").as_number();
    EXPECT_NEAR(j.at("perplexity").as_number(), want, 0.01 * want);
}
