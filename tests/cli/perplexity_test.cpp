// `moestream perplexity` end to end: on golden models its value equals the
// perplexity computed here from the reference engine's own prompt logits
// (with and without BOS), and streaming experts under a small budget gives
// bit-identical per-window values to holding them all.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "../model/golden.h"
#include "json/json.h"
#include "run_cli.h"
#include "../golden_required.h"

using ms::Json;

namespace {

std::string write_text(const std::string& name, const std::string& text) {
    const std::string path = "/tmp/moestream-ppl-" + std::to_string(getpid()) + "-" + name + ".txt";
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

// exp(mean over i >= 1 of -log softmax(logits[i-1])[token i]), from the golden files alone.
// Over the first n tokens (0: all).
double golden_perplexity(const ms::golden::Case& c, size_t n = 0) {
    if (n == 0) n = c.prompt.size();
    double nll = 0;
    for (size_t i = 1; i < n; i++) {
        const float* row = &c.logits[(i - 1) * size_t(c.n_vocab)];
        double mx = row[0], sum = 0;
        for (int64_t v = 1; v < c.n_vocab; v++) mx = std::max(mx, double(row[v]));
        for (int64_t v = 0; v < c.n_vocab; v++) sum += std::exp(double(row[v]) - mx);
        nll += std::log(sum) + mx - double(row[c.prompt[i]]);
    }
    return std::exp(nll / double(n - 1));
}

Json perplexity(const std::string& args) {
    CliResult r = run_cli("perplexity --json -t 2 " + args, false);
    EXPECT_EQ(r.rc, 0) << args;
    return r.rc == 0 ? Json::parse(r.out) : Json();
}

}  // namespace

// qwen3moe adds no BOS (the first prompt token is not scored); mixtral adds
// one (the window starts with it and every text token is scored).
TEST(Perplexity, EqualsGoldenLogits) {
    for (const char* name : {"qwen3moe-F32", "mixtral-F32"}) {
        const ms::golden::Case c = ms::golden::load(name);
        const std::string text = write_text(name, c.meta.at("prompt").as_string());
        const Json j = perplexity("-m " + c.gguf + " -f " + text + " -c 64");
        std::remove(text.c_str());
        ASSERT_TRUE(j.is_object()) << name;
        EXPECT_EQ(j.at("tokens_scored").as_int(), int64_t(c.prompt.size()) - 1) << name;
        EXPECT_EQ(j.at("windows").as_int(), 1) << name;
        // The README bounds logits to 1e-3 relative: the mean negative
        // log-likelihood, a logit-scale quantity, is held to the same.
        const double want = std::log(golden_perplexity(c));
        EXPECT_NEAR(std::log(j.at("perplexity").as_number()), want, 1e-3 * want) << name;
    }
}

// Windows of 8 tokens over the same prompt: the per-window values multiply
// out to the whole, and the first window, which sees what the reference saw
// at those positions, matches the golden logits' perplexity of its tokens.
TEST(Perplexity, WindowsAreIndependent) {
    const ms::golden::Case c = ms::golden::load("qwen3moe-F32");
    const std::string text = write_text("win", c.meta.at("prompt").as_string());
    const Json j = perplexity("-m " + c.gguf + " -f " + text + " -c 8");
    std::remove(text.c_str());
    ASSERT_TRUE(j.is_object());
    const int64_t n = int64_t(c.prompt.size());
    EXPECT_EQ(j.at("windows").as_int(), (n - 2) / 8 + 1);  // every window with at least 2 tokens
    double log_sum = 0;
    int64_t scored = 0;
    for (int64_t w = 0; w < j.at("windows").as_int(); w++) {
        const int64_t k = std::min<int64_t>(8, n - w * 8) - 1;
        log_sum += double(k) * std::log(j.at("window_perplexity").as_array()[size_t(w)].as_number());
        scored += k;
    }
    EXPECT_EQ(j.at("tokens_scored").as_int(), scored);
    EXPECT_NEAR(std::exp(log_sum / double(scored)), j.at("perplexity").as_number(), 1e-9 * scored);
    const double first = std::log(golden_perplexity(c, 8));
    EXPECT_NEAR(std::log(j.at("window_perplexity").as_array()[0].as_number()), first, 1e-3 * first);
}

// The demo model under a budget that holds a fifth of its experts reads them
// from the drive; every window's value is the same bits as with all cached.
TEST(Perplexity, StreamedEqualsResident) {
    const std::string model = std::string(MOESTREAM_SOURCE_DIR) + "/models/demo-Q8_0.gguf";
    const std::string text = std::string(MOESTREAM_SOURCE_DIR) + "/models/demo-heldout-sample.txt";
    const std::string args = "-m " + model + " -f " + text + " -c 128 --chunks 4";
    const std::string report = "/tmp/moestream-ppl-" + std::to_string(getpid()) + ".report.json";
    const Json all = perplexity(args + " --report " + report);
    ASSERT_TRUE(all.is_object());
    const Json st = Json::parse_file(report).at("store_settings");
    const int64_t fixed = st.at("resident_bytes").as_int() + st.at("kv_and_scratch_bytes").as_int() +
                          st.at("process_bytes").as_int();
    const std::string mem = std::to_string(fixed + 12 * st.at("slot_bytes").as_int() + (1 << 20));
    const Json streamed = perplexity(args + " --mem " + mem + " --report " + report);
    ASSERT_TRUE(streamed.is_object());
    const Json store = Json::parse_file(report).at("store");
    std::remove(report.c_str());
    EXPECT_GT(store.at("evictions").as_int(), 0);  // the cache was too small to hold the experts used
    EXPECT_EQ(all.at("window_perplexity").dump(), streamed.at("window_perplexity").dump());
    EXPECT_EQ(all.at("perplexity").as_number(), streamed.at("perplexity").as_number());
}
