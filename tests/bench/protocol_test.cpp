// bench protocol: sample summaries, and a whole protocol against a stand-in
// `moestream` (a shell script that sleeps, then writes a report of known
// figures) checking the plan (warm-up first, fresh run per case), the
// sampling, the files written and the report's figures.
#include "bench/protocol.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/table.h"
#include "gguf/gguf.h"

namespace fs = std::filesystem;

namespace {

TEST(ProtocolSummary, AveragesSkipMissingDeviceFigures) {
    ms::ProtocolCaseResult r;
    auto sample = [](double t, double mb, double iops, double idle) {
        ms::ProtocolSample s;
        s.t = t, s.mb_per_s = mb, s.iops = iops, s.cpu_idle = idle;
        return s;
    };
    r.samples = {sample(1, 100, 10, 0.5), sample(2, 300, 30, 0.7), sample(3, NAN, NAN, 0.9)};
    ms::summarize_samples(&r);
    EXPECT_DOUBLE_EQ(r.avg_mb_s, 200.0);
    EXPECT_DOUBLE_EQ(r.min_mb_s, 100.0);
    EXPECT_DOUBLE_EQ(r.max_mb_s, 300.0);
    EXPECT_DOUBLE_EQ(r.avg_iops, 20.0);
    EXPECT_NEAR(r.avg_idle, 0.7, 1e-12);  // idle is known for every sample
    ms::ProtocolCaseResult empty;
    ms::summarize_samples(&empty);
    EXPECT_TRUE(std::isnan(empty.avg_mb_s));
    EXPECT_TRUE(std::isnan(empty.avg_idle));
}

// Records its arguments, sleeps 0.45 s, then reports 20 prompt tokens in
// 0.5 s and -n tokens in 2 s; `tokenize` counts words (+1 for BOS).
const char* kFake = R"(#!/bin/sh
if [ "$1 $2" = "run --help" ]; then echo "--ignore-eos"; exit 0; fi
if [ "$1" = "tokenize" ]; then echo 1 $(cat "$5"); exit 0; fi
echo "$@" >> "$(dirname "$0")/calls.txt"
report=""; g=0
while [ $# -gt 0 ]; do
  case "$1" in
    --report) report="$2"; shift;;
    -n) g="$2"; shift;;
  esac
  shift
done
sleep 0.45
printf '{"prefill":{"tokens":20,"seconds":0.5},"decode":{"tokens":%d,"seconds":2.0},"store":{"hit_rate":0.5},"time_split":{"io_wait":0.25},"peak_rss_bytes":2097152}\n' "$g" > "$report"
)";

TEST(Protocol, RunsWarmupThenEachCaseInAFreshProcess) {
    fs::path dir = fs::current_path() / ("protocol_test_" + std::to_string(getpid()));
    fs::create_directories(dir);
    std::string bin = (dir / "moestream").string();
    std::ofstream(bin) << kFake;
    chmod(bin.c_str(), 0755);
    std::string model = (dir / "m.gguf").string();
    {
        ms::GgufWriter w(model);
        w.set_string("general.architecture", "qwen3moe");
        w.add_tensor("t", ms::GgmlType::F32, {1024});
        w.begin_data();
        std::vector<float> z(1024);
        w.write_tensor_data(z.data(), z.size() * 4);
        w.finish();
    }
    std::ofstream(dir / "a.txt") << "one two three";
    std::ofstream(dir / "b.txt") << "one two three four five six seven";

    ms::ProtocolOptions o;
    o.binary = bin;
    o.model = model;
    o.cases = {{"a", (dir / "a.txt").string()}, {"b", (dir / "b.txt").string(), 7}};  // b: its own seed
    o.n_gen = 8;
    o.seed = 5;
    o.interval_s = 0.1;
    o.baseline_s = 0.2;
    o.out_dir = (dir / "out").string();
    o.scripts_dir = std::string(MOESTREAM_SOURCE_DIR) + "/scripts";
    ms::ProtocolReport r = ms::run_protocol(o);

    ASSERT_EQ(r.cases.size(), 3u);
    EXPECT_EQ(r.cases[0].name, "warmup");
    EXPECT_EQ(r.cases[0].prompt_file, o.cases[0].prompt_file);
    EXPECT_EQ(r.baseline.size(), 2u);
    for (const ms::ProtocolCaseResult& c : r.cases) {
        ASSERT_TRUE(c.ok) << c.error;
        EXPECT_GE(c.samples.size(), 2u);  // ~0.45 s at 0.1 s intervals
        EXPECT_EQ(c.run.decode_tokens, 8);
        EXPECT_DOUBLE_EQ(c.run.hit_rate, 0.5);
        EXPECT_EQ(c.peak_rss_bytes, 2097152u);
        for (size_t i = 1; i < c.samples.size(); ++i) EXPECT_GT(c.samples[i].t, c.samples[i - 1].t);
    }
    // One process per case with the prompt file, its seed, -n, --ignore-eos and a
    // context sized to the longest prompt (8 tokens) + 8 + 64, rounded to 512.
    std::ifstream calls(dir / "calls.txt");
    std::vector<std::string> lines;
    for (std::string l; std::getline(calls, l);) lines.push_back(l);
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_NE(lines[2].find("-f " + o.cases[1].prompt_file), std::string::npos) << lines[2];
    EXPECT_NE(lines[1].find("-n 8 --ignore-eos --seed 5"), std::string::npos) << lines[1];
    EXPECT_NE(lines[2].find("-n 8 --ignore-eos --seed 7"), std::string::npos) << lines[2];
    EXPECT_NE(lines[2].find("-c 512"), std::string::npos) << lines[2];

    EXPECT_TRUE(fs::exists(dir / "out" / "samples.tsv"));
    EXPECT_TRUE(fs::exists(dir / "out" / "b.report.json"));
    // 0.25 s of I/O wait over 28 processed tokens.
    std::ifstream split(dir / "out" / "split.tsv");
    std::stringstream ss;
    ss << split.rdbuf();
    EXPECT_NE(ss.str().find(ms::strf("%.3f", 0.25 * 1e3 / 28)), std::string::npos) << ss.str();
    EXPECT_NE(r.markdown.find("| b |"), std::string::npos);
    EXPECT_NE(r.markdown.find("## Phases"), std::string::npos);
    EXPECT_NE(r.markdown.find("idle baseline"), std::string::npos);
    ms::Json j = ms::Json::parse(r.json.dump());
    EXPECT_EQ(j.at("cases").size(), 3u);
    EXPECT_DOUBLE_EQ(j.at("cases")[1].at("decode_tps").as_number(), 4.0);
    if (fs::exists("/usr/bin/gnuplot")) {
        EXPECT_EQ(r.charts.size(), 2u) << r.chart_note;
        for (const std::string& c : r.charts) EXPECT_GT(fs::file_size(c), 1000u);
    }
    fs::remove_all(dir);
}

}  // namespace
