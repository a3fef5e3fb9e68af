// `moestream version` / `--version`: the version is git's description of
// the tree the binary was built from (asked of git here, independently of
// the build's script), the SIMD level it reports is the one it runs (capped
// through MOESTREAM_SIMD), the GPU line never carries CUDA's raw message,
// and the same object is in the --report of a run and in bench's JSON.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "run_cli.h"

namespace {

std::string strip_dirty(std::string v) {
    const std::string d = "-dirty";
    if (v.size() > d.size() && v.compare(v.size() - d.size(), d.size(), d) == 0) v.resize(v.size() - d.size());
    return v;
}

ms::Json version_json(const std::string& env = "") {
    const CliResult r = run_shell(env + std::string(MOESTREAM_BINARY) + " version --json");
    EXPECT_EQ(r.rc, 0);
    return ms::Json::parse(r.out);
}

}  // namespace

TEST(Version, IsGitDescribeOfTheSourceTree) {
    const ms::Json b = version_json();
    const std::string v = b.at("version").as_string();
    ASSERT_FALSE(v.empty());
    if (!std::filesystem::exists(std::string(MOESTREAM_SOURCE_DIR) + "/.git")) {
        GTEST_SKIP() << "no .git: the binary says the project version, " << v;
    }
    const CliResult git = run_shell("git -C " + std::string(MOESTREAM_SOURCE_DIR) +
                                    " describe --tags --always --dirty 2>/dev/null");
    if (git.rc != 0) GTEST_SKIP() << "git describe fails here";
    std::string described = git.out.substr(0, git.out.find('\n'));
    // The commit (and tag) must match; whether the tree is dirty can change
    // between the build and this test (an edit after building).
    EXPECT_EQ(strip_dirty(v), strip_dirty(described)) << "rebuild: the binary is not of this commit";
}

TEST(Version, TextAndFlagAgreeWithTheJson) {
    const CliResult text = run_cli("version", false);
    ASSERT_EQ(text.rc, 0);
    const CliResult flag = run_cli("--version", false);
    ASSERT_EQ(flag.rc, 0);
    EXPECT_EQ(text.out, flag.out);
    const ms::Json b = version_json();
    EXPECT_EQ(text.out.rfind("moestream " + b.at("version").as_string() + "\n", 0), 0u) << text.out;
    EXPECT_NE(text.out.find(b.at("build_type").as_string()), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("chosen: " + b.at("simd").at("active").as_string()), std::string::npos) << text.out;
    const ms::Json& g = b.at("gpu");
    EXPECT_NE(text.out.find(g.at("found").as_bool() ? g.at("device").as_string() : "none (" + g.at("reason").as_string() + ")"),
              std::string::npos)
        << text.out;
    const CliResult help = run_cli("--help", false);
    EXPECT_NE(help.out.find("\n  version "), std::string::npos) << help.out;
}

TEST(Version, ReportsTheSimdLevelItRuns) {
    const ms::Json b = version_json();
    const ms::Json& simd = b.at("simd");
    std::vector<std::string> compiled;
    for (const ms::Json& l : simd.at("compiled").as_array()) compiled.push_back(l.as_string());
    ASSERT_FALSE(compiled.empty());
    EXPECT_EQ(compiled[0], "scalar");
    EXPECT_NE(std::find(compiled.begin(), compiled.end(), simd.at("active").as_string()), compiled.end());
    EXPECT_EQ(simd.at("active").as_string(), simd.at("cpu_best").as_string());
    // The cap lowers what is chosen, so the object reports the running level,
    // not one fixed at build time.
    const ms::Json capped = version_json("MOESTREAM_SIMD=scalar ");
    EXPECT_EQ(capped.at("simd").at("active").as_string(), "scalar");
    EXPECT_EQ(capped.at("simd").at("cpu_best").as_string(), "scalar");
}

TEST(Version, GpuReasonIsPlainWords) {
    const ms::Json b = version_json();
    const ms::Json& g = b.at("gpu");
    if (g.at("found").as_bool()) GTEST_SKIP() << "a GPU is here: " << g.at("device").as_string();
    const std::string why = g.at("reason").as_string();
    if (!b.at("cuda").at("compiled").as_bool()) {
        EXPECT_EQ(why, "built without CUDA");
        return;
    }
    EXPECT_EQ(why.find("insufficient"), std::string::npos) << why;
    EXPECT_TRUE(why == "no NVIDIA driver found" || why == "no NVIDIA GPU found" ||
                why.rfind("the NVIDIA driver supports CUDA ", 0) == 0)
        << why;
    // A run asked to use the GPU says the same on its backend line.
    const CliResult run = run_cli("run -m " + std::string(MOESTREAM_SOURCE_DIR) +
                                      "/models/demo-Q8_0.gguf -p hi -n 1 -c 64 --gpu auto",
                                  true);
    ASSERT_EQ(run.rc, 0) << run.out;
    EXPECT_NE(run.out.find("backend: CPU (" + why + ")\n"), std::string::npos) << run.out;
}

TEST(Version, EveryReportCarriesTheBuild) {
    const ms::Json b = version_json();
    const std::string dir = ::testing::TempDir();
    const std::string report = dir + "/version_test_run.json";
    const CliResult run = run_cli("run -m " + std::string(MOESTREAM_SOURCE_DIR) +
                                      "/models/demo-Q8_0.gguf -p hi -n 2 -c 64 --report " + report,
                                  true);
    ASSERT_EQ(run.rc, 0) << run.out;
    EXPECT_EQ(ms::Json::parse_file(report).at("build").dump(), b.dump());
    std::remove(report.c_str());
    const std::string gemm = dir + "/version_test_gemm.json";
    const CliResult bench = run_cli("bench gemm --types q8_0 --m 8 --k 256 --n 256 --min-seconds 0.01 --duration 0 --mem-read 0 --gpu off --json " + gemm, true);
    ASSERT_EQ(bench.rc, 0) << bench.out;
    EXPECT_EQ(ms::Json::parse_file(gemm).at("build").dump(), b.dump());
    std::remove(gemm.c_str());
    const CliResult inspect = run_cli("inspect --json " + std::string(MOESTREAM_SOURCE_DIR) + "/models/demo-Q8_0.gguf", false);
    ASSERT_EQ(inspect.rc, 0);
    EXPECT_EQ(ms::Json::parse(inspect.out).at("build").dump(), b.dump());
}

// A run with --gpu off does not load the NVIDIA driver for its report (on a
// GPU machine that would add to the peak RSS the report states): the build
// object is the same but for gpu, which says it was not probed.
TEST(Version, GpuOffRunDoesNotProbeTheGpu) {
    ms::Json b = version_json();
    const std::string report = ::testing::TempDir() + "/version_test_gpu_off.json";
    const CliResult run = run_cli("run -m " + std::string(MOESTREAM_SOURCE_DIR) +
                                      "/models/demo-Q8_0.gguf -p hi -n 2 -c 64 --gpu off --report " + report,
                                  true);
    ASSERT_EQ(run.rc, 0) << run.out;
    const ms::Json got = ms::Json::parse_file(report).at("build");
    EXPECT_FALSE(got.at("gpu").at("probed").as_bool());
    EXPECT_EQ(got.at("version").dump(), b.at("version").dump());
    EXPECT_EQ(got.at("simd").dump(), b.at("simd").dump());
    EXPECT_EQ(got.at("cuda").dump(), b.at("cuda").dump());
    std::remove(report.c_str());
}
