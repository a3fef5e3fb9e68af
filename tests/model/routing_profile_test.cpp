// --routing-profile's file: written, merged (older counts halved) and read
// back; another model's profile or a damaged file is refused with the
// file's name and the problem; the hottest experts come first.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "../store/test_util.h"
#include "model/routing_profile.h"

namespace ms {
namespace {

void write_text(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    f << text;
}

// The message of read()'s exception ("" when it reads).
std::string read_error(const std::string& path, int layers, int experts) {
    try {
        RoutingProfile::read(path, layers, experts);
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "";
}

TEST(RoutingProfile, MissingFileIsAnEmptyProfileOfTheShape) {
    test::TempDir dir;
    const RoutingProfile p = RoutingProfile::read(dir.file("none.json"), 3, 5);
    EXPECT_EQ(p.n_layer, 3);
    EXPECT_EQ(p.n_expert, 5);
    EXPECT_EQ(p.tokens, 0u);
    ASSERT_EQ(p.uses.size(), 15u);
    for (uint64_t u : p.uses) EXPECT_EQ(u, 0u);
    EXPECT_TRUE(p.hottest(10).empty());
}

TEST(RoutingProfile, MergeHalvesTheOlderCounts) {
    test::TempDir dir;
    const std::string path = dir.file("p.json");
    RoutingProfile a(2, 4);
    a.tokens = 10;
    a.at(0, 1) = 7;
    a.at(1, 3) = 4;
    RoutingProfile::merge_into(path, a);
    RoutingProfile r = RoutingProfile::read(path, 2, 4);
    EXPECT_EQ(r.tokens, 10u);
    EXPECT_EQ(r.uses, a.uses);
    RoutingProfile b(2, 4);
    b.tokens = 3;
    b.at(1, 0) = 5;
    b.at(0, 1) = 1;
    RoutingProfile::merge_into(path, b);
    r = RoutingProfile::read(path, 2, 4);
    EXPECT_EQ(r.tokens, 10u / 2 + 3);
    EXPECT_EQ(r.at(0, 1), 7u / 2 + 1);
    EXPECT_EQ(r.at(1, 3), 4u / 2);
    EXPECT_EQ(r.at(1, 0), 5u);
    EXPECT_EQ(r.at(0, 0), 0u);
}

TEST(RoutingProfile, HottestFirstTiesByLayerThenExpert) {
    RoutingProfile p(2, 3);
    p.at(1, 2) = 9;
    p.at(0, 2) = 4;
    p.at(1, 0) = 4;
    p.at(0, 1) = 1;
    const auto hot = p.hottest(3);
    ASSERT_EQ(hot.size(), 3u);
    EXPECT_EQ(hot[0], std::make_pair(1, 2));
    EXPECT_EQ(hot[1], std::make_pair(0, 2));
    EXPECT_EQ(hot[2], std::make_pair(1, 0));
    EXPECT_EQ(p.hottest(100).size(), 4u);  // only experts with uses
}

TEST(RoutingProfile, BadFilesAreRefusedByName) {
    test::TempDir dir;
    const std::string path = dir.file("bad.json");
    RoutingProfile a(2, 4);
    a.at(0, 0) = 1;
    RoutingProfile::merge_into(path, a);
    std::string e = read_error(path, 3, 4);
    EXPECT_EQ(e.rfind(path + ": written for 2 layers of 4 experts; this model has 3 of 4", 0), 0u) << e;
    const std::pair<const char*, const char*> cases[] = {
        {"{", "bad.json"},
        {"[]", "not a JSON object"},
        {R"({"format":"x","layers":1,"experts":1,"tokens":0,"uses":[[0]]})", "not a routing profile"},
        {R"({"format":"moestream routing profile","layers":1,"experts":1,"uses":[[0]]})", "needs"},
        {R"({"format":"moestream routing profile","layers":1,"experts":1,"tokens":0,"uses":[[-1]]})",
         "a use count is not a count"},
        {R"({"format":"moestream routing profile","layers":1,"experts":1,"tokens":0,"uses":[[0.5]]})",
         "a use count is not a count"},
        {R"({"format":"moestream routing profile","layers":1,"experts":1,"tokens":0,"uses":[[0,1]]})",
         "\"uses\"[0] is not an array of 1 counts"},
        {R"({"format":"moestream routing profile","layers":1,"experts":1,"tokens":0,"uses":{}})",
         "\"uses\" is not an array of 1 layers"},
    };
    for (const auto& [text, want] : cases) {
        write_text(path, text);
        e = read_error(path, 1, 1);
        EXPECT_EQ(e.rfind(path, 0), 0u) << text << ": " << e;
        EXPECT_NE(e.find(want), std::string::npos) << text << ": " << e;
    }
}

}  // namespace
}  // namespace ms
