// bench model: the output writers (md, csv, json, jsonl), the statistics, and
// the harness end to end against a stand-in `moestream` (a shell script that
// answers `run` with a report of known timings), so records can be checked
// against figures computed here by hand.
#include "bench/model_bench.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/run_figures.h"
#include "gguf/gguf.h"

namespace fs = std::filesystem;

namespace {

ms::Json record(const char* model, double ts, const char* note) {
    ms::Json r = ms::Json::object();
    r["model_filename"] = model;
    r["n_prompt"] = 512;
    r["avg_ts"] = ts;
    r["samples_ns"] = ms::Json(ms::Json::Array{ms::Json(1000), ms::Json(2000)});
    r["note"] = note;
    r["hit_rate"] = nullptr;
    return r;
}

TEST(Records, CsvQuotesAndArrays) {
    std::vector<ms::Json> rs = {record("a.gguf", 12.5, "plain"), record("b,c.gguf", 3, "say \"hi\"")};
    std::string csv = ms::records_csv(rs);
    std::istringstream in(csv);
    std::string header, l1, l2;
    std::getline(in, header);
    std::getline(in, l1);
    std::getline(in, l2);
    EXPECT_EQ(header, "model_filename,n_prompt,avg_ts,samples_ns,note,hit_rate");
    EXPECT_EQ(l1, "a.gguf,512,12.5,\"[1000, 2000]\",plain,");
    EXPECT_EQ(l2, "\"b,c.gguf\",512,3,\"[1000, 2000]\",\"say \"\"hi\"\"\",");
    EXPECT_EQ(ms::records_csv({}), "");
}

TEST(Records, JsonAndJsonlRoundTrip) {
    std::vector<ms::Json> rs = {record("a.gguf", 12.5, "x"), record("b.gguf", 3, "y")};
    ms::Json arr = ms::Json::parse(ms::records_json(rs));
    ASSERT_EQ(arr.size(), 2u);
    EXPECT_EQ(arr[1].at("model_filename").as_string(), "b.gguf");
    std::istringstream in(ms::records_jsonl(rs));
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
        ms::Json o = ms::Json::parse(line);
        EXPECT_EQ(o.at("note").as_string(), n == 0 ? "x" : "y");
        ++n;
    }
    EXPECT_EQ(n, 2);
}

TEST(Records, MarkdownTable) {
    std::vector<ms::MdColumn> cols = {
        {"model", [](const ms::Json& r) { return r.at("model_filename").as_string(); }, true},
        {"t/s", [](const ms::Json& r) { return std::to_string(int(r.at("avg_ts").as_number())); }},
    };
    std::string md = ms::records_markdown({record("a.gguf", 12.5, "x")}, cols);
    EXPECT_EQ(md, "| model | t/s |\n|---|---:|\n| a.gguf | 12 |\n");
    EXPECT_EQ(ms::format_records("md", {record("a.gguf", 12.5, "x")}, cols), md);
    EXPECT_THROW(ms::format_records("xml", {}, cols), std::runtime_error);
}

TEST(Stats, MeanAndSampleStddev) {
    double m, sd;
    ms::mean_stddev({2, 4, 4, 4, 5, 5, 7, 9}, &m, &sd);
    EXPECT_DOUBLE_EQ(m, 5.0);
    EXPECT_NEAR(sd, std::sqrt(32.0 / 7.0), 1e-12);
    ms::mean_stddev({3}, &m, &sd);
    EXPECT_EQ(sd, 0.0);
}

TEST(RunArgs, LlamaBenchStyleRequest) {
    ms::RunRequest q;
    q.binary = "/x/moestream";
    q.model = "m.gguf";
    q.n_prompt = 512;
    q.n_gen = 0;
    q.seed = 7;
    q.report = "/tmp/r.json";
    q.extra = {"-t", "4"};
    std::vector<std::string> want = {"/x/moestream", "run", "-m", "m.gguf", "--random-prompt", "512", "-n", "0",
                                     "--ignore-eos", "--seed", "7", "--report", "/tmp/r.json", "-t", "4"};
    EXPECT_EQ(ms::run_argv(q), want);
    q.prompt_file = "p.txt";
    EXPECT_EQ(ms::run_argv(q)[4], "-f");
}

// A stand-in for `moestream run`: prefill at exactly 1000 tok/s, decode at
// 100 tok/s (as reported), a store with fixed figures, threads from -t;
// with --gpu-mem, a GPU backend and its VRAM tier's figures.
const char* kFakeRun = R"(#!/bin/sh
if [ "$1 $2" = "run --help" ]; then echo "--random-prompt N --ignore-eos"; exit 0; fi
if [ "$1" = "tokenize" ]; then
  # one token per word, plus BOS
  echo 1 $(cat "$5"); exit 0
fi
report=""; n=0; g=0; threads=4; gm=""
while [ $# -gt 0 ]; do
  case "$1" in
    --report) report="$2"; shift;;
    --random-prompt) n="$2"; shift;;
    -n) g="$2"; shift;;
    -t) threads="$2"; shift;;
    -c) ctx="$2"; shift;;
    --gpu-mem) gm="$2"; shift;;
    --fail) echo "fake failure: $2" >&2; exit 6;;
    --mem) if [ "$2" = "1M" ]; then echo "moestream run: error: memory budget: needs at least 99.0 MiB, have 1.0 MiB" >&2; exit 3; fi; shift;;
    "") echo "unexpected argument ''" >&2; exit 4;;
  esac
  shift
done
# run's context is 4096 tokens unless -c says otherwise
[ $((n + g)) -le "${ctx:-4096}" ] || { echo "context too small for $n + $g tokens" >&2; exit 5; }
awk -v n="$n" -v g="$g" -v t="$threads" -v gm="$gm" 'BEGIN {
  printf "{\"settings\":{\"threads\":%d},\"results\":{\"prefill_tokens\":%d,\"prefill_seconds\":%.6f,", t, n, n / 1000
  printf "\"decode_tokens\":%d,\"decode_seconds\":%.6f},", g, g / 100
  printf "\"store\":{\"hit_rate\":0.75,\"mb_read_per_token\":12.5,\"read_amplification\":1.25},\"time_split\":{\"io_wait\":0.02},"
  if (gm != "") {
    printf "\"backend\":\"GPU: Fake\",\"gpu\":{\"vram_tier\":{\"hit_rate\":0.9,\"copied_bytes_per_token\":2500000"
    if (gm == "split") printf ",\"prefill\":{\"hit_rate\":0.5,\"copied_bytes_per_token\":1000000,\"copy_bound_fraction\":0.75},\"decode\":{\"hit_rate\":0.8,\"copied_bytes_per_token\":3000000,\"bus_read_bytes_per_token\":500000,\"host_bytes_per_token\":4000000}"
    printf "}},"
  }
  printf "\"peak_rss_bytes\":1048576,\"disk\":{\"device\":\"vda\",\"read_bytes\":4096}}\n"
}' > "$report"
echo "generated text"
)";

class FakeRun : public ::testing::Test {
protected:
    void SetUp() override {
        dir = fs::current_path() / ("model_bench_test_" + std::to_string(getpid()));
        fs::create_directories(dir);
        binary = (dir / "moestream").string();
        std::ofstream(binary) << kFakeRun;
        chmod(binary.c_str(), 0755);
        model = (dir / "tiny.gguf").string();
        ms::GgufWriter w(model);
        w.set_string("general.architecture", "qwen3moe");
        w.set_string("general.size_label", "1K");
        w.set_u32("general.file_type", 7);
        w.add_tensor("token_embd.weight", ms::GgmlType::F32, {16, 4});
        w.begin_data();
        std::vector<float> zeros(64, 0.0f);
        w.write_tensor_data(zeros.data(), zeros.size() * 4);
        w.finish();
    }
    void TearDown() override { fs::remove_all(dir); }
    fs::path dir;
    std::string binary, model;
};

TEST_F(FakeRun, RecordsHoldLlamaBenchFieldsAndOurs) {
    ms::ModelBenchOptions o;
    o.binary = binary;
    o.models = {model};
    o.tests = {{64, 0}, {0, 16}, {64, 16}};
    o.sweeps = {{"-t", {"1", "3"}}, {"--mem", {"2G"}}};
    o.repetitions = 3;
    o.work_dir = (dir / "work").string();
    o.keep_reports = true;
    uint64_t last_done = 0, last_total = 0;
    o.progress = [&](const std::string&, uint64_t d, uint64_t t) { last_done = d, last_total = t; };
    ms::ModelBenchReport r = ms::run_model_bench(o);
    ASSERT_TRUE(r.errors.empty()) << r.errors[0];
    ASSERT_EQ(r.records.size(), 6u);  // 2 thread counts x 3 tests
    EXPECT_EQ(last_done, last_total);
    EXPECT_EQ(last_total, 6u * 4);    // warm-up + 3 repetitions each

    const ms::Json& pp = r.records[0];
    EXPECT_EQ(pp.at("test").as_string(), "pp64");
    EXPECT_EQ(pp.at("model_type").as_string(), "qwen3moe 1K Q8_0");
    EXPECT_EQ(pp.at("model_n_params").as_int(), 64);
    EXPECT_EQ(pp.at("model_size").as_int(), int64_t(fs::file_size(model)));
    EXPECT_EQ(pp.at("n_threads").as_int(), 1);
    EXPECT_EQ(pp.at("mem").as_string(), "2G");
    EXPECT_EQ(pp.at("n_prompt").as_int(), 64);
    EXPECT_EQ(pp.at("n_gen").as_int(), 0);
    EXPECT_NEAR(pp.at("avg_ts").as_number(), 1000.0, 1.0);  // 64 tokens in 0.064 s
    EXPECT_NEAR(pp.at("stddev_ts").as_number(), 0.0, 1e-6);
    EXPECT_EQ(pp.at("samples_ns").size(), 3u);
    EXPECT_NEAR(double(pp.at("avg_ns").as_int()), 64e6, 1e3);
    EXPECT_DOUBLE_EQ(pp.at("hit_rate").as_number(), 0.75);
    EXPECT_DOUBLE_EQ(pp.at("read_amplification").as_number(), 1.25);
    EXPECT_NEAR(pp.at("io_stall_ms_per_token").as_number(), 20.0 / 64, 1e-9);
    EXPECT_EQ(pp.at("peak_rss_bytes").as_int(), 1048576);
    EXPECT_EQ(pp.at("device_read_bytes").as_int(), 3 * 4096);

    const ms::Json& tg = r.records[1];
    EXPECT_EQ(tg.at("test").as_string(), "tg16");
    EXPECT_NEAR(tg.at("avg_ts").as_number(), 100.0, 0.5);
    const ms::Json& both = r.records[2];
    EXPECT_EQ(both.at("test").as_string(), "pp64+tg16");
    EXPECT_NEAR(both.at("avg_ts").as_number(), 80.0 / (0.064 + 0.16), 0.5);
    EXPECT_EQ(r.records[3].at("n_threads").as_int(), 3);

    // The run command line really carried the swept flags.
    EXPECT_TRUE(fs::exists(dir / "work" / "case0_rep0.json"));
    std::string md = ms::format_records("md", r.records, ms::model_md_columns(o));
    EXPECT_NE(md.find("| model | size | params | backend | threads | mem | test | t/s |"), std::string::npos) << md;
    EXPECT_NE(md.find("1000.00 ± 0.00"), std::string::npos) << md;
    ms::Json j = ms::Json::parse(r.json.dump());
    EXPECT_EQ(j.at("records").size(), 6u);
    EXPECT_TRUE(j.at("machine").contains("cpu"));
}

// -ub and --gpu-prefill sweep like run's other flags; -ub fills
// llama-bench's n_ubatch field.
TEST_F(FakeRun, UbatchAndGpuPrefillSweep) {
    ms::ModelBenchOptions o;
    o.binary = binary;
    o.models = {model};
    o.tests = {{64, 0}};
    o.sweeps = {{"-ub", {"256", "1024"}}, {"--gpu-prefill", {"pass"}}};
    o.repetitions = 1;
    ms::ModelBenchReport r = ms::run_model_bench(o);
    ASSERT_TRUE(r.errors.empty()) << r.errors[0];
    ASSERT_EQ(r.records.size(), 2u);
    EXPECT_EQ(r.records[0].at("n_ubatch").as_int(), 256);
    EXPECT_EQ(r.records[1].at("n_ubatch").as_int(), 1024);
    EXPECT_EQ(r.records[0].at("gpu_prefill").as_string(), "pass");
}

// -d: a generation test after a prompt of D tokens, timed over the
// generated tokens only; the run's context raised to hold them (the fake
// fails when its context, 4096 unless -c, cannot).
TEST_F(FakeRun, DepthTimesGenerationAfterAPrompt) {
    ms::ModelBenchOptions o;
    o.binary = binary;
    o.models = {model};
    o.tests = {{0, 16, 0}, {0, 16, 5000}};
    o.repetitions = 1;
    ms::ModelBenchReport r = ms::run_model_bench(o);
    ASSERT_TRUE(r.errors.empty()) << r.errors[0];
    ASSERT_EQ(r.records.size(), 2u);
    EXPECT_EQ(r.records[0].at("test").as_string(), "tg16");
    EXPECT_EQ(r.records[1].at("test").as_string(), "tg16 @ d5000");
    EXPECT_EQ(r.records[1].at("n_depth").as_int(), 5000);
    EXPECT_EQ(r.records[1].at("prompt_tokens_run").as_int(), 5000);
    EXPECT_NEAR(r.records[1].at("avg_ts").as_number(), 100.0, 0.5);  // 5 s of prefill left out
}

// A run on the GPU: llama-bench's backend name, and the VRAM tier's hit
// rate and bytes over the bus a token in their own columns.
TEST_F(FakeRun, GpuRowsCarryTheVramTier) {
    ms::ModelBenchOptions o;
    o.binary = binary;
    o.models = {model};
    o.tests = {{0, 16}};
    o.sweeps = {{"--gpu-mem", {"8G"}}};
    o.repetitions = 2;
    o.work_dir = (dir / "work").string();
    ms::ModelBenchReport r = ms::run_model_bench(o);
    ASSERT_TRUE(r.errors.empty()) << r.errors[0];
    ASSERT_EQ(r.records.size(), 1u);
    const ms::Json& tg = r.records[0];
    EXPECT_EQ(tg.at("backends").as_string(), "CUDA");
    EXPECT_DOUBLE_EQ(tg.at("vram_hit_rate").as_number(), 0.9);
    EXPECT_DOUBLE_EQ(tg.at("pcie_mb_per_token").as_number(), 2.5);
    const std::string md = ms::format_records("md", r.records, ms::model_md_columns(o));
    EXPECT_NE(md.find("| VRAM hit % | PCIe MB/tok | host MB/tok | copy bound |"), std::string::npos) << md;
    EXPECT_NE(md.find("| 90.0 | 2.5 | - | - |"), std::string::npos) << md;
    // Without a GPU sweep there are no such columns.
    o.sweeps = {{"-t", {"1"}}};
    EXPECT_EQ(ms::format_records("md", r.records, ms::model_md_columns(o)).find("VRAM hit"), std::string::npos);
}

// A report that splits the VRAM tier's figures by phase: a prompt test
// shows its prefill's, a generation test its decode's (copies plus bus
// reads), a combined test the whole run's.
TEST_F(FakeRun, GpuRowsTakeTheTimedPhasesVramFigures) {
    ms::ModelBenchOptions o;
    o.binary = binary;
    o.models = {model};
    o.tests = {{64, 0}, {0, 16}, {64, 16}};
    o.sweeps = {{"--gpu-mem", {"split"}}};
    o.repetitions = 1;
    o.work_dir = (dir / "work").string();
    ms::ModelBenchReport r = ms::run_model_bench(o);
    ASSERT_TRUE(r.errors.empty()) << r.errors[0];
    ASSERT_EQ(r.records.size(), 3u);
    EXPECT_DOUBLE_EQ(r.records[0].at("vram_hit_rate").as_number(), 0.5);
    EXPECT_DOUBLE_EQ(r.records[0].at("pcie_mb_per_token").as_number(), 1.0);
    EXPECT_DOUBLE_EQ(r.records[1].at("vram_hit_rate").as_number(), 0.8);
    EXPECT_DOUBLE_EQ(r.records[1].at("pcie_mb_per_token").as_number(), 3.5);
    // --gpu-ram-tier cpu's host-computed experts: only the decode has them.
    EXPECT_DOUBLE_EQ(r.records[1].at("host_mb_per_token").as_number(), 4.0);
    EXPECT_TRUE(r.records[0].at("host_mb_per_token").is_null());
    // The copy bound's fraction: only the prompt's phase reports one.
    EXPECT_DOUBLE_EQ(r.records[0].at("copy_bound_fraction").as_number(), 0.75);
    EXPECT_TRUE(r.records[1].at("copy_bound_fraction").is_null());
    const std::string md = ms::format_records("md", r.records, ms::model_md_columns(o));
    EXPECT_NE(md.find("| VRAM hit % | PCIe MB/tok | host MB/tok | copy bound |"), std::string::npos) << md;
    EXPECT_NE(md.find("| 50.0 | 1.0 | - | 0.75 |"), std::string::npos) << md;
    EXPECT_DOUBLE_EQ(r.records[2].at("vram_hit_rate").as_number(), 0.9);
    EXPECT_DOUBLE_EQ(r.records[2].at("pcie_mb_per_token").as_number(), 2.5);
}

TEST_F(FakeRun, FailingRunIsReportedNotFatal) {
    ms::ModelBenchOptions o;
    o.binary = binary;
    o.models = {model};
    o.tests = {{8, 0}};
    o.sweeps = {{"--fail", {"no such engine"}}};
    o.repetitions = 2;
    ms::ModelBenchReport r = ms::run_model_bench(o);
    ASSERT_EQ(r.errors.size(), 1u);
    EXPECT_NE(r.errors[0].find("fake failure: no such engine"), std::string::npos) << r.errors[0];
    EXPECT_NE(r.errors[0].find("exit 6"), std::string::npos);
    EXPECT_TRUE(r.records.at(0).at("error").is_string());
    EXPECT_NE(ms::format_records("md", r.records, ms::model_md_columns(o)).find("failed"), std::string::npos);

    o.binary = (dir / "missing").string();
    EXPECT_THROW(ms::run_model_bench(o), std::runtime_error);
}

// A case whose budget the run refuses as too small (exit 3, store/budget.h's
// kExitBudget) is a skipped case: a record with the reason and "skipped" in
// the table, no error, and the sweep's other cases run.
TEST_F(FakeRun, BudgetTooSmallIsASkippedCaseNotAFailure) {
    ms::ModelBenchOptions o;
    o.binary = binary;
    o.models = {model};
    o.tests = {{8, 0}};
    o.sweeps = {{"--mem", {"1M", "8G"}}};
    o.repetitions = 2;
    ms::ModelBenchReport r = ms::run_model_bench(o);
    EXPECT_TRUE(r.errors.empty()) << r.errors[0];
    ASSERT_EQ(r.skipped.size(), 1u);
    EXPECT_NE(r.skipped[0].find("needs at least 99.0 MiB"), std::string::npos) << r.skipped[0];
    ASSERT_EQ(r.records.size(), 2u);
    // The 1M case: its reason, no timings, no error.
    EXPECT_TRUE(r.records[0].at("error").is_null());
    ASSERT_TRUE(r.records[0].at("skipped").is_string());
    EXPECT_NE(r.records[0].at("skipped").as_string().find("needs at least 99.0 MiB"), std::string::npos);
    EXPECT_EQ(r.records[0].at("samples_ts").size(), 0u);
    // The 8G case ran both repetitions at the stand-in's 1000 tok/s.
    EXPECT_TRUE(r.records[1].at("skipped").is_null());
    ASSERT_EQ(r.records[1].at("samples_ts").size(), 2u);
    EXPECT_NEAR(r.records[1].at("avg_ts").as_number(), 1000.0, 1.0);
    const std::string md = ms::format_records("md", r.records, ms::model_md_columns(o));
    EXPECT_NE(md.find("skipped"), std::string::npos) << md;
    EXPECT_EQ(md.find("failed"), std::string::npos) << md;
}

// A switch from --run-args ("--ignore-eos") is passed alone, not followed by
// an empty argument that `run` would refuse.
TEST_F(FakeRun, SwitchWithoutValueAddsNoEmptyArgument) {
    ms::ModelBenchOptions o;
    o.binary = binary;
    o.models = {model};
    o.tests = {{0, 4}};
    o.sweeps = {{"--ignore-eos", {""}}};
    o.repetitions = 1;
    ms::ModelBenchReport r = ms::run_model_bench(o);
    EXPECT_TRUE(r.errors.empty()) << r.errors[0];
}

TEST_F(FakeRun, PromptOfNTokensThroughTheTokenizer) {
    // The stand-in tokenizer counts words plus one: 40 tokens = 39 words.
    std::string p = (dir / "p.txt").string();
    EXPECT_EQ(ms::write_token_prompt(binary, model, 40, p), 40);
    std::ifstream f(p);
    int words = 0;
    for (std::string w; f >> w;) ++words;
    EXPECT_EQ(words, 39);
}

}  // namespace
