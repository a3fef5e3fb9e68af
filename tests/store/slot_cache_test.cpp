// Slot cache policies: LRU evicts the least recently used, LFU the least
// frequently used (ties: least recent) with frequencies halved every aging
// period; pinned and loading slots are never victims; the reuse-distance
// tracker agrees with a brute-force count of distinct keys between uses.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "store/reuse_distance.h"
#include "store/slot_cache.h"

namespace ms {
namespace {

// Fills the cache with experts 0..n-1 of layer 0, all loaded.
void fill(SlotCache& c, int n) {
    for (int e = 0; e < n; e++) {
        int s = c.claim(0, e);
        ASSERT_GE(s, 0);
        c.set_ready(s);
        c.touch(s);
    }
}

TEST(SlotCache, ArenaIsAlignedAndSlotsAreDisjoint) {
    SlotCache c(5, 8192, 2, 4, CachePolicy::Lru);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c.arena()) % 4096, 0u);
    EXPECT_EQ(c.arena_bytes(), 5u * 8192u);
    for (int s = 0; s < 5; s++) EXPECT_EQ(c.data(s), c.arena() + 8192 * s);
    EXPECT_THROW(SlotCache(1, 1000, 1, 1, CachePolicy::Lru), std::runtime_error);  // not page sized
    EXPECT_THROW(SlotCache(0, 4096, 1, 1, CachePolicy::Lru), std::runtime_error);
    EXPECT_EQ(parse_cache_policy("lfu"), CachePolicy::Lfu);
    EXPECT_THROW(parse_cache_policy("fifo"), std::runtime_error);
}

TEST(SlotCache, LruEvictsLeastRecentlyUsed) {
    SlotCache c(3, 4096, 1, 10, CachePolicy::Lru);
    fill(c, 3);                 // uses: 0 1 2
    c.touch(c.find(0, 0));      // 1 is now the oldest
    int ev_layer, ev_expert;
    int s = c.claim(0, 3, &ev_layer, &ev_expert);
    EXPECT_EQ(ev_expert, 1);
    EXPECT_EQ(ev_layer, 0);
    EXPECT_EQ(c.find(0, 1), -1);
    EXPECT_EQ(c.find(0, 3), s);
    c.set_ready(s);
    c.touch(s);
    c.claim(0, 4, nullptr, &ev_expert);  // order now 2, 0, 3
    EXPECT_EQ(ev_expert, 2);
    EXPECT_EQ(c.evictions(), 2u);
}

TEST(SlotCache, LfuEvictsLeastFrequentlyUsed) {
    SlotCache c(3, 4096, 1, 10, CachePolicy::Lfu);
    fill(c, 3);
    for (int i = 0; i < 3; i++) c.touch(c.find(0, 0));  // 0: 4 uses
    c.touch(c.find(0, 2));                              // 2: 2 uses, 1: 1 use (but 1 is not the most recent)
    int ev;
    int s = c.claim(0, 5, nullptr, &ev);
    EXPECT_EQ(ev, 1);
    c.set_ready(s);
    c.touch(s);                 // 5: 1 use, most recent
    c.claim(0, 6, nullptr, &ev);
    EXPECT_EQ(ev, 5);           // fewest uses wins over recency
}

TEST(SlotCache, LfuAgingLetsOldFavouritesGo) {
    // Expert 0 is used 300 times, then only expert 1 for a while, then 0
    // once more, so 0 is both the most recent and (without aging) the most
    // used: LRU and plain LFU would evict 1. With counts halved every 64 uses
    // 0's old popularity fades and it is the victim.
    SlotCache c(2, 4096, 1, 10, CachePolicy::Lfu);
    ASSERT_EQ(c.aging_period(), 64u);
    fill(c, 2);
    for (int i = 0; i < 300; i++) c.touch(c.find(0, 0));
    for (int i = 0; i < 200; i++) c.touch(c.find(0, 1));
    c.touch(c.find(0, 0));
    int ev;
    c.claim(0, 2, nullptr, &ev);
    EXPECT_EQ(ev, 0);

    // Within one aging period the counts decide over recency.
    SlotCache d(2, 4096, 1, 10, CachePolicy::Lfu);
    fill(d, 2);
    for (int i = 0; i < 40; i++) d.touch(d.find(0, 0));  // 43 touches in all: no aging yet
    d.touch(d.find(0, 1));
    d.claim(0, 2, nullptr, &ev);
    EXPECT_EQ(ev, 1);
}

TEST(SlotCache, PinnedAndLoadingSlotsAreNeverVictims) {
    SlotCache c(3, 4096, 2, 4, CachePolicy::Lru);
    fill(c, 3);
    c.pin(c.find(0, 0));
    c.pin(c.find(0, 1));
    int ev;
    int s = c.claim(1, 0, nullptr, &ev);  // only 2 is free to go
    EXPECT_EQ(ev, 2);
    // s is loading: not a victim either, so nothing is left.
    EXPECT_EQ(c.state(s), SlotCache::State::Loading);
    EXPECT_EQ(c.claim(1, 1), -1);
    c.set_ready(s);
    EXPECT_GE(c.claim(1, 1), 0);  // now the loaded, unpinned slot can go
    c.unpin(c.find(0, 0));
    EXPECT_EQ(c.pins(c.find(0, 1)), 1);
}

TEST(SlotCache, KeepSinceProtectsRecentUses) {
    SlotCache c(3, 4096, 1, 10, CachePolicy::Lru);
    fill(c, 3);                          // uses at clock 1, 2, 3
    const uint64_t since = c.clock() + 1;
    c.touch(c.find(0, 0));               // used "this step"
    int ev;
    c.claim(0, 5, nullptr, &ev, since);  // 0 is protected; 1 is the oldest of the rest
    EXPECT_EQ(ev, 1);
    c.touch(c.find(0, 2));               // 2 used this step too
    EXPECT_EQ(c.claim(0, 6, nullptr, nullptr, since), -1);
    c.set_ready(c.find(0, 5));           // loaded this step: also kept
    EXPECT_EQ(c.claim(0, 6, nullptr, nullptr, since), -1);
    EXPECT_GE(c.claim(0, 6, nullptr, &ev, c.clock() + 1), 0);  // next step: the LRU one goes
    EXPECT_EQ(ev, 0);
}

TEST(SlotCache, DropFreesTheSlot) {
    SlotCache c(1, 4096, 1, 4, CachePolicy::Lru);
    int s = c.claim(0, 3);
    c.drop(s);
    EXPECT_EQ(c.find(0, 3), -1);
    int ev;
    EXPECT_EQ(c.claim(0, 2, nullptr, &ev), s);
    EXPECT_EQ(ev, -1);  // a free slot, not an eviction
    EXPECT_EQ(c.evictions(), 0u);
}

TEST(ReuseDistance, MatchesBruteForce) {
    const size_t keys = 40;
    ReuseDistance rd(keys);  // a tree of 1024 uses: compacts many times over 20000
    std::mt19937 rng(7);
    std::vector<size_t> history;
    std::vector<int64_t> last(keys, -1);
    for (int i = 0; i < 20000; i++) {
        // Skewed keys so short and long distances both occur.
        size_t k = rng() % 4 == 0 ? rng() % keys : rng() % 6;
        int64_t want = -1;
        if (last[k] >= 0) {
            std::set<size_t> distinct(history.begin() + last[k] + 1, history.end());
            want = int64_t(distinct.size());
        }
        ASSERT_EQ(rd.use(k), want) << "use " << i;
        last[k] = int64_t(history.size());
        history.push_back(k);
    }
}

}  // namespace
}  // namespace ms
