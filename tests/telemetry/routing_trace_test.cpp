// telemetry/routing_trace: recording across forward calls, the text format
// round trip, and one-line errors naming the line for bad files.
#include "telemetry/routing_trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>

using namespace ms;

namespace {

std::string error_of(const std::string& text) {
    try {
        RoutingTrace::parse(text, "t.trace");
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(RoutingTrace, RecordsForwardCallsInOrder) {
    RoutingTrace tr(3, 8, 2);  // layer 0 dense: never recorded
    // A prefill call of 2 tokens, then two decode steps.
    const int32_t p1[] = {0, 1, 2, 3}, p2[] = {4, 5, 6, 7};
    tr.record(1, p1, 2, 2);
    tr.record(2, p2, 2, 2);
    const int32_t d1[] = {1, 2}, d2[] = {3, 4};
    tr.record(1, d1, 1, 2);
    tr.record(2, d2, 1, 2);
    tr.record(1, d2, 1, 2);
    ASSERT_EQ(tr.n_tokens(), 4);
    EXPECT_FALSE(tr.routed(0));
    EXPECT_TRUE(tr.routed(1));
    EXPECT_EQ(tr.ids(0, 0)[0], -1);
    EXPECT_EQ(tr.ids(1, 1)[0], 2);
    EXPECT_EQ(tr.ids(1, 2)[1], 7);
    EXPECT_EQ(tr.ids(2, 1)[0], 1);
    EXPECT_EQ(tr.ids(2, 2)[0], 3);
    EXPECT_EQ(tr.ids(3, 1)[1], 4);
    EXPECT_EQ(tr.ids(3, 2)[0], -1);  // the last call stopped after layer 1
}

TEST(RoutingTrace, WriteThenReadGivesTheSameTrace) {
    RoutingTrace tr(2, 16, 3);
    const int32_t a[] = {5, 1, 9, 0, 2, 15}, b[] = {3, 4, 8, 7, 6, 10};
    tr.record(0, a, 2, 3);
    tr.record(1, b, 2, 3);
    const std::string path = "/tmp/moestream-routing-" + std::to_string(getpid()) + ".trace";
    tr.write(path);
    RoutingTrace back = RoutingTrace::read(path);
    std::remove(path.c_str());
    ASSERT_EQ(back.n_tokens(), 2);
    EXPECT_EQ(back.n_layer(), 2);
    EXPECT_EQ(back.n_expert(), 16);
    EXPECT_EQ(back.k(), 3);
    for (int t = 0; t < 2; t++)
        for (int l = 0; l < 2; l++)
            for (int r = 0; r < 3; r++) EXPECT_EQ(back.ids(t, l)[r], tr.ids(t, l)[r]) << t << " " << l << " " << r;
}

TEST(RoutingTrace, BadFilesNameTheLine) {
    const std::string head = "# moestream routing trace v1 layers=2 experts=4 k=2 tokens=1\n";
    EXPECT_NE(error_of("hello\n").find("t.trace:1: not a moestream routing trace"), std::string::npos);
    EXPECT_NE(error_of("# moestream routing trace v1 layers=0 experts=4 k=2 tokens=1\n").find("bad header"),
              std::string::npos);
    EXPECT_NE(error_of(head + "0 0 1 9\n").find("t.trace:2: expert 9 outside"), std::string::npos);
    EXPECT_NE(error_of(head + "0 0 1 1\n").find("listed twice"), std::string::npos);
    EXPECT_NE(error_of(head + "0 0 1 x\n").find("t.trace:2: expected integers"), std::string::npos);
    EXPECT_NE(error_of(head + "0 0 1 2 3\n").find("more than k"), std::string::npos);
    EXPECT_NE(error_of(head + "1 0 1\n").find("token 1 outside"), std::string::npos);
    EXPECT_NE(error_of(head + "0 5 1\n").find("layer 5 outside"), std::string::npos);
    // Fewer lines than tokens x routed layers.
    EXPECT_NE(error_of("# moestream routing trace v1 layers=2 experts=4 k=2 tokens=3\n0 0 1\n").find("1 lines for 3"),
              std::string::npos);
    EXPECT_EQ(error_of(head + "0 0 1 2\n0 1 3\n"), "");
}

// A forward call's layers may come in slices of its tokens (layer-major
// prefill with -b larger than -ub): begin_call places each slice after the
// layer's earlier ones, so the call holds its real token count.
TEST(RoutingTrace, SlicedLayersOfOneCallFillItsTokensInOrder) {
    ms::RoutingTrace tr(2, 8, 1);
    const int32_t a[2] = {1, 2}, b[2] = {3, 4}, c[2] = {5, 6}, d[2] = {7, 0};
    tr.begin_call(4);
    tr.record(0, a, 2, 1);  // layer 0, tokens 0-1
    tr.record(0, b, 2, 1);  // layer 0, tokens 2-3
    tr.record(1, c, 2, 1);  // layer 1, tokens 0-1
    tr.record(1, d, 2, 1);  // layer 1, tokens 2-3
    tr.begin_call(1);       // a decode step
    tr.record(0, a, 1, 1);
    tr.record(1, b, 1, 1);
    ASSERT_EQ(tr.n_tokens(), 5);
    const int32_t want0[5] = {1, 2, 3, 4, 1}, want1[5] = {5, 6, 7, 0, 3};
    for (int t = 0; t < 5; t++) {
        EXPECT_EQ(tr.ids(t, 0)[0], want0[t]) << t;
        EXPECT_EQ(tr.ids(t, 1)[0], want1[t]) << t;
    }
}
