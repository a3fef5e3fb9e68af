// `moestream quantize` end to end: the golden qwen3moe F32 file quantized to
// Q8_0 runs exactly as the reference quantizer's Q8_0 file does (the same
// logits, bit for bit); Q4_K output loads and runs; bad input is one error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "run_cli.h"
#include "../golden_required.h"

namespace {

const std::string kModels = std::string(MOESTREAM_GOLDEN_DIR) + "/models/";

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST(QuantizeCli, Q8_0RunsLikeTheReferenceFile) {
    const std::string p = "/tmp/moestream-quantize-" + std::to_string(getpid());
    CliResult q = run_cli("quantize " + kModels + "qwen3moe-F32.gguf " + p + ".gguf --type Q8_0", true);
    ASSERT_EQ(q.rc, 0) << q.out;
    const std::string args = " -t 2 -p 'The GNU General Public License is free' -n 4 -o ";
    CliResult a = run_cli("logits -m " + p + ".gguf" + args + p + ".ours", true);
    CliResult b = run_cli("logits -m " + kModels + "qwen3moe-Q8_0.gguf" + args + p + ".ref", true);
    ASSERT_EQ(a.rc, 0) << a.out;
    ASSERT_EQ(b.rc, 0) << b.out;
    EXPECT_EQ(slurp(p + ".ours.logits.f32"), slurp(p + ".ref.logits.f32"));
    EXPECT_EQ(slurp(p + ".ours.gen.f32"), slurp(p + ".ref.gen.f32"));
    EXPECT_FALSE(slurp(p + ".ours.logits.f32").empty());

    CliResult k = run_cli("quantize " + kModels + "qwen3moe-F32.gguf " + p + ".gguf --type Q4_K", true);
    ASSERT_EQ(k.rc, 0) << k.out;
    EXPECT_NE(k.out.find("Q4_K tensors"), std::string::npos) << k.out;
    CliResult r = run_cli("run -t 2 -m " + p + ".gguf -p hello -n 4 --seed 1", true);
    EXPECT_EQ(r.rc, 0) << r.out;
    for (const char* ext : {".gguf", ".ours.json", ".ours.logits.f32", ".ours.gen.f32", ".ref.json",
                            ".ref.logits.f32", ".ref.gen.f32"})
        std::remove((p + ext).c_str());
}

TEST(QuantizeCli, BadTypeIsOneError) {
    CliResult r = run_cli("quantize " + kModels + "qwen3moe-F32.gguf /tmp/never.gguf --type Q3_K", true);
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("unknown --type 'Q3_K'"), std::string::npos) << r.out;
}
