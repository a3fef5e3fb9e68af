// `moestream run` end to end on the tiny synthetic model streamed under a
// budget that forces reads: the Chrome-trace timeline (--trace) against the
// run's own report and the model's layout from `inspect`, the time split and
// its weight byte counts, --random-prompt and --ignore-eos, and that tracing
// changes nothing in the output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "json/json.h"
#include "run_cli.h"
#include "../golden_dir.h"

using ms::Json;

namespace {

class RunCli : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        prefix_ = "/tmp/moestream-cli-run-" + std::to_string(getpid());
        model_ = prefix_ + ".gguf";
        CliResult r = run_cli("synth --preset tiny --seed 5 -o " + model_, false);
        ASSERT_EQ(r.rc, 0) << r.out;
        CliResult ins = run_cli("inspect --json " + model_, false);
        ASSERT_EQ(ins.rc, 0) << ins.out;
        inspect_ = Json::parse(ins.out);
        // A budget of the fixed part and 24 expert slots: the cache the store
        // then plans stays well short of the 96 experts, so decode reads too
        // (realistic routing reuses experts from token to token).
        budget_ = streaming_budget(model_, 24, prefix_ + ".probe.json");
        ASSERT_FALSE(budget_.empty());
        // --trace's event buffer is counted in --mem: the same 24 slots
        // beside it.
        trace_budget_ = streaming_budget(model_, 24, prefix_ + ".probe.json", "--trace /dev/null");
        ASSERT_FALSE(trace_budget_.empty());
    }
    static void TearDownTestSuite() {
        for (const char* ext : {".gguf", ".trace.json", ".report.json", ".r2.json"})
            std::remove((prefix_ + ext).c_str());
    }
    static std::string prefix_, model_, budget_, trace_budget_;
    static Json inspect_;
};
std::string RunCli::prefix_, RunCli::model_, RunCli::budget_, RunCli::trace_budget_;
Json RunCli::inspect_;

TEST_F(RunCli, TraceMatchesReportAndLayout) {
    const std::string trace = prefix_ + ".trace.json", report = prefix_ + ".report.json";
    CliResult r = run_cli("run -m " + model_ + trace_budget_ + "--seed 7 --random-prompt 40 -b 16 -n 40 --ignore-eos" +
                              " --trace " + trace + " --report " + report,
                          true);
    ASSERT_EQ(r.rc, 0) << r.out;
    Json rep = Json::parse_file(report);
    const int64_t prefill_tokens = rep.at("prefill").at("tokens").as_int();
    const int64_t decode_tokens = rep.at("decode").at("tokens").as_int();
    EXPECT_EQ(prefill_tokens, 40);  // --random-prompt N gives exactly N tokens
    EXPECT_EQ(decode_tokens, 40);   // --ignore-eos: exactly -n
    const int64_t forward_calls = (40 + 15) / 16 + decode_tokens;  // -b 16 chunks, then one per token

    const int n_layer = int(inspect_.at("hparams").at("n_layer").as_int());
    const int k = int(inspect_.at("hparams").at("n_expert_used").as_int());
    Json t = Json::parse_file(trace);
    std::map<std::string, std::map<int64_t, int>> per_layer;  // name -> layer -> count
    std::set<int64_t> lanes_forward;
    std::map<std::string, int> steps;
    int reads = 0, read_names_demand = 0, read_names_prefetch = 0, read_names_prefill = 0;
    for (const Json& e : t.at("traceEvents").as_array()) {
        if (e.at("ph").as_string() != "X") continue;
        const std::string name = e.at("name").as_string();
        EXPECT_GE(e.at("dur").as_number(), 0) << name;
        const Json& args = e.at("args");
        if (e.at("cat").as_string() == "step") {
            steps[name]++;
            continue;
        }
        const int64_t layer = args.at("layer").as_int();
        EXPECT_GE(layer, 0);
        EXPECT_LT(layer, n_layer);
        if (e.at("cat").as_string() == "read") {
            reads++;
            const int64_t expert = args.at("expert").as_int();
            EXPECT_GE(expert, 0);
            EXPECT_LT(expert, inspect_.at("hparams").at("n_expert").as_int());
            read_names_demand += name == "demand";
            read_names_prefetch += name == "prefetch";
            read_names_prefill += name == "prefill";
            continue;
        }
        per_layer[name][layer]++;
        if (name == "attention") lanes_forward.insert(e.at("tid").as_int());
    }
    // Every forward call records attention, routing and experts once per layer.
    for (const char* phase : {"attention", "routing", "expert_compute"}) {
        ASSERT_EQ(per_layer[phase].size(), size_t(n_layer)) << phase;
        for (const auto& [layer, count] : per_layer[phase]) EXPECT_EQ(count, forward_calls) << phase << layer;
    }
    EXPECT_EQ(lanes_forward.size(), 1u);
    EXPECT_EQ(steps["prefill_chunk"], (40 + 15) / 16);
    EXPECT_EQ(steps["token"], decode_tokens);
    // One read event per expert load: the store's misses plus its prefetches.
    const Json& store = rep.at("store");
    EXPECT_EQ(read_names_demand + read_names_prefill, store.at("misses").as_int());
    EXPECT_EQ(read_names_prefetch, store.at("prefetch").at("issued").as_int());
    EXPECT_GT(read_names_prefill, 0);
    EXPECT_GT(read_names_demand, 0);
    EXPECT_EQ(reads, read_names_demand + read_names_prefetch + read_names_prefill);

    // The decode split: phases within the decode wall time, and the expert
    // kernels' weight bytes equal to k experts per layer per token, at each
    // layer's expert size as `inspect` gives it.
    const Json& split = rep.at("time_split_decode");
    double sum = 0;
    for (const char* phase : {"attention", "routing", "io_wait", "expert_compute", "other"}) {
        EXPECT_GE(split.at(phase).as_number(), 0) << phase;
        sum += split.at(phase).as_number();
    }
    EXPECT_NEAR(sum, rep.at("decode").at("seconds").as_number(), 1e-3);
    double expert_bytes_per_token = 0;
    for (const Json& l : inspect_.at("experts").at("layers").as_array())
        expert_bytes_per_token += double(k) * double(l.at("bytes_per_expert").as_int());
    const double expert_bytes = split.at("weight_gb_per_s").at("expert_compute").as_number() * 1e9 *
                                split.at("expert_compute").as_number();
    EXPECT_NEAR(expert_bytes / (expert_bytes_per_token * double(decode_tokens)), 1.0, 1e-6);
    // The whole-run split is prefill's plus decode's.
    for (const char* phase : {"attention", "routing", "io_wait", "expert_compute"}) {
        EXPECT_NEAR(rep.at("time_split").at(phase).as_number(),
                    rep.at("time_split_prefill").at(phase).as_number() + split.at(phase).as_number(), 1e-9);
    }
}

// A prefill chunk reads each expert its tokens need once: with the
// next-layer hint on, wrong guesses may add a little, never more than 5 %.
// The union is counted independently: unique experts per layer (the store's
// per-layer table) times that layer's expert size from `inspect`.
TEST_F(RunCli, PrefillReadsTheUnionOnce) {
    std::map<int64_t, double> expert_bytes;
    for (const Json& l : inspect_.at("experts").at("layers").as_array())
        expert_bytes[l.at("layer").as_int()] = double(l.at("bytes_per_expert").as_int());
    // 6 tokens pick about 12 of each layer's 16 experts (room for wrong
    // guesses); 200 pick all of them.
    for (const char* tokens : {"6", "200"})
    for (const char* prefetch : {"next", "off"}) {
        SCOPED_TRACE(std::string(tokens) + " tokens, prefetch " + prefetch);
        const std::string report = prefix_ + ".r2.json";
        CliResult r = run_cli("run -m " + model_ + budget_ + "--seed 3 --random-prompt " + tokens +
                                  " -n 0 --prefetch " + prefetch + " --report " + report,
                              true);
        ASSERT_EQ(r.rc, 0) << r.out;
        Json rep = Json::parse_file(report);
        const Json& store = rep.at("store");
        double union_bytes = 0;
        for (const Json& l : store.at("layers").as_array())
            union_bytes += double(l.at("unique_experts").as_int()) * expert_bytes.at(l.at("layer").as_int());
        double needed = 0;
        for (const char* reason : {"demand", "prefetch", "prefill"})
            needed += double(store.at("bytes").at(reason).at("needed").as_int());
        EXPECT_GE(needed, union_bytes) << prefetch;  // the cache starts empty
        EXPECT_LE(needed, 1.05 * union_bytes) << prefetch;
        if (std::string(prefetch) == "off") {
            EXPECT_EQ(needed, union_bytes);
        }
    }
}

TEST_F(RunCli, ALongPromptReadsEachExpertOnceAndTheSplitIsReported) {
    // 200 tokens in pieces of 16 under a cache (24 slots, see budget_) far
    // smaller than the 96 experts they use: evaluated layer by layer (the
    // default -b holds the whole prompt) each expert is read once; one
    // forward call per 16 tokens (-b 16, the old way) reads each layer's
    // experts again for every piece. The same text either way.
    std::map<int64_t, double> expert_bytes;
    for (const Json& l : inspect_.at("experts").at("layers").as_array())
        expert_bytes[l.at("layer").as_int()] = double(l.at("bytes_per_expert").as_int());
    double needed[2] = {0, 0}, union_bytes = 0;
    std::string text[2];
    for (int split = 0; split < 2; split++) {
        const std::string report = prefix_ + ".r2.json";
        const std::string b = split ? " -b 16 -ub 16" : " -ub 16";
        CliResult r = run_streamed("run -m " + model_ + " --seed 3 --random-prompt 200 -n 0 --prefetch off" + b, model_,
                                   24, prefix_ + ".probe.json", report);
        ASSERT_EQ(r.rc, 0) << r.out;
        Json rep = Json::parse_file(report);
        const Json& store = rep.at("store");
        EXPECT_LT(rep.at("store_settings").at("slots").as_int(), 48);
        EXPECT_EQ(rep.at("prefill").at("prompt_splits").as_int(), split);
        for (const char* reason : {"demand", "prefetch", "prefill"})
            needed[split] += double(store.at("bytes").at(reason).at("needed").as_int());
        if (split == 0)
            for (const Json& l : store.at("layers").as_array())
                union_bytes += double(l.at("unique_experts").as_int()) * expert_bytes.at(l.at("layer").as_int());
        CliResult g = run_cli("run -m " + model_ + budget_ + "--seed 3 --random-prompt 200 -n 12 --temp 0" + b, false);
        ASSERT_EQ(g.rc, 0);
        text[split] = g.out;
    }
    EXPECT_EQ(needed[0], union_bytes);
    EXPECT_GT(needed[1], 1.5 * union_bytes);
    EXPECT_FALSE(text[0].empty());
    EXPECT_EQ(text[0], text[1]);
}

TEST_F(RunCli, TracingAndRandomPromptAreReproducible) {
    const std::string trace = prefix_ + ".trace.json";
    const std::string args = "run -m " + model_ + budget_ + "--seed 11 --random-prompt 25 -n 16 --ignore-eos";
    CliResult plain = run_cli(args, false);
    CliResult traced = run_cli("run -m " + model_ + trace_budget_ + "--seed 11 --random-prompt 25 -n 16 --ignore-eos" +
                                   " --trace " + trace,
                               false);
    CliResult other_seed = run_cli("run -m " + model_ + budget_ + "--seed 12 --random-prompt 25 -n 16 --ignore-eos",
                                   false);
    ASSERT_EQ(plain.rc, 0);
    ASSERT_EQ(traced.rc, 0);
    ASSERT_EQ(other_seed.rc, 0);
    EXPECT_EQ(plain.out, traced.out);
    EXPECT_NE(plain.out, other_seed.out);
    EXPECT_GT(file_size(trace), 0u);
}

TEST_F(RunCli, BadPromptFlagsAreOneLineErrors) {
    CliResult both = run_cli("run -m " + model_ + " -p hi --random-prompt 4", true);
    EXPECT_NE(both.rc, 0);
    EXPECT_NE(both.out.find("either a prompt"), std::string::npos) << both.out;
    CliResult neg = run_cli("run -m " + model_ + " --random-prompt -3", true);
    EXPECT_NE(neg.rc, 0);
    EXPECT_NE(neg.out.find("--random-prompt"), std::string::npos) << neg.out;
    CliResult dir = run_cli("run -m " + model_ + trace_budget_ + "-p hi -n 2 --trace /nonexistent/dir/t.json", true);
    EXPECT_NE(dir.rc, 0);
    EXPECT_NE(dir.out.find("/nonexistent/dir/t.json"), std::string::npos) << dir.out;
}

// A --mem that cannot hold the run's least is refused with a one-line error
// saying what it needs, and exit status 3 (store/budget.h's kExitBudget),
// which bench model takes as a skipped case; other errors stay status 1.
TEST_F(RunCli, TooSmallABudgetExitsThree) {
    CliResult small = run_cli("run -m " + model_ + " -p hi -n 2 --mem 1M", true);
    EXPECT_EQ(small.rc, 3) << small.out;
    // The error is the last line, whole (after the load's progress line).
    const size_t at = small.out.find("moestream run: error: memory budget: needs at least");
    ASSERT_NE(at, std::string::npos) << small.out;
    EXPECT_EQ(std::count(small.out.begin() + long(at), small.out.end(), '\n'), 1) << small.out;
    CliResult bad = run_cli("run -m " + model_ + trace_budget_ + "-p hi -n 2 --trace /nonexistent/dir/t.json", true);
    EXPECT_EQ(bad.rc, 1) << bad.out;
    CliResult help = run_cli("--help", false);
    EXPECT_NE(help.out.find("exit status"), std::string::npos) << help.out;
}

// Speculative decoding streamed from the drive: greedy text with n-gram and
// forced drafts is the plain run's, and the report's speculation object
// counts what happened (forced: every pass drafts 3 tokens, fewer near -n).
TEST_F(RunCli, DraftsKeepGreedyTextAndAreCounted) {
    const std::string report = prefix_ + ".report.json";
    const std::string args = "run -m " + model_ + budget_ + "--temp 0 --seed 3 --random-prompt 20 -n 24 --ignore-eos";
    CliResult plain = run_cli(args + " --draft off", false);
    ASSERT_EQ(plain.rc, 0);
    for (const char* draft : {"ngram", "forced"}) {
        SCOPED_TRACE(draft);
        CliResult r = run_cli(args + " --draft " + draft + " --draft-max 3 --report " + report, false);
        ASSERT_EQ(r.rc, 0);
        EXPECT_EQ(r.out, plain.out);
        const Json spec = Json::parse_file(report).at("speculation");
        EXPECT_EQ(spec.at("mode").as_string(), draft);
        const int64_t passes = spec.at("forward_passes").as_int(), accepted = spec.at("accepted").as_int();
        EXPECT_EQ(passes + accepted, 24);  // each pass adds its sampled token and the accepted drafts
        if (std::string(draft) == "forced") {
            EXPECT_GE(spec.at("drafted").as_int(), 3 * (passes - 3));  // the last passes have fewer tokens left
        }
        EXPECT_GT(spec.at("expert_bytes_read_per_token").as_number(), 0);
    }
    CliResult bad = run_cli(args + " --draft sometimes", true);
    EXPECT_NE(bad.rc, 0);
    EXPECT_NE(bad.out.find("--draft"), std::string::npos) << bad.out;
    CliResult mtp = run_cli(args + " --draft mtp", true);
    EXPECT_NE(mtp.rc, 0);
    EXPECT_NE(mtp.out.find(model_ + ": --draft mtp:"), std::string::npos) << mtp.out;
    EXPECT_NE(mtp.out.find("has no NextN"), std::string::npos) << mtp.out;
}

// --parallel 3: three sequences decoded together, streaming through 24
// expert slots; the first prints what the run alone prints (batched decode gives
// each sequence its own bits), and the report sums the three: 3 x 20
// generated tokens, 3 x 12 prompt tokens, the setting recorded. Bad values
// are one-line errors.
TEST_F(RunCli, ParallelSequencesPrintTheFirstAndSumInTheReport) {
    const std::string report = prefix_ + ".report.json";
    // The budget's 24 slots without its --mem, which holds one sequence's KV cache.
    const std::string args = "run -m " + model_ + " --cache-slots 24 -c 512 -t 2 --temp 0.7 --seed 4 --random-prompt 12 "
                             "-n 20 --ignore-eos --draft off";
    CliResult alone = run_cli(args, false);
    ASSERT_EQ(alone.rc, 0);
    CliResult three = run_cli(args + " --parallel 3 --report " + report, false);
    ASSERT_EQ(three.rc, 0);
    EXPECT_EQ(three.out, alone.out);
    const Json j = Json::parse_file(report);
    EXPECT_EQ(j.at("settings").at("parallel").as_int(), 3);
    EXPECT_EQ(j.at("decode").at("tokens").as_int(), 60);
    EXPECT_EQ(j.at("prefill").at("tokens").as_int(), 36);
    CliResult bad = run_cli(args + " --parallel 0", true);
    EXPECT_NE(bad.rc, 0);
    EXPECT_NE(bad.out.find("--parallel"), std::string::npos) << bad.out;
}

// --draft mtp on a file with a NextN block (golden glm4moe): the plain
// run's greedy text, and the report counts the block's expert reads.
TEST_F(RunCli, MtpDraftsKeepGreedyTextAndCountTheirReads) {
    SKIP_WITHOUT_GOLDEN();
    const std::string report = prefix_ + ".mtp.json";
    const std::string args = "run -m " MOESTREAM_GOLDEN_DIR "/models/glm4moe-Q8_0.gguf -p 'The GNU General Public "
                             "License' -n 24 --temp 0 --ignore-eos";
    CliResult plain = run_cli(args + " --draft off", false);
    ASSERT_EQ(plain.rc, 0);
    CliResult r = run_cli(args + " --draft mtp --draft-max 2 --report " + report, false);
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(r.out, plain.out);
    const Json spec = Json::parse_file(report).at("speculation");
    EXPECT_EQ(spec.at("mode").as_string(), "mtp");
    EXPECT_EQ(spec.at("forward_passes").as_int() + spec.at("accepted").as_int(), 24);
    EXPECT_LE(spec.at("accepted").as_int(), spec.at("drafted").as_int());
    EXPECT_GT(spec.at("nextn_expert_bytes_read").as_int(), 0);
}

}  // namespace
