// Chrome-trace writer: the output must parse as JSON (with our strict parser),
// hold exactly the events recorded with their times, lanes and arguments,
// survive concurrent recording, and stay valid when the buffer overflows.
#include "telemetry/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "json/json.h"

namespace {

std::vector<const ms::Json*> events_of(const ms::Json& j, const char* ph) {
    std::vector<const ms::Json*> out;
    for (const ms::Json& e : j.at("traceEvents").as_array())
        if (e.at("ph").as_string() == ph) out.push_back(&e);
    return out;
}

TEST(Trace, CompleteEventsWithTimesLanesAndArgs) {
    ms::Trace t(16);
    int64_t t0 = ms::Trace::now_ns();
    t.complete("attention", "layer", t0 + 1000, t0 + 251500, 7, "layer", 3);
    t.complete("read", "io", t0 + 2000, t0 + 3000, 100, "layer", 3, "expert", 117);
    t.complete("sample", "token", t0 + 5000, t0 + 4000);  // negative duration clamps to 0
    t.name_lane(100, "io lane \"0\"");
    ms::Json j = ms::Json::parse(t.json(), "trace");
    auto xs = events_of(j, "X");
    ASSERT_EQ(xs.size(), 3u);
    const ms::Json& a = *xs[0];
    EXPECT_EQ(a.at("name").as_string(), "attention");
    EXPECT_EQ(a.at("cat").as_string(), "layer");
    EXPECT_EQ(a.at("tid").as_int(), 7);
    EXPECT_EQ(a.at("pid").as_int(), getpid());
    EXPECT_NEAR(a.at("dur").as_number(), 250.5, 1e-9);  // microseconds
    EXPECT_EQ(a.at("args").at("layer").as_int(), 3);
    // ts is relative to the Trace's creation, which was just before t0.
    EXPECT_GE(a.at("ts").as_number(), 1.0);
    EXPECT_LT(a.at("ts").as_number(), 1.0 + 1e6);
    EXPECT_NEAR(xs[1]->at("ts").as_number() - a.at("ts").as_number(), 1.0, 1e-9);
    EXPECT_EQ(xs[1]->at("args").at("expert").as_int(), 117);
    EXPECT_EQ(xs[2]->at("dur").as_number(), 0.0);
    EXPECT_FALSE(xs[2]->contains("args"));
    EXPECT_EQ(xs[2]->at("tid").as_int(), ms::Trace::thread_lane());
    auto ms_ = events_of(j, "M");
    ASSERT_EQ(ms_.size(), 2u);  // process name + one lane name
    EXPECT_EQ(ms_[1]->at("args").at("name").as_string(), "io lane \"0\"");
    EXPECT_EQ(ms_[1]->at("tid").as_int(), 100);
}

TEST(Trace, ConcurrentRecordingKeepsEveryEvent) {
    ms::Trace t(1 << 14);
    const int threads = 4, per = 2000;
    std::vector<std::thread> ts;
    for (int k = 0; k < threads; ++k)
        ts.emplace_back([&t, k] {
            for (int i = 0; i < per; ++i) {
                int64_t s = ms::Trace::now_ns();
                t.complete("work", "test", s, s + 10, -1, "thread", k, "i", i);
            }
        });
    for (auto& th : ts) th.join();
    EXPECT_EQ(t.size(), size_t(threads * per));
    EXPECT_EQ(t.dropped(), 0u);
    ms::Json j = ms::Json::parse(t.json());
    auto xs = events_of(j, "X");
    ASSERT_EQ(xs.size(), size_t(threads * per));
    // Each recording thread had its own lane, and every (thread, i) is there once.
    std::map<int64_t, std::set<int64_t>> lane_threads;
    std::set<std::pair<int64_t, int64_t>> seen;
    for (const ms::Json* e : xs) {
        lane_threads[e->at("tid").as_int()].insert(e->at("args").at("thread").as_int());
        seen.insert({e->at("args").at("thread").as_int(), e->at("args").at("i").as_int()});
    }
    EXPECT_EQ(lane_threads.size(), size_t(threads));
    for (auto& [lane, ks] : lane_threads) EXPECT_EQ(ks.size(), 1u) << "lane " << lane << " shared";
    EXPECT_EQ(seen.size(), size_t(threads * per));
}

TEST(Trace, OverflowDropsAndStaysValid) {
    ms::Trace t(5);
    for (int i = 0; i < 12; ++i) t.complete("e", "c", 0, 1);
    EXPECT_EQ(t.size(), 5u);
    EXPECT_EQ(t.dropped(), 7u);
    ms::Json j = ms::Json::parse(t.json());
    EXPECT_EQ(events_of(j, "X").size(), 5u);
    EXPECT_EQ(j.at("otherData").at("dropped_events").as_int(), 7);
}

TEST(Trace, SpanMeasuresItsScopeAndActiveTraceRoundTrips) {
    ms::Trace t(8);
    EXPECT_EQ(ms::active_trace(), nullptr);
    ms::set_active_trace(&t);
    {
        ms::Trace::Span s(ms::active_trace(), "sleep", "test", "layer", 9);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    { ms::Trace::Span none(nullptr, "nothing", "test"); }
    ms::set_active_trace(nullptr);
    ASSERT_EQ(t.size(), 1u);
    std::string path = (std::filesystem::temp_directory_path() / ("trace_test_" + std::to_string(getpid()) + ".json")).string();
    t.write(path);
    ms::Json j = ms::Json::parse_file(path);
    std::filesystem::remove(path);
    auto xs = events_of(j, "X");
    ASSERT_EQ(xs.size(), 1u);
    EXPECT_GE(xs[0]->at("dur").as_number(), 20000.0);
    EXPECT_LT(xs[0]->at("dur").as_number(), 2e6);
    EXPECT_EQ(xs[0]->at("args").at("layer").as_int(), 9);
    EXPECT_THROW(t.write("/no/such/dir/x.json"), std::runtime_error);
}

}  // namespace
