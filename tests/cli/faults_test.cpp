// Injected read faults (--io-faults) on every I/O engine, end to end: a
// failing read stops the run with one line naming the file, layer and
// expert and exit status 1; short reads are completed and slow reads only
// slow the run (same text as a clean run, and the report shows it);
// damaged bytes are caught by the packed sidecar's checksums and, reading
// from the GGUF, by --verify-experts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "json/json.h"
#include "run_cli.h"

using ms::Json;

namespace {

const char* kEngines[] = {"uring", "pread", "buffered", "mmap"};

class Faults : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        prefix_ = "/tmp/moestream-cli-faults-" + std::to_string(getpid());
        model_ = prefix_ + ".gguf";
        ASSERT_EQ(run_cli("synth --preset tiny --seed 5 -o " + model_, false).rc, 0);
        ASSERT_EQ(run_cli("pack " + model_, false).rc, 0);  // the sidecar and its checksum table
        budget_ = streaming_budget(model_, 24, prefix_ + ".probe.json");
        ASSERT_FALSE(budget_.empty());
        CliResult clean = run_cli(args("--layout gguf"), false);
        ASSERT_EQ(clean.rc, 0);
        clean_text_ = clean.out;
        ASSERT_FALSE(clean_text_.empty());
    }
    static void TearDownTestSuite() {
        for (const char* ext : {".gguf", ".gguf.experts", ".report.json"}) std::remove((prefix_ + ext).c_str());
    }
    // A run that reads experts in prefill and in decode.
    static std::string args(const std::string& extra) {
        return "run -m " + model_ + budget_ + "--seed 3 --random-prompt 40 -n 24 --ignore-eos " + extra;
    }
    static Json report_of(const std::string& extra, CliResult* r) {
        const std::string report = prefix_ + ".report.json";
        *r = run_cli(args(extra + " --report " + report), false);
        return r->rc == 0 ? Json::parse_file(report) : Json();
    }
    static std::string prefix_, model_, budget_, clean_text_;
};
std::string Faults::prefix_, Faults::model_, Faults::budget_, Faults::clean_text_;

int count_lines_with(const std::string& text, const std::string& what) {
    int n = 0;
    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        n += text.substr(start, end - start).find(what) != std::string::npos;
        start = end + 1;
    }
    return n;
}

}  // namespace

TEST_F(Faults, FailedReadStopsTheRunNamingFileLayerAndExpert) {
    for (const char* io : kEngines) {
        SCOPED_TRACE(io);
        // Layer 2's experts are all read at some point of this run; each one fails.
        CliResult r = run_cli(args(std::string("--layout gguf --io ") + io + " --io-faults eio@2:*"), true);
        EXPECT_EQ(r.rc, 1) << r.out;
        EXPECT_EQ(count_lines_with(r.out, "error:"), 1) << r.out;
        EXPECT_NE(r.out.find(model_ + ": layer 2 expert "), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("Input/output error"), std::string::npos) << r.out;
    }
}

TEST_F(Faults, ShortReadsAreCompletedAndChangeNothing) {
    for (const char* io : kEngines) {
        SCOPED_TRACE(io);
        for (const char* layout : {"gguf", "packed"}) {
            SCOPED_TRACE(layout);
            CliResult r;
            Json rep = report_of(std::string("--layout ") + layout + " --io " + io + " --io-faults short@*:*", &r);
            ASSERT_EQ(r.rc, 0);
            EXPECT_EQ(r.out, clean_text_);
            EXPECT_GT(rep.at("store").at("read_retries").as_int(), 0);
        }
    }
}

TEST_F(Faults, SlowReadsOnlySlowTheRun) {
    for (const char* io : kEngines) {
        SCOPED_TRACE(io);
        CliResult r;
        Json rep = report_of(std::string("--layout gguf --io ") + io + " --io-faults slow=20@1:*", &r);
        ASSERT_EQ(r.rc, 0);
        EXPECT_EQ(r.out, clean_text_);
        // Every layer-1 miss waited 20 ms at least once: the report's I/O wait shows it.
        const int64_t misses = rep.at("store").at("layers")[1].at("misses").as_int();
        ASSERT_GT(misses, 0);
        EXPECT_GE(rep.at("time_split").at("io_wait").as_number(), 0.020);
    }
}

TEST_F(Faults, DamagedBytesAreCaughtByChecksums) {
    for (const char* io : kEngines) {
        SCOPED_TRACE(io);
        for (const char* layout : {"--layout packed", "--layout gguf --verify-experts"}) {
            SCOPED_TRACE(layout);
            CliResult r = run_cli(args(std::string(layout) + " --io " + io + " --io-faults corrupt@3:*"), true);
            EXPECT_EQ(r.rc, 1) << r.out;
            EXPECT_EQ(count_lines_with(r.out, "error:"), 1) << r.out;
            EXPECT_NE(r.out.find(": layer 3 expert "), std::string::npos) << r.out;
            EXPECT_NE(r.out.find("checksum mismatch"), std::string::npos) << r.out;
        }
    }
}

TEST_F(Faults, VerifyExpertsWithoutATableIsRefused) {
    const std::string other = prefix_ + ".other.gguf";
    ASSERT_EQ(run_cli("synth --preset tiny --seed 6 -o " + other, false).rc, 0);
    CliResult r = run_cli("run -m " + other + " -p hi -n 1 --layout gguf --verify-experts", true);
    std::remove(other.c_str());
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.out.find(other + ".experts"), std::string::npos) << r.out;
}

TEST_F(Faults, BadFaultSpecsAreRefused) {
    for (const char* spec : {"boom@1:1", "eio@1", "eio", "slow=x@*:*", "eio@1:1xq"}) {
        SCOPED_TRACE(spec);
        CliResult r = run_cli(args(std::string("--io-faults ") + spec), true);
        EXPECT_EQ(r.rc, 1);
        EXPECT_NE(r.out.find("--io-faults"), std::string::npos) << r.out;
    }
}
