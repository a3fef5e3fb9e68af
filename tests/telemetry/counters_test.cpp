// Store counters: the next-layer prediction figures in the report.
#include <gtest/gtest.h>

#include "telemetry/counters.h"

namespace ms {
namespace {

double num(const Json& object, const char* key) {
    const Json* v = object.find(key);
    EXPECT_NE(v, nullptr) << key;
    return v ? v->as_number() : -1;
}

TEST(Counters, PredictionPrecisionAndRecallPerLayerAndOverall) {
    StoreCounters c;
    c.init(3, 8);
    // Layer 1: 4 guessed, 4 used, 3 right; then 4 guessed, 2 used, 2 right.
    c.record_prediction(1, 4, 4, 3);
    c.record_prediction(1, 4, 2, 2);
    // Layer 2: 4 guessed, 8 used, 1 right.
    c.record_prediction(2, 4, 8, 1);
    c.record_use(1, 0, true, false, -1);
    c.record_use(2, 0, false, false, -1);
    c.prefetch_wasted_bytes = 12345;
    Json j = c.to_json();
    const Json& pf = j["prefetch"];
    EXPECT_EQ(num(pf, "predicted"), 12);
    EXPECT_DOUBLE_EQ(num(pf, "prediction_precision"), 6.0 / 12.0);
    EXPECT_DOUBLE_EQ(num(pf, "prediction_recall"), 6.0 / 14.0);
    EXPECT_EQ(num(pf, "wasted_bytes"), 12345);
    const Json& layers = j["layers"];
    ASSERT_EQ(layers.size(), 2u);  // layer 0 saw nothing
    EXPECT_EQ(num(layers[0], "layer"), 1);
    EXPECT_DOUBLE_EQ(num(layers[0], "prediction_precision"), 5.0 / 8.0);
    EXPECT_DOUBLE_EQ(num(layers[0], "prediction_recall"), 5.0 / 6.0);
    EXPECT_DOUBLE_EQ(num(layers[1], "prediction_precision"), 1.0 / 4.0);
    EXPECT_DOUBLE_EQ(num(layers[1], "prediction_recall"), 1.0 / 8.0);
}

TEST(Counters, NoPredictionLeavesLayerFiguresOut) {
    StoreCounters c;
    c.init(1, 4);
    c.record_use(0, 1, false, false, -1);
    Json j = c.to_json();
    const Json& layers = j["layers"];
    ASSERT_EQ(layers.size(), 1u);
    EXPECT_EQ(layers[0].find("prediction_precision"), nullptr);
    EXPECT_DOUBLE_EQ(num(j["prefetch"], "prediction_recall"), 0.0);
}

}  // namespace
}  // namespace ms
