// gemma4 evaluates a long prompt layer by layer, as the shared decoder does:
// on the golden gemma4 files (8 experts a layer; gemma4-ple with its
// per-layer embedding rows through the same store) under a cache of 12
// slots (--cache-slots: a layer's 8 experts fit, the model's 32 do not; a
// budget's slot count moves with the process's RSS), a 200-token prompt
// in pieces of 16 needs exactly the bytes of the experts it uses, each read
// once; one forward call per 16 tokens (-b 16) reads each layer's experts
// again for every piece. The same text either way.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <map>

#include "json/json.h"
#include "run_cli.h"
#include "../golden_required.h"

using ms::Json;

namespace {

class Gemma4LongPrompt : public ::testing::TestWithParam<std::string> {};

TEST_P(Gemma4LongPrompt, ReadsEachExpertOnce) {
    const std::string model = std::string(MOESTREAM_GOLDEN_DIR) + "/models/" + GetParam() + ".gguf";
    const std::string report = "/tmp/moestream-g4long-" + std::to_string(getpid()) + ".report.json";
    CliResult ins = run_cli("inspect --json " + model, false);
    ASSERT_EQ(ins.rc, 0) << ins.out;
    const Json inspect = Json::parse(ins.out);
    std::map<int64_t, double> expert_bytes;
    for (const Json& l : inspect.at("experts").at("layers").as_array())
        expert_bytes[l.at("layer").as_int()] = double(l.at("bytes_per_expert").as_int());

    double needed[2] = {0, 0}, union_bytes = 0;
    std::string text[2];
    for (int split = 0; split < 2; split++) {
        const std::string args = "run -m " + model + " -c 512 -t 2 --cache-slots 12 --seed 3 --random-prompt 200 " +
                                 (split ? "-b 16 -ub 16" : "-ub 16");
        CliResult r = run_cli(args + " -n 0 --prefetch off --report " + report, true);
        ASSERT_EQ(r.rc, 0) << r.out;
        Json rep = Json::parse_file(report);
        std::remove(report.c_str());
        const Json& store = rep.at("store");
        EXPECT_EQ(rep.at("store_settings").at("slots").as_int(), 12);
        EXPECT_EQ(rep.at("prefill").at("prompt_splits").as_int(), split);
        for (const char* reason : {"demand", "prefetch", "prefill"})
            needed[split] += double(store.at("bytes").at(reason).at("needed").as_int());
        if (split == 0) {
            // The experts' layers only: gemma4-ple's row "layer" is counted
            // under its own reason.
            for (const Json& l : store.at("layers").as_array()) {
                auto e = expert_bytes.find(l.at("layer").as_int());
                if (e != expert_bytes.end()) union_bytes += double(l.at("unique_experts").as_int()) * e->second;
            }
        }
        CliResult g = run_cli(args + " -n 12 --temp 0", false);
        ASSERT_EQ(g.rc, 0);
        text[split] = g.out;
    }
    printf("experts needed: %.0f bytes layer by layer (union %.0f), %.0f with -b 16\n", needed[0], union_bytes,
           needed[1]);
    EXPECT_GT(union_bytes, 0);
    EXPECT_EQ(needed[0], union_bytes);
    EXPECT_GT(needed[1], 1.5 * union_bytes);
    EXPECT_FALSE(text[0].empty());
    EXPECT_EQ(text[0], text[1]);
}

INSTANTIATE_TEST_SUITE_P(Files, Gemma4LongPrompt, ::testing::Values("gemma4-Q8_0", "gemma4-ple-Q8_0"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                             std::string s = i.param;
                             for (char& ch : s)
                                 if (ch == '-') ch = '_';
                             return s;
                         });

}  // namespace
