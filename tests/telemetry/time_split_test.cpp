// TimeSplit: the JSON the run report carries (other = wall - phases, never
// negative; GB/s only where weights were read) and PhaseTimer's two sinks,
// the split and the active trace.
#include "telemetry/time_split.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace {

using ms::Phase;

TEST(TimeSplit, JsonOtherAndBandwidth) {
    ms::TimeSplit s;
    s.add(Phase::Attention, 0.5, 2'000'000'000);
    s.add(Phase::IoWait, 0.25);
    s.add(Phase::ExpertCompute, 1.0, 3'000'000'000);
    ms::TimeSplit d;
    d.add(Phase::Routing, 0.125, 1'000'000);
    d.calls = 3;
    s.merge(d);
    EXPECT_DOUBLE_EQ(s.total_seconds(), 1.875);
    EXPECT_EQ(s.calls, 3u);
    ms::Json j = s.to_json(2.0);
    EXPECT_DOUBLE_EQ(j.at("attention").as_number(), 0.5);
    EXPECT_DOUBLE_EQ(j.at("routing").as_number(), 0.125);
    EXPECT_DOUBLE_EQ(j.at("io_wait").as_number(), 0.25);
    EXPECT_DOUBLE_EQ(j.at("expert_compute").as_number(), 1.0);
    EXPECT_DOUBLE_EQ(j.at("other").as_number(), 0.125);
    const ms::Json& gbs = j.at("weight_gb_per_s");
    EXPECT_DOUBLE_EQ(gbs.at("attention").as_number(), 4.0);
    EXPECT_DOUBLE_EQ(gbs.at("expert_compute").as_number(), 3.0);
    EXPECT_DOUBLE_EQ(gbs.at("routing").as_number(), 0.008);
    EXPECT_EQ(gbs.find("io_wait"), nullptr);
    // A wall clock shorter than the phases (timer skew) gives other = 0.
    EXPECT_DOUBLE_EQ(s.to_json(1.0).at("other").as_number(), 0.0);
}

TEST(PhaseTimer, RecordsIntoSplitAndActiveTrace) {
    ms::TimeSplit s;
    ms::Trace trace(8);
    ms::set_active_trace(&trace);
    {
        ms::PhaseTimer t(&s, Phase::Routing, 5, 1234);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ms::PhaseTimer early(&s, Phase::Attention, 2);
    const double first = early.stop();
    EXPECT_EQ(early.stop(), 0.0);  // a second stop adds nothing
    ms::set_active_trace(nullptr);
    { ms::PhaseTimer untraced(&s, Phase::Attention, 3); }

    EXPECT_GE(s.seconds[int(Phase::Routing)], 0.019);
    EXPECT_LT(s.seconds[int(Phase::Routing)], 5.0);
    EXPECT_EQ(s.weight_bytes[int(Phase::Routing)], 1234u);
    EXPECT_GE(s.seconds[int(Phase::Attention)], first);
    ASSERT_EQ(trace.size(), 2u);
    ms::Json j = ms::Json::parse(trace.json());
    int seen = 0;
    for (const ms::Json& e : j.at("traceEvents").as_array()) {
        if (e.at("ph").as_string() != "X") continue;
        seen++;
        const std::string name = e.at("name").as_string();
        if (name == "routing") {
            EXPECT_EQ(e.at("args").at("layer").as_int(), 5);
            EXPECT_GE(e.at("dur").as_number(), 19000);  // microseconds
        } else {
            EXPECT_EQ(name, "attention");
            EXPECT_EQ(e.at("args").at("layer").as_int(), 2);
        }
    }
    EXPECT_EQ(seen, 2);
}

}  // namespace
