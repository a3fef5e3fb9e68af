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
    for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "tru", "\"abc", "1 2", "[1e]", "{\"a\":01x}"}) {
        EXPECT_THROW(Json::parse(bad, "t.json"), std::runtime_error) << bad;
    }
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
