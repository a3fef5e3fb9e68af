// gemma4's per-layer embeddings are sparse rows read through the store: under
// a budget of a few slots, `logits` on the golden gemma4-ple file reads them
// from the drive (counted under their own reason, outside the resident
// weights) and writes the same bits as the run that holds everything.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "json/json.h"
#include "run_cli.h"
#include "../golden_required.h"

namespace {

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

TEST(Gemma4Rows, StreamedUnderSmallBudgetEqualsResident) {
    const std::string golden = MOESTREAM_GOLDEN_DIR;
    const std::string model = golden + "/models/gemma4-ple-Q8_0.gguf";
    const std::string prompt = ms::Json::parse_file(golden + "/models/gemma4-ple-Q8_0.json").at("prompt").as_string();
    const std::string tmp = "/tmp/moestream-g4rows-" + std::to_string(getpid());
    const std::string args = "logits -m " + model + " -p '" + prompt + "' -n 8 -t 2 --layout gguf";

    CliResult all = run_cli(args + " -o " + tmp + "-all --report " + tmp + "-all.report.json", true);
    ASSERT_EQ(all.rc, 0) << all.out;
    CliResult streamed =
        run_streamed(args + " -o " + tmp + "-st", model, 6, tmp + "-probe.json", tmp + "-st.report.json");
    ASSERT_EQ(streamed.rc, 0) << streamed.out;

    const ms::Json report = ms::Json::parse_file(tmp + "-st.report.json");
    const ms::Json& rows = report.at("store").at("bytes").at("rows");
    EXPECT_GT(rows.at("needed").as_int(), 0);
    EXPECT_GT(rows.at("requests").as_int(), 0);
    EXPECT_GT(report.at("store").at("evictions").as_int(), 0);
    // One read per row; a row is the token's 4 layers x 32 values in Q8_0
    // (golden README §gemma4-ple): 4 blocks of 34 bytes.
    EXPECT_EQ(rows.at("needed").as_int(), rows.at("requests").as_int() * 136);
    // The table is not among the resident weights either way.
    EXPECT_EQ(report.at("store_settings").at("resident_bytes").as_int(),
              ms::Json::parse_file(tmp + "-all.report.json").at("store_settings").at("resident_bytes").as_int());

    for (const char* ext : {".logits.f32", ".gen.f32"}) {
        const std::string a = slurp(tmp + "-all" + ext), b = slurp(tmp + "-st" + ext);
        EXPECT_FALSE(a.empty()) << ext;
        EXPECT_TRUE(a == b) << ext << " differs between the streamed and the resident run";
    }
    for (const std::string p : {"-all", "-st"})
        for (const char* ext : {".logits.f32", ".gen.f32", ".json"}) std::remove((tmp + p + ext).c_str());
    std::remove((tmp + "-all.report.json").c_str());
    std::remove((tmp + "-st.report.json").c_str());
}

}  // namespace
