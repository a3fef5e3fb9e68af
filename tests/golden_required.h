// Included by a test program whose every test reads the golden reference
// data (golden_dir.h): without it, the whole program is skipped once, in a
// global environment, with the reason and the count logged.
#pragma once
#include "golden_dir.h"

namespace ms::golden {

class SkipProgramWithoutGolden : public ::testing::Environment {
public:
    void SetUp() override {
        if (!available()) GTEST_SKIP() << skip_reason(::testing::UnitTest::GetInstance()->test_to_run_count());
    }
};

inline const bool kSkipProgramWithoutGolden =
    (::testing::AddGlobalTestEnvironment(new SkipProgramWithoutGolden), true);

}  // namespace ms::golden
