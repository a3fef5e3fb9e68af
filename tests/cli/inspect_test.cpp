// `moestream inspect` end to end on every golden file: the JSON agrees with
// the golden README's facts and with the tensor list it prints, the text form
// names the key figures, and bad input is a one-line error.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>

#include "json/json.h"
#include "run_cli.h"
#include "../golden_required.h"

using ms::Json;

namespace {

const std::string kGolden = MOESTREAM_GOLDEN_DIR;

CliResult run(const std::string& args, bool with_stderr) { return run_cli("inspect " + args, with_stderr); }

struct Facts {
    const char* file;
    const char* arch;
    int n_layer, n_embd, n_expert, n_used, ranges;
};

// From ../shared/golden/README.md.
const Facts kModels[] = {
    {"qwen3moe-F32", "qwen3moe", 3, 256, 8, 2, 3},     {"qwen3moe-F16", "qwen3moe", 3, 256, 8, 2, 3},
    {"qwen3moe-BF16", "qwen3moe", 3, 256, 8, 2, 3},    {"qwen3moe-Q8_0", "qwen3moe", 3, 256, 8, 2, 3},
    {"qwen3moe-Q6_K", "qwen3moe", 3, 256, 8, 2, 3},    {"qwen3moe-Q5_K_M", "qwen3moe", 3, 256, 8, 2, 3},
    {"qwen3moe-Q4_K_M", "qwen3moe", 3, 256, 8, 2, 3},  {"qwen3moe-Q4_0", "qwen3moe", 3, 256, 8, 2, 3},
    {"qwen3moe-Q3_K_M", "qwen3moe", 3, 256, 8, 2, 3},  {"qwen3moe-Q2_K", "qwen3moe", 3, 256, 8, 2, 3},
    {"qwen3moe-IQ4_XS", "qwen3moe", 3, 256, 8, 2, 3},  {"qwen3moe-MXFP4_MOE", "qwen3moe", 3, 256, 8, 2, 3},
    {"mixtral-F32", "llama", 3, 128, 8, 2, 3},         {"mixtral-Q8_0", "llama", 3, 128, 8, 2, 3},
    {"olmoe-F32", "olmoe", 3, 128, 8, 2, 3},           {"olmoe-Q8_0", "olmoe", 3, 128, 8, 2, 3},
    {"qwen2moe-F32", "qwen2moe", 3, 128, 8, 2, 3},     {"qwen2moe-Q8_0", "qwen2moe", 3, 128, 8, 2, 3},
    {"gpt-oss-F32", "gpt-oss", 4, 64, 8, 2, 3},        {"gpt-oss-Q8_0", "gpt-oss", 4, 64, 8, 2, 3},
    {"gpt-oss-MXFP4_MOE", "gpt-oss", 4, 64, 8, 2, 3},  {"deepseek2-lite-F32", "deepseek2", 3, 64, 8, 2, 3},
    {"deepseek2-lite-Q8_0", "deepseek2", 3, 64, 8, 2, 3}, {"deepseek3-F32", "deepseek2", 3, 64, 16, 4, 3},
    {"deepseek3-Q8_0", "deepseek2", 3, 64, 16, 4, 3},  {"gemma4-F32", "gemma4", 4, 64, 8, 4, 2},
    {"gemma4-Q8_0", "gemma4", 4, 64, 8, 4, 2},         {"gemma4-ple-F32", "gemma4", 4, 64, 8, 4, 2},
    {"gemma4-ple-Q8_0", "gemma4", 4, 64, 8, 4, 2},     {"qwen35moe-F32", "qwen35moe", 4, 64, 8, 2, 3},
    {"qwen35moe-Q8_0", "qwen35moe", 4, 64, 8, 2, 3},   {"glm4moe-F32", "glm4moe", 4, 64, 8, 2, 3},
    {"glm4moe-Q8_0", "glm4moe", 4, 64, 8, 2, 3},
};

}  // namespace

TEST(InspectCli, EveryGoldenModelAsJson) {
    for (const Facts& f : kModels) {
        SCOPED_TRACE(f.file);
        std::string path = kGolden + "/models/" + f.file + ".gguf";
        CliResult r = run(path + " --json --tensors", false);
        ASSERT_EQ(r.rc, 0) << r.out;
        Json j = Json::parse(r.out);
        EXPECT_EQ(j.at("architecture").as_string(), f.arch);
        const Json& hp = j.at("hparams");
        EXPECT_EQ(hp.at("n_layer").as_int(), f.n_layer);
        EXPECT_EQ(hp.at("n_embd").as_int(), f.n_embd);
        EXPECT_EQ(hp.at("n_expert").as_int(), f.n_expert);
        EXPECT_EQ(hp.at("n_expert_used").as_int(), f.n_used);
        EXPECT_EQ(j.at("gguf_version").as_int(), 3);
        EXPECT_EQ(uint64_t(j.at("file_bytes").as_int()), file_size(path));
        EXPECT_EQ(j.at("experts").at("ranges_per_expert").as_int(), f.ranges);

        // Class totals against the printed tensor list, summed here by name
        // (the last n_nextn blocks are the unused NextN block).
        int64_t first_nextn = hp.at("n_layer").as_int() - hp.at("n_nextn").as_int();
        uint64_t experts = 0, all = 0, params = 0;
        int64_t n = 0;
        std::set<std::string> expert_types;
        for (const Json& t : j.at("tensors").as_array()) {
            const std::string& name = t.at("name").as_string();
            uint64_t b = uint64_t(t.at("bytes").as_int());
            all += b;
            ++n;
            uint64_t p = 1;
            for (const Json& d : t.at("shape").as_array()) p *= uint64_t(d.as_int());
            params += p;
            bool nextn = name.rfind("blk." + std::to_string(first_nextn) + ".", 0) == 0;
            if (name.find("_exps.weight") != std::string::npos && !nextn) {
                experts += b;
                expert_types.insert(t.at("type").as_string());
                EXPECT_EQ(t.at("class").as_string(), "routed experts") << name;
            }
        }
        const Json& c = j.at("classes");
        EXPECT_EQ(uint64_t(c.at("experts").at("bytes").as_int()), experts);
        EXPECT_EQ(uint64_t(c.at("resident").at("bytes").as_int()) + uint64_t(c.at("experts").at("bytes").as_int()) +
                      uint64_t(c.at("embedding_rows").at("bytes").as_int()) +
                      uint64_t(c.at("unused").at("bytes").as_int()),
                  all);
        EXPECT_EQ(uint64_t(j.at("params").as_int()), params);
        EXPECT_EQ(j.at("n_tensors").as_int(), n);
        // Sized as the type the experts already have, an expert is its own size.
        const Json& as = j.at("experts").at("bytes_per_expert_as");
        if (expert_types.size() == 1 && as.contains(*expert_types.begin())) {
            EXPECT_DOUBLE_EQ(as.at(*expert_types.begin()).as_number(),
                             j.at("experts").at("bytes_per_expert_avg").as_number());
        }
        int64_t type_tensors = 0;
        for (const Json& t : j.at("types").as_array()) type_tensors += t.at("tensors").as_int();
        EXPECT_EQ(type_tensors, n);
        EXPECT_GT(j.at("memory").at("kv_bytes").as_int(), 0);
        EXPECT_GT(j.at("memory").at("ram_all").as_int(), j.at("memory").at("ram_streaming").as_int());
    }
}

TEST(InspectCli, VocabularyFiles) {
    struct V { const char* file; int64_t n_vocab; };
    for (V v : {V{"qwen3-vocab.gguf", 151669}, V{"ggml-vocab-gpt-2.gguf", 50257}, V{"ggml-vocab-llama-spm.gguf", 32000}}) {
        SCOPED_TRACE(v.file);
        CliResult r = run(kGolden + "/tokenizer/" + v.file + " --json", false);
        ASSERT_EQ(r.rc, 0) << r.out;
        Json j = Json::parse(r.out);
        EXPECT_EQ(j.at("n_tensors").as_int(), 0);
        EXPECT_EQ(j.at("tokenizer").at("n_vocab").as_int(), v.n_vocab);
        CliResult t = run(kGolden + "/tokenizer/" + v.file, true);
        EXPECT_EQ(t.rc, 0);
        EXPECT_NE(t.out.find("vocabulary-only"), std::string::npos) << t.out;
    }
}

TEST(InspectCli, TextNamesTheKeyFigures) {
    CliResult r = run(kGolden + "/models/glm4moe-Q8_0.gguf", true);
    ASSERT_EQ(r.rc, 0) << r.out;
    for (const char* want : {"architecture    glm4moe", "layers          4 (first 1 dense) (last 1 NextN/MTP, run only with --draft mtp)",
                             "8 routed, 2 used per token, expert FFN 64", "routed experts", "embedding rows",
                             "NextN (read only with --draft mtp)", "3 byte ranges per expert", "Q8_0", "KV cache"})
        EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
}

TEST(InspectCli, BadInputIsAOneLineError) {
    for (std::string bad : {kGolden + "/README.md", kGolden + "/nonexistent.gguf"}) {
        CliResult r = run(bad, true);
        EXPECT_EQ(r.rc, 1) << r.out;
        EXPECT_EQ(r.out.rfind("moestream inspect: error: ", 0), 0u) << r.out;
        EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
        EXPECT_NE(r.out.find(bad), std::string::npos) << r.out;
    }
    EXPECT_NE(run("", true).rc, 0);
    EXPECT_NE(run(kGolden + "/models/qwen3moe-F32.gguf --ctx -5", true).rc, 0);
}
