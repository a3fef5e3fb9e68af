// The store through the command line: `moestream logits` (prompt logits and
// greedy steps, the golden format) writes the same bytes for every --io x
// --layout x --mem x -t combination as with every expert cached. The
// smallest budget here leaves a cache of a few slots (the process's own RSS,
// which --mem counts, varies by a few hundred KiB between runs); the exact
// minimum, one token's experts, is covered by streaming_test.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "json/json.h"
#include "test_util.h"
#include "../golden_required.h"

namespace ms {
namespace {

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

int sh(const std::string& cmd) {
    int st = system(cmd.c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(LogitsCli, SameBytesForEveryEngineLayoutBudgetAndThreads) {
    test::TempDir dir;
    const std::string bin = MOESTREAM_BINARY;
    const std::string model = dir.file("m.gguf");
    test::copy_file(test::golden_model("qwen3moe-Q4_K_M"), model);
    ASSERT_EQ(sh(bin + " pack " + model + " >/dev/null 2>&1"), 0);
    const std::string common = " -m " + model + " -p 'The GNU General Public License is a free license' -n 6 -c 64";

    // Reference: no budget (every expert gets a slot).
    const std::string ref = dir.file("ref");
    ASSERT_EQ(sh(bin + " logits" + common + " -t 1 -o " + ref + " --report " + ref + ".report >/dev/null 2>&1"), 0);
    Json rep = Json::parse_file(ref + ".report");
    const Json& st = rep.at("store_settings");
    ASSERT_EQ(st.at("slots").as_int(), st.at("experts").as_int());
    // The smallest budget: fixed memory + 2 slots (top-2) + 1 MiB for the
    // process's run-to-run variation.
    const int64_t slot = st.at("slot_bytes").as_int();
    const int64_t fixed = st.at("resident_bytes").as_int() + st.at("kv_and_scratch_bytes").as_int() +
                          st.at("process_bytes").as_int();
    const int64_t min_mem = fixed + 2 * slot + (1 << 20);
    const std::string want_logits = slurp(ref + ".logits.f32"), want_gen = slurp(ref + ".gen.f32");
    const Json want_json = Json::parse_file(ref + ".json");
    ASSERT_FALSE(want_logits.empty());
    ASSERT_FALSE(want_gen.empty());

    const bool small = getenv("MOESTREAM_SANITIZED") != nullptr;
    int n = 0;
    for (const char* io : {"uring", "pread", "buffered", "mmap"})
        for (const char* layout : {"gguf", "packed"})
            for (int64_t mem : {min_mem, min_mem + 5 * slot})  // 2 and 7 slots
                for (int threads : {1, 2}) {
                    if (small && (threads == 2 || mem != min_mem)) continue;
                    SCOPED_TRACE(std::string(io) + " " + layout + " mem " + std::to_string(mem) + " t " +
                                 std::to_string(threads));
                    const std::string out = dir.file("run" + std::to_string(n++));
                    // The process's own RSS moves between runs by up to a
                    // MiB (more under sanitizers), as much as 7 slots here: a
                    // budget it refuses is raised by a quarter MiB at a time,
                    // up to 3 MiB.
                    int rc = 1;
                    for (int64_t m = mem; m <= mem + (3 << 20); m += 1 << 18) {
                        rc = sh(bin + " logits" + common + " -t " + std::to_string(threads) + " --io " + io +
                                " --io-threads 3 --io-split 2 --layout " + layout + " --mem " + std::to_string(m) +
                                " -o " + out + " --report " + out + ".report >/dev/null 2>" + out + ".err");
                        if (rc == 0 || slurp(out + ".err").find("memory budget") == std::string::npos)
                            break;
                    }
                    ASSERT_EQ(rc, 0) << slurp(out + ".err");
                    Json r = Json::parse_file(out + ".report");
                    EXPECT_EQ(r.at("store_settings").at("layout").as_string(), layout);
                    if (mem == min_mem) {
                        // A cache of a few slots, fewer than the experts.
                        EXPECT_LT(r.at("store_settings").at("slots").as_int(), st.at("experts").as_int());
                        EXPECT_GT(r.at("store").at("evictions").as_int(), 0);
                    }
                    EXPECT_TRUE(slurp(out + ".logits.f32") == want_logits);
                    EXPECT_TRUE(slurp(out + ".gen.f32") == want_gen);
                    EXPECT_EQ(Json::parse_file(out + ".json").at("greedy_tokens").dump(),
                              want_json.at("greedy_tokens").dump());
                }
}

}  // namespace
}  // namespace ms
