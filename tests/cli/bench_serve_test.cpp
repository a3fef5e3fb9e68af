// `moestream bench serve` end to end on the tiny synth model: every stream
// generates exactly --tokens tokens, the figures are the ones the flags ask
// for and consistent with one another, and bad flags (--streams, --step-fit)
// fail in one line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "json/json.h"
#include "run_cli.h"

using ms::Json;

TEST(BenchServeCli, ReportsEachCountOfStreams) {
    const std::string base = "/tmp/moestream-bench-serve-" + std::to_string(getpid());
    const std::string model = base + ".gguf", json = base + ".json";
    CliResult s = run_cli("synth --preset tiny -o " + model, true);
    ASSERT_EQ(s.rc, 0) << s.out;
    // 20 slots for the tiny model's 96 experts: the store reads while decoding.
    CliResult r = run_cli("bench serve -m " + model + " -t 1 --cache-slots 20 --streams 1,3 --prompt-tokens 6 "
                          "--tokens 5 --json " + json,
                          true);
    ASSERT_EQ(r.rc, 0) << r.out;
    const Json j = Json::parse_file(json);
    std::remove(json.c_str());
    EXPECT_EQ(j.at("command").as_string(), "bench serve");
    const auto& points = j.at("points").as_array();
    ASSERT_EQ(points.size(), 2u);
    for (size_t i = 0; i < points.size(); i++) {
        const Json& p = points[i];
        const int n = i ? 3 : 1;
        SCOPED_TRACE(n);
        EXPECT_EQ(p.at("streams").as_int(), n);
        EXPECT_EQ(p.at("generated_tokens").as_int(), 5 * n);
        // The decode window opens when a waiting thread sees the last
        // stream's first token; the tiny model may finish its few tokens
        // before that thread wakes, so the window's figures can be zero here
        // (on a real model a token takes far longer than the wake-up).
        EXPECT_GE(p.at("aggregate_decode_tok_s").as_number(), 0);
        EXPECT_GT(p.at("stream_tok_s_median").as_number(), 0);
        EXPECT_LE(p.at("stream_tok_s_min").as_number(), p.at("stream_tok_s_median").as_number());
        EXPECT_GT(p.at("ttft_median_s").as_number(), 0);
        EXPECT_LE(p.at("ttft_max_s").as_number(), p.at("wall_s").as_number());
        EXPECT_GE(p.at("expert_bytes_per_token").as_number(), 0);
        EXPECT_GE(p.at("hit_rate").as_number(), 0);
        EXPECT_LE(p.at("hit_rate").as_number(), 1);
        EXPECT_GT(p.at("peak_rss_bytes").as_int(), 0);
    }
    CliResult bad = run_cli("bench serve -m " + model + " --streams 0", true);
    EXPECT_NE(bad.rc, 0);
    EXPECT_NE(bad.out.find("--streams"), std::string::npos) << bad.out;
    CliResult fit = run_cli("bench serve -m " + model + " --streams 1 --step-fit maybe", true);
    EXPECT_NE(fit.rc, 0);
    EXPECT_NE(fit.out.find("--step-fit: expected on or off"), std::string::npos) << fit.out;
    CliResult missing = run_cli("bench serve -m " + model + " -f " + base + ".none --streams 1", true);
    EXPECT_NE(missing.rc, 0);
    EXPECT_NE(missing.out.find(base + ".none: cannot open"), std::string::npos) << missing.out;
    std::remove(model.c_str());
}
