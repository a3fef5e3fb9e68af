// `moestream tokenize` end to end: ids of golden inputs equal the reference
// engine's, the JSON form parses and agrees, and bad input is a one-line
// error with a non-zero exit.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "json/json.h"
#include "../golden_required.h"

namespace {

const std::string kBin = MOESTREAM_BINARY;
const std::string kGolden = MOESTREAM_GOLDEN_DIR;

struct Result {
    int rc;
    std::string out;  // stdout and stderr together
};

Result run(const std::string& args) {
    std::string cmd = kBin + " tokenize " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    Result r{-1, ""};
    if (!p) return r;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
    int st = pclose(p);
    r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

TEST(TokenizeCli, IdsMatchTheReference) {
    // From qwen3-vocab.gguf.inp/.out: " Hello world" -> 21927 1879.
    Result r = run("-m " + kGolden + "/tokenizer/qwen3-vocab.gguf -p ' Hello world' --ids");
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(r.out, "21927 1879\n");
    // Llama SentencePiece adds BOS (1) unless --no-bos; "Hello world" -> 15043 3186.
    r = run("-m " + kGolden + "/tokenizer/ggml-vocab-llama-spm.gguf -p 'Hello world' --ids");
    EXPECT_EQ(r.out, "1 15043 3186\n");
    r = run("-m " + kGolden + "/tokenizer/ggml-vocab-llama-spm.gguf -p 'Hello world' --ids --no-bos");
    EXPECT_EQ(r.out, "15043 3186\n");
}

TEST(TokenizeCli, SpecialTokensAndPieces) {
    const std::string m = "-m " + kGolden + "/tokenizer/qwen3-vocab.gguf ";
    Result r = run(m + "-p 'a<|im_end|>' --ids");
    EXPECT_EQ(r.out, "64 151645\n");
    r = run(m + "-p 'a<|im_end|>' --ids --no-special");
    EXPECT_EQ(r.out.find("151645"), std::string::npos) << r.out;
    r = run(m + "-p 'a<|im_end|>'");
    EXPECT_NE(r.out.find("151645  '<|im_end|>'"), std::string::npos) << r.out;
    r = run(m + "-p 'x' --json");
    ASSERT_EQ(r.rc, 0) << r.out;
    ms::Json j = ms::Json::parse(r.out);
    EXPECT_EQ(j.at("pre").as_string(), "qwen2");
    EXPECT_EQ(j.at("n_tokens").as_int(), 1);
    EXPECT_EQ(j.at("pieces")[0].as_string(), "x");
}

TEST(TokenizeCli, BadInputIsOneLineError) {
    Result r = run("-m /nonexistent.gguf -p x");
    EXPECT_EQ(r.rc, 1);
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_NE(r.out.find("/nonexistent.gguf"), std::string::npos) << r.out;
    r = run("-m " + kGolden + "/tokenizer/qwen3-vocab.gguf");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("-p TEXT"), std::string::npos) << r.out;
    r = run("--help");
    EXPECT_EQ(r.rc, 0);
    for (const char* flag : {"--model", "--prompt", "--file", "--ids", "--no-special", "--no-bos", "--json"})
        EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
}

}  // namespace
