// `moestream bench gemm` end to end: a quick run exits 0 with its GPU line
// (measured, or one line saying why not) and JSON that agrees; --gpu on
// without a GPU and a bad --gpu value are one-line errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "json/json.h"
#include "run_cli.h"

using ms::Json;

namespace {

std::string read_file(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// The one run of the quick bench this file makes (a few seconds), shared.
struct QuickRun {
    CliResult cli;
    Json json;
};

const QuickRun& quick_run() {
    static QuickRun q = [] {
        QuickRun r;
        std::string path = "/tmp/moestream-cli-bench-gemm-" + std::to_string(getpid()) + ".json";
        r.cli = run_cli("bench gemm --quick --duration 1 --sample 0.5 --m 16 --json " + path, false);
        r.json = Json::parse(read_file(path));
        unlink(path.c_str());
        return r;
    }();
    return q;
}

}  // namespace

TEST(BenchGemmCli, QuickRunReportsTheGpuPartConsistently) {
    const QuickRun& q = quick_run();
    ASSERT_EQ(q.cli.rc, 0) << q.cli.out;
    EXPECT_EQ(q.json.at("command").as_string(), "bench gemm");
    EXPECT_EQ(q.json.at("results").size(), 2u);  // f32 and q8_0 at M=16
    EXPECT_EQ(q.json.at("settings").at("gpu").as_string(), "auto");
    const Json& g = q.json.at("gpu");
    if (g.at("available").as_bool()) {
        std::string name = g.at("device").at("name").as_string();
        EXPECT_NE(q.cli.out.find("\nGPU (cuBLAS): " + name + ", "), std::string::npos) << q.cli.out;
        EXPECT_EQ(g.at("results").size(), 5u);  // every GPU type at M=16
        EXPECT_GE(g.at("sustained").at("samples").size(), 2u);
    } else {
        std::string line = "GPU (cuBLAS): not measured: " + g.at("reason").as_string() + "\n";
        EXPECT_NE(q.cli.out.find(line), std::string::npos) << q.cli.out;
        EXPECT_EQ(q.cli.out.find("GPU (cuBLAS)"), q.cli.out.rfind("GPU (cuBLAS)")) << "one GPU line only";
    }
}

TEST(BenchGemmCli, GpuOnWithoutAGpuIsAnError) {
    const QuickRun& q = quick_run();
    if (q.json.at("gpu").at("available").as_bool()) GTEST_SKIP() << "a GPU is present";
    CliResult r = run_cli("bench gemm --quick --duration 0 --gpu on", true);
    EXPECT_NE(r.rc, 0);
    EXPECT_EQ(r.out, "moestream bench: error: bench gemm --gpu on: " + q.json.at("gpu").at("reason").as_string() + "\n");
}

TEST(BenchGemmCli, BadGpuFlagsAreOneLineErrors) {
    CliResult r = run_cli("bench gemm --quick --gpu maybe", true);
    EXPECT_NE(r.rc, 0);
    EXPECT_EQ(r.out, "moestream bench: error: --gpu: expected on, off or auto, got 'maybe'\n");
    r = run_cli("bench gemm --quick --gpu-types bf16,fp8", true);
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("--gpu-types: unknown type 'fp8'"), std::string::npos) << r.out;
}

// MOESTREAM_SIMD caps the kernel level (to reproduce a CPU without AVX-512):
// the level the run reports follows it, never rising above what the CPU has.
TEST(BenchGemmCli, SimdEnvironmentCapsTheLevel) {
    const std::string json = "/tmp/moestream-simd-env-" + std::to_string(getpid()) + ".json";
    auto level_with = [&](const std::string& env) {
        const std::string cmd = "env -u MOESTREAM_SIMD " + env + " " + MOESTREAM_BINARY + " bench gemm --quick --gpu off --duration 0 --m 4 --json " +
                                json + " >/dev/null 2>&1";
        EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
        const std::string level = ms::Json::parse_file(json).at("settings").at("simd_level").as_string();
        std::remove(json.c_str());
        return level;
    };
    const std::string best = level_with("");
    EXPECT_EQ(level_with("MOESTREAM_SIMD=scalar"), "scalar");
    EXPECT_EQ(level_with("MOESTREAM_SIMD=avx2"), best == "scalar" ? "scalar" : "avx2");
    EXPECT_EQ(level_with("MOESTREAM_SIMD=something-else"), best);
}
