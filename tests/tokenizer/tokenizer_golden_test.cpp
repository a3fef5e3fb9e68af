// Tokenizers against the reference engine's output: every test vector of
// golden/tokenizer (qwen3 byte-level BPE, GPT-2, llama SentencePiece) and the
// prompt tokens of every golden model (one per pre-tokenizer family and the
// gemma4 tokenizer), plus decode(encode(s)) == s for all of them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "json/json.h"
#include "tokenizer/tokenizer.h"
#include "../golden_required.h"

namespace fs = std::filesystem;
using namespace ms;

namespace {

const std::string kGolden = MOESTREAM_GOLDEN_DIR;

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// X.gguf.inp: inputs separated by lines holding only __ggml_vocab_test__.
std::vector<std::string> read_inputs(const std::string& path) {
    const std::string text = read_file(path), sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> out;
    size_t at = 0;
    for (size_t next; (next = text.find(sep, at)) != std::string::npos; at = next + sep.size())
        out.push_back(text.substr(at, next - at));
    return out;
}

// X.gguf.out: one line of space-separated ids per input.
std::vector<std::vector<int32_t>> read_outputs(const std::string& path) {
    std::istringstream in(read_file(path));
    std::vector<std::vector<int32_t>> out;
    for (std::string line; std::getline(in, line);) {
        std::istringstream ls(line);
        std::vector<int32_t> ids;
        for (int32_t id; ls >> id;) ids.push_back(id);
        out.push_back(ids);
    }
    return out;
}

std::string show(const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) {
        s += ' ';
        s += std::to_string(id);
    }
    return s;
}

class VocabVectors : public testing::TestWithParam<const char*> {};

TEST_P(VocabVectors, MatchReferenceAndRoundTrip) {
    const std::string path = kGolden + "/tokenizer/" + GetParam();
    Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(path));
    auto inputs = read_inputs(path + ".inp");
    auto expected = read_outputs(path + ".out");
    ASSERT_GT(inputs.size(), 40u);
    ASSERT_EQ(inputs.size(), expected.size());
    for (size_t i = 0; i < inputs.size(); i++) {
        std::vector<int32_t> ids = tok.encode(inputs[i], false, true);
        EXPECT_EQ(show(ids), show(expected[i])) << "input " << i << ": '" << inputs[i] << "'";
        EXPECT_EQ(tok.decode(ids), inputs[i]) << "input " << i;
        // Special parsing changes nothing here: the inputs hold no special tokens.
        EXPECT_EQ(tok.encode(inputs[i], false, false), ids) << "input " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Golden, VocabVectors,
                         testing::Values("qwen3-vocab.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"));

TEST(GoldenModels, PromptTokensMatchEveryModel) {
    int n = 0;
    for (const auto& e : fs::directory_iterator(kGolden + "/models")) {
        if (e.path().extension() != ".json") continue;
        Json ref = Json::parse_file(e.path().string());
        const std::string gguf = fs::path(e.path()).replace_extension(".gguf").string();
        SCOPED_TRACE(gguf);
        Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(gguf));
        EXPECT_EQ(tok.n_vocab(), size_t(ref.at("n_vocab").as_int()));
        std::vector<int32_t> want;
        for (const Json& v : ref.at("prompt_tokens").as_array()) want.push_back(int32_t(v.as_int()));
        const std::string& prompt = ref.at("prompt").as_string();
        std::vector<int32_t> got = tok.encode(prompt, true, true);
        EXPECT_EQ(show(got), show(want)) << "pre " << tok.pre();
        EXPECT_EQ(tok.decode(got), prompt);
        n++;
    }
    EXPECT_GE(n, 20);
}

}  // namespace
