// The memory contract end to end: a synthetic model more than 4x the --mem
// budget runs through `moestream run` with every I/O engine, evicting
// experts all along, and the peak RSS in its report stays within the budget
// plus 5 %. Skipped under sanitizers (their shadow memory is RSS too).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>

#include "json/json.h"
#include "test_util.h"

namespace ms {
namespace {

int sh(const std::string& cmd) {
    int st = system(cmd.c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(Rss, PeakStaysWithinBudgetOnAModelFourTimesLarger) {
    if (getenv("MOESTREAM_SANITIZED")) GTEST_SKIP() << "RSS is not meaningful under sanitizers";
    test::TempDir dir;
    const std::string bin = MOESTREAM_BINARY;
    const std::string model = dir.file("big.gguf");
    // 8 layers x 64 experts of 512x512 Q8_0 matrices: about 430 MB of experts.
    ASSERT_EQ(sh(bin + " synth --preset tiny --layers 8 --experts 64 --n-embd 512 --ffn 512 --type Q8_0 -o " +
                 model + " >/dev/null 2>&1"),
              0);
    const uint64_t budget = 100ull << 20;
    struct stat st;
    ASSERT_EQ(stat(model.c_str(), &st), 0);
    ASSERT_GE(uint64_t(st.st_size), 4 * budget);
    ASSERT_EQ(sh(bin + " pack " + model + " >/dev/null 2>&1"), 0);

    for (const char* io : {"uring", "pread", "buffered", "mmap"})
        for (const char* layout : {"gguf", "packed"}) {
            SCOPED_TRACE(std::string(io) + " " + layout);
            const std::string report = dir.file(std::string("r_") + io + "_" + layout + ".json");
            ASSERT_EQ(sh(bin + " run -m " + model + " -p 'the quick brown fox' -n 24 --temp 0 -c 256 --mem 100M --io " +
                         io + " --layout " + layout + " --report " + report + " >/dev/null 2>&1"),
                      0);
            Json r = Json::parse_file(report);
            const uint64_t peak = uint64_t(r.at("peak_rss_bytes").as_int());
            EXPECT_LE(double(peak), 1.05 * double(budget)) << "peak RSS " << peak;
            EXPECT_EQ(r.at("store_settings").at("layout").as_string(), layout);
            // The cache was really cycled: many more expert reads than slots.
            EXPECT_GT(r.at("store").at("evictions").as_int(), 100);
            EXPECT_GT(r.at("store").at("misses").as_int(), r.at("store_settings").at("slots").as_int());
        }
}

// The short version of `make soak`: 1,500 generated tokens and 40 server
// requests with RSS sampled; scripts/soak.sh fails when the peak leaves
// --mem + 5 % or RSS grows beyond what the KV cache's positions add.
TEST(Rss, NoGrowthOverAShortSoak) {
    if (getenv("MOESTREAM_SANITIZED")) GTEST_SKIP() << "RSS is not meaningful under sanitizers";
    const std::string build = std::filesystem::path(MOESTREAM_BINARY).parent_path().string();
    EXPECT_EQ(sh(std::string(MOESTREAM_SOURCE_DIR) + "/scripts/soak.sh " + build + " 1500 40"), 0);
}

}  // namespace
}  // namespace ms
