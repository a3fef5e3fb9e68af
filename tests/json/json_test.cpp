#include "json/json.h"

#include <gtest/gtest.h>

using ms::Json;

TEST(Json, ParsesAndDumpsRoundTrip) {
    Json j = Json::parse(R"({"a": [1, 2.5, "x\u00e9\n"], "b": {"c": null, "d": true}, "e": -3e2})");
    EXPECT_EQ(j.at("a")[0].as_int(), 1);
    EXPECT_DOUBLE_EQ(j.at("a")[1].as_number(), 2.5);
    EXPECT_EQ(j.at("a")[2].as_string(), "x\xc3\xa9\n");
    EXPECT_TRUE(j.at("b").at("c").is_null());
    EXPECT_TRUE(j.at("b").at("d").as_bool());
    EXPECT_DOUBLE_EQ(j.at("e").as_number(), -300.0);
    EXPECT_EQ(j.dump(), R"({"a": [1, 2.5, "xé\n"], "b": {"c": null, "d": true}, "e": -300})");
    EXPECT_EQ(Json::parse(j.dump()).dump(), j.dump());
    EXPECT_EQ(Json("é").dump(-1, true), "\"\\u00e9\"");
}

TEST(Json, KeepsKeyOrder) {
    Json j = Json::object();
    j["z"] = 1;
    j["a"] = 2;
    EXPECT_EQ(j.dump(), R"({"z": 1, "a": 2})");
    EXPECT_EQ(j.dump(2), "{\n  \"z\": 1,\n  \"a\": 2\n}");
}

TEST(Json, SurrogatePairs) {
    EXPECT_EQ(Json::parse(R"("\ud83d\ude00")").as_string(), "\xf0\x9f\x98\x80");
}

TEST(Json, RejectsMalformedWithPosition) {
    for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "tru", "\"abc", "1 2", "[1e]", "{\"a\":01x}", "01", "-01",
                            "00", "[007]", "00.5", "-00", "{\"a\": 01}"}) {
        EXPECT_THROW(Json::parse(bad, "t.json"), std::runtime_error) << bad;
    }
    // Zero itself, and zeros after the first digit or the point, are numbers.
    for (const char* good : {"0", "-0", "0.05", "10", "0e5", "-0.0", "100"}) EXPECT_NO_THROW(Json::parse(good)) << good;
    try {
        Json::parse("{\n  \"a\": ]", "ctx.json");
        FAIL();
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("ctx.json: JSON error at line 2"), std::string::npos) << e.what();
    }
}

TEST(Json, DeepNestingIsAnErrorNotACrash) {
    std::string deep(100000, '[');
    EXPECT_THROW(Json::parse(deep), std::runtime_error);
}

// The server parses request bodies with limits; the defaults keep the old
// behaviour (a repeated key's last value wins, at the first one's place).
TEST(Json, LimitsForUntrustedText) {
    ms::JsonLimits lim;
    lim.max_bytes = 16;
    EXPECT_THROW(Json::parse(R"({"key": "a long value"})", "body", lim), std::runtime_error);
    EXPECT_EQ(Json::parse("[1]", "body", lim).size(), 1u);

    lim = {};
    lim.max_depth = 3;
    EXPECT_NO_THROW(Json::parse("[[[1]]]", "body", lim));
    EXPECT_THROW(Json::parse("[[[[1]]]]", "body", lim), std::runtime_error);

    EXPECT_EQ(Json::parse(R"({"a": 1, "b": 2, "a": 3})").dump(), R"({"a": 3, "b": 2})");
    lim = {};
    lim.allow_duplicate_keys = false;
    try {
        Json::parse(R"({"a": 1, "b": {"c": 1, "c": 2}})", "body", lim);
        FAIL();
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("duplicate key 'c'"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(Json::parse(R"({"a": {"c": 1}, "b": {"c": 2}})", "body", lim));
}

// An object with many keys parses in n log n: 200k keys (about 2 MB) take a
// second or two, where a lookup per inserted key would take many minutes.
TEST(Json, ManyKeysParseFastAndDuplicatesAreFound) {
    std::string text = "{";
    for (int i = 0; i < 200000; i++) text += (i ? ",\"" : "\"") + std::to_string(i) + "\":" + std::to_string(i);
    Json j = Json::parse(text + "}");
    ASSERT_EQ(j.size(), 200000u);
    EXPECT_EQ(j.as_object()[123456].first, "123456");
    ms::JsonLimits lim;
    lim.allow_duplicate_keys = false;
    EXPECT_THROW(Json::parse(text + ",\"777\":1}", "body", lim), std::runtime_error);
    EXPECT_EQ(Json::parse(text + ",\"777\":1}").at("777").as_int(), 1);
}
