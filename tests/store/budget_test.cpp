// Memory-budget arithmetic: the cache gets exactly what the budget leaves, in
// whole slots, capped at one slot per expert; a budget below resident + KV +
// scratch + one token's experts is refused naming what it needs.
#include <gtest/gtest.h>

#include "store/budget.h"

namespace ms {
namespace {

constexpr uint64_t MiB = 1 << 20;

TEST(Budget, CacheGetsTheRemainderInWholeSlots) {
    MemoryNeeds n;
    n.budget = 4096 * MiB;
    n.resident = 1500 * MiB;
    n.kv = 200 * MiB;
    n.scratch = 50 * MiB;
    n.slot_bytes = 5 * MiB + 8192;
    n.min_slots = 8;
    n.max_slots = 6144;
    MemoryPlan p = plan_memory(n);
    uint64_t left = (4096 - 1750) * MiB;
    EXPECT_EQ(p.slots, int(left / n.slot_bytes));
    EXPECT_EQ(p.slots, 468);  // 2346 MiB / 5.0078 MiB = 468.5
    EXPECT_EQ(p.cache_bytes, uint64_t(p.slots) * n.slot_bytes);
    EXPECT_EQ(p.fixed_bytes, 1750 * MiB);
    EXPECT_LE(p.total_bytes, n.budget);
    EXPECT_GT(p.total_bytes + n.slot_bytes, n.budget);  // one more slot would not fit
    EXPECT_FALSE(p.all_experts_fit);
}

TEST(Budget, NoMoreSlotsThanExperts) {
    MemoryNeeds n{1 << 30, 10 * MiB, 1 * MiB, 1 * MiB, 1 * MiB, 2, 24};
    MemoryPlan p = plan_memory(n);
    EXPECT_EQ(p.slots, 24);
    EXPECT_TRUE(p.all_experts_fit);
    EXPECT_EQ(p.total_bytes, 12 * MiB + 24 * MiB);
}

TEST(Budget, ExactlyTheMinimumFits) {
    MemoryNeeds n{0, 10 * MiB, 2 * MiB, 1 * MiB, 4 * MiB, 8, 128, 3 * MiB};
    n.budget = 16 * MiB + 8 * 4 * MiB;
    EXPECT_EQ(plan_memory(n).slots, 8);
    n.budget -= 1;
    try {
        plan_memory(n);
        FAIL() << "a budget below the minimum was accepted";
    } catch (const std::runtime_error& e) {
        std::string m = e.what();
        EXPECT_NE(m.find("needs at least 48.0 MiB"), std::string::npos) << m;
        EXPECT_NE(m.find("resident weights 10.0 MiB"), std::string::npos) << m;
        EXPECT_NE(m.find("process 3.0 MiB"), std::string::npos) << m;
        EXPECT_NE(m.find("8 expert slots of 4.0 MiB"), std::string::npos) << m;
        EXPECT_NE(m.find("have 48.0 MiB"), std::string::npos) << m;  // 1 byte short
    }
}

TEST(Budget, ResidentAloneOverBudget) {
    MemoryNeeds n{100 * MiB, 200 * MiB, 0, 0, MiB, 1, 10};
    EXPECT_THROW(plan_memory(n), std::runtime_error);
    n.slot_bytes = 0;
    EXPECT_THROW(plan_memory(n), std::runtime_error);
}

}  // namespace
}  // namespace ms
