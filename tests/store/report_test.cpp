// Store counters and the run report: coverage figures (experts covering
// 50/80/90 % of a layer's uses), reuse histogram buckets, per-token and
// amplification figures, the JSON file written and read back.
#include <gtest/gtest.h>

#include "telemetry/counters.h"
#include "telemetry/report.h"
#include "test_util.h"
#include "../golden_required.h"

namespace ms {
namespace {

TEST(Counters, CoverageAndReuseBuckets) {
    StoreCounters c;
    c.init(2, 8);
    // Layer 1: uses 50, 30, 10, 5, 5 of experts 3, 0, 7, 1, 2: the top one
    // covers 50 %, the top two 80 %, the top three 90 %.
    const int counts[8] = {30, 5, 5, 50, 0, 0, 0, 10};
    for (int e = 0; e < 8; e++)
        for (int i = 0; i < counts[e]; i++) c.record_use(1, e, i > 0, false, i == 0 ? -1 : i % 5);
    Json j = c.to_json();
    ASSERT_EQ(j.at("layers").size(), 1u);  // layer 0 unused: left out
    const Json& L = j.at("layers")[0];
    EXPECT_EQ(L.at("layer").as_int(), 1);
    EXPECT_EQ(L.at("unique_experts").as_int(), 5);
    EXPECT_EQ(L.at("experts_for_50pct").as_int(), 1);
    EXPECT_EQ(L.at("experts_for_80pct").as_int(), 2);
    EXPECT_EQ(L.at("experts_for_90pct").as_int(), 3);
    EXPECT_EQ(L.at("misses").as_int(), 5);
    EXPECT_EQ(L.at("hits").as_int(), 95);
    EXPECT_DOUBLE_EQ(j.at("hit_rate").as_number(), 0.95);
    // Distances i % 5 for i = 1..count-1: 0 -> bucket 0, 1 -> [1,1], 2-3 -> [2,3], 4 -> [4,7].
    EXPECT_EQ(c.first_uses, 5u);
    uint64_t d[5] = {};
    for (int e = 0; e < 8; e++)
        for (int i = 1; i < counts[e]; i++) d[i % 5]++;
    EXPECT_EQ(c.reuse_hist[0], d[0]);
    EXPECT_EQ(c.reuse_hist[1], d[1]);
    EXPECT_EQ(c.reuse_hist[2], d[2] + d[3]);
    EXPECT_EQ(c.reuse_hist[3], d[4]);
    const Json& hist = j.at("reuse_distance").at("histogram");
    EXPECT_EQ(hist[2].at("min").as_int(), 2);
    EXPECT_EQ(hist[2].at("max").as_int(), 3);
}

// The prompt's expert reads (demand reads before the decode mark) are not
// divided among the generated tokens.
TEST(Report, PerTokenFiguresCountOnlyTheDecodePhase) {
    RunReport rep(test::golden_model("qwen3moe-Q8_0"));
    StoreCounters c;
    c.init(1, 4);
    c.add_read(ReadReason::Demand, 8000000, 8000000, 20);  // prefill
    rep.mark("decode", &c);
    c.add_read(ReadReason::Demand, 2000000, 2000000, 5);
    c.decode_steps = 4;
    const Json s = rep.finish(&c).at("store");
    EXPECT_DOUBLE_EQ(s.at("mb_read_per_token").as_number(), 2.0 / 4);
    EXPECT_DOUBLE_EQ(s.at("mb_needed_per_token").as_number(), 2.0 / 4);
}

TEST(Report, PerTokenFiguresAndFile) {
    test::TempDir dir;
    std::string model = test::golden_model("qwen3moe-Q8_0");
    RunReport rep(model);
    rep.settings["mem"] = "4G";
    StoreCounters c;
    c.init(1, 4);
    c.add_read(ReadReason::Resident, 1000000, 1000000, 1);
    rep.mark("decode", &c);
    c.add_read(ReadReason::Demand, 3000000, 3100000, 10);
    c.add_read(ReadReason::Prefetch, 1000000, 1100000, 2);
    c.decode_steps = 4;
    c.record_use(0, 1, false, false, -1);
    Json r = rep.finish(&c);
    const Json& s = r.at("store");
    EXPECT_DOUBLE_EQ(s.at("mb_read_per_token").as_number(), 4.2 / 4);
    EXPECT_DOUBLE_EQ(s.at("mb_needed_per_token").as_number(), 1.0);
    EXPECT_DOUBLE_EQ(s.at("request_amplification").as_number(), 5.2 / 5.0);
    EXPECT_EQ(s.at("decode_tokens").as_int(), 4);
    EXPECT_EQ(r.at("settings").at("mem").as_string(), "4G");
    const Json& phases = r.at("phases");
    ASSERT_EQ(phases.size(), 2u);
    EXPECT_EQ(phases[0].at("phase").as_string(), "start");
    EXPECT_EQ(phases[0].at("bytes_needed").as_int(), 1000000);
    EXPECT_EQ(phases[1].at("phase").as_string(), "decode");
    EXPECT_EQ(phases[1].at("bytes_needed").as_int(), 4000000);
    EXPECT_EQ(phases[1].at("bytes_read").as_int(), 4200000);
    EXPECT_GT(r.at("peak_rss_bytes").as_int(), 0);
    EXPECT_TRUE(r.at("machine").is_object());
    // read_amplification is physical / needed when the device is known.
    if (r.at("disk").at("device").is_string()) {
        EXPECT_DOUBLE_EQ(s.at("read_amplification").as_number(),
                         double(r.at("disk").at("read_bytes").as_int()) / 5e6);
    }
    std::string path = dir.file("r.json");
    RunReport::write(path, r);
    Json back = Json::parse_file(path);
    EXPECT_EQ(back.at("store").at("misses").as_int(), 1);
    std::string sum = RunReport::summary(r);
    EXPECT_NE(sum.find("hit rate 0.0%"), std::string::npos) << sum;
    EXPECT_NE(sum.find("1.05 MB read per token"), std::string::npos) << sum;
    EXPECT_THROW(RunReport::write(dir.file("no/such/dir.json"), r), std::runtime_error);
}

}  // namespace
}  // namespace ms
