// Slot cache policies: LRU evicts the least recently used, LFU the least
// frequently used (ties: least recent) with frequencies halved every aging
// period, WLFU keeps the last step's experts and evicts the rest by use count
// kept across evictions; pinned and loading slots are never victims; the
// reuse-distance tracker agrees with a brute-force count of distinct keys
// between uses.
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
    EXPECT_EQ(parse_cache_policy("wlfu"), CachePolicy::Wlfu);
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

// Claims (layer 0, e) into the cache, loaded and used once.
int use_new(SlotCache& c, int e, int* evicted) {
    int s = c.claim(0, e, nullptr, evicted);
    if (s >= 0) {
        c.set_ready(s);
        c.touch(s);
    }
    return s;
}

TEST(SlotCache, WlfuKeepsTheLastStepAndEvictsTheLeastUsed) {
    SlotCache c(4, 4096, 1, 10, CachePolicy::Wlfu);
    EXPECT_EQ(c.aging_period(), 64u * 4u);
    int ev;
    c.begin_step(1);                           // step A: 0 used 6 times, 1 once (clock 7)
    use_new(c, 0, &ev);
    use_new(c, 1, &ev);
    for (int i = 0; i < 5; i++) c.touch(c.find(0, 0));
    c.begin_step(1);                           // step B: 7 touches before, so the window is 7 + 7/8 = 7
    EXPECT_EQ(c.window(), 7u);
    use_new(c, 2, &ev);                       // clock 8
    use_new(c, 3, &ev);                       // clock 9: the cache is full
    c.begin_step(1);                           // step C: B made 2 touches: window 2 (clock 8 and 9 kept)
    EXPECT_EQ(c.window(), 2u);
    use_new(c, 4, &ev);                       // outside the window: 0 (6 uses, at 7) and 1 (1 use, at 2)
    EXPECT_EQ(ev, 1);
    // Now 0 (at 7) and 2 (at 8) are outside the 2-touch window (clock 10).
    // LRU would take 0; WLFU takes 2, used once against 0's six times.
    use_new(c, 5, &ev);
    EXPECT_EQ(ev, 2);
    EXPECT_NE(c.find(0, 0), -1);
}

TEST(SlotCache, WlfuInsideTheWindowStillGoesByCounts) {
    SlotCache c(3, 4096, 1, 10, CachePolicy::Wlfu);
    int ev;
    c.begin_step(1);
    use_new(c, 0, &ev);
    for (int i = 0; i < 3; i++) c.touch(c.find(0, 0));  // 0: 4 uses
    use_new(c, 1, &ev);                                  // 1 use each, at clock 5 and 6
    use_new(c, 2, &ev);
    c.begin_step(1);                                      // window 6: every slot is inside it
    use_new(c, 3, &ev);
    EXPECT_EQ(ev, 1);  // fewest uses, the older of 1 and 2 (LRU would take 0)
}

TEST(SlotCache, WlfuEvictsTheLeastRecentWithinAPrefillChunk) {
    SlotCache c(3, 4096, 1, 10, CachePolicy::Wlfu);
    int ev;
    c.begin_step(1);
    use_new(c, 0, &ev);
    for (int i = 0; i < 3; i++) c.touch(c.find(0, 0));  // 0: 4 uses, the least recent
    use_new(c, 1, &ev);
    use_new(c, 2, &ev);
    c.begin_step(16);
    use_new(c, 3, &ev);
    EXPECT_EQ(ev, 0);  // by recency, not by count (a decode step would take 1)
}

// A decode step of several sequences counts an expert once per sequence
// that chose it: the one three chose outlives two each chose once, where
// one use apiece would have made it the victim (the least recent of equals).
TEST(SlotCache, WlfuCountsEachSequenceThatChoseAnExpert) {
    for (int rows : {1, 3}) {
        SlotCache c(3, 4096, 1, 10, CachePolicy::Wlfu);
        c.begin_step(1);
        int ev;
        const int s = c.claim(0, 0, nullptr, &ev);
        c.set_ready(s);
        c.touch(s, rows);
        EXPECT_EQ(c.clock(), uint64_t(rows));
        use_new(c, 1, &ev);
        use_new(c, 2, &ev);
        c.begin_step(1);  // every slot inside the window: counts decide
        use_new(c, 3, &ev);
        EXPECT_EQ(ev, rows == 3 ? 1 : 0) << rows << " rows";
    }
    // In a prefill chunk a touch is one use, whatever the rows.
    SlotCache p(3, 4096, 1, 10, CachePolicy::Wlfu);
    p.begin_step(16);
    const int s = p.claim(0, 0);
    p.set_ready(s);
    p.touch(s, 5);
    EXPECT_EQ(p.clock(), 1u);
}

TEST(SlotCache, WlfuCountsOutliveEviction) {
    // No step begun: the window is empty and WLFU is LFU over counts kept
    // per (layer, expert).
    SlotCache c(3, 4096, 1, 10, CachePolicy::Wlfu);
    int ev;
    auto use = [&](int e, int times) {
        use_new(c, e, &ev);
        for (int i = 1; i < times; i++) c.touch(c.find(0, e));
    };
    use(0, 3);          // 0: 3 uses
    use(1, 5);          // 1: 5
    use(2, 5);          // 2: 5
    use(3, 2);          // evicts 0 (3 uses); 3: 2
    EXPECT_EQ(ev, 0);
    use(0, 1);          // evicts 3; 0 comes back with 3 + 1 uses
    EXPECT_EQ(ev, 3);
    use(3, 1);          // evicts 0 (4); 3 comes back with 2 + 1
    EXPECT_EQ(ev, 0);
    use(0, 1);          // evicts 3 (3); 0: 5 uses, as many as 1 and 2
    EXPECT_EQ(ev, 3);
    use(8, 1);          // all at 5 uses: the least recent, 1, goes; 0 (just read, 1 use had
    EXPECT_EQ(ev, 1);   // its count been reset) stays
    EXPECT_NE(c.find(0, 0), -1);
}

// Decode steps of several sequences whose union (3 layers x 10 experts)
// outgrows the cache (20 slots), in the same layer order every step, each
// layer's experts pinned while it runs. Alone, every policy evicts each
// expert just before the next step needs it: no hits once the cache is
// full. With the step fit what was resident when a step began stays, and
// the overflow streams through the slots of the layer before: a third of
// the uses hit, (slots - a layer's experts) / union.
TEST(SlotCache, StepFitKeepsAStablePartOfACyclingUnion) {
    const int layers = 3, per_layer = 10, n_slots = 20;
    for (CachePolicy policy : {CachePolicy::Lru, CachePolicy::Lfu, CachePolicy::Wlfu}) {
        for (bool fit : {false, true}) {
            SlotCache c(n_slots, 4096, layers, per_layer, policy);
            c.set_step_fit(fit);
            int64_t hits = 0, uses = 0;
            std::vector<int> held;
            for (int step = 0; step < 12; step++) {
                c.begin_step(1, 2);
                // The first step has no union before it to measure.
                EXPECT_EQ(c.step_fit_active(), fit && step > 0);
                for (int l = 0; l < layers; l++) {
                    held.clear();
                    for (int e = 0; e < per_layer; e++) {
                        int s = c.find(l, e);
                        if (s >= 0) {
                            hits += step >= 2;
                        } else {
                            s = c.claim(l, e);
                            ASSERT_GE(s, 0);
                            c.set_ready(s);
                        }
                        c.touch(s, 2);  // two sequences chose it
                        c.pin(s);
                        held.push_back(s);
                        uses += step >= 2;
                    }
                    for (int s : held) c.unpin(s);
                }
            }
            const double hit_rate = double(hits) / double(uses);
            if (fit) {
                EXPECT_NEAR(hit_rate, double(n_slots - per_layer) / (layers * per_layer), 1e-9)
                    << "policy " << int(policy);
            } else {
                EXPECT_EQ(hits, 0) << "policy " << int(policy);
            }
        }
    }
}

// The union is measured in distinct experts: touching one expert many
// times in a step (a prefill's rows, repeated uses) is not an overflow.
TEST(SlotCache, StepFitCountsEachExpertOnceAStep) {
    SlotCache c(3, 4096, 1, 10, CachePolicy::Lru);
    c.begin_step(1, 2);
    fill(c, 2);
    for (int i = 0; i < 10; i++) c.touch(c.find(0, 0));
    c.begin_step(1, 2);
    EXPECT_FALSE(c.step_fit_active());  // 2 experts, 12 touches
    c.touch(c.find(0, 0));              // 0, 1 again and 2, 3, 4 new: 5 experts
    c.touch(c.find(0, 1));
    for (int e = 2; e < 5; e++) {
        const int s = c.claim(0, e);
        c.set_ready(s);
        c.touch(s);
    }
    c.begin_step(1, 2);
    EXPECT_TRUE(c.step_fit_active());   // 5 experts in 3 slots
    c.begin_step(8);
    EXPECT_FALSE(c.step_fit_active());  // a prefill chunk evicts by its policy
    c.begin_step(1, 2);
    EXPECT_TRUE(c.step_fit_active());   // the chunk between kept the decode step's union
    c.begin_step(1);
    EXPECT_FALSE(c.step_fit_active());  // one sequence: the policy alone
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

// The GPU's VRAM tier keeps its slots in device memory and asks the cache
// only which slot a miss takes: no arena, any slot size, and next_victim()
// names the slot claim() then takes (a free one first), under every policy.
TEST(SlotCache, WithoutAnArenaItChoosesWhatClaimTakes) {
    EXPECT_THROW(SlotCache(3, 1000, 1, 8, CachePolicy::Lru), std::runtime_error);  // not 4 KiB
    for (CachePolicy p : {CachePolicy::Lru, CachePolicy::Lfu, CachePolicy::Wlfu}) {
        SlotCache c(3, 1000, 2, 8, p, SlotCache::Arena::None);
        EXPECT_EQ(c.arena(), nullptr);
        std::mt19937 rng(7);
        int free_seen = 0;
        for (int i = 0; i < 200; i++) {
            const int layer = int(rng() % 2), expert = int(rng() % 8);
            if (i % 10 == 0) c.begin_step(1, 1 + int(rng() % 3));
            const int have = c.find(layer, expert);
            if (have >= 0) {
                c.touch(have);
                continue;
            }
            const int predicted = c.next_victim();
            const int predicted_layer = predicted >= 0 ? c.layer_of(predicted) : -2;
            int el = -9, ee = -9;
            const int s = c.claim(layer, expert, &el, &ee);
            ASSERT_GE(s, 0);
            EXPECT_EQ(s, predicted) << "step " << i;
            if (predicted_layer < 0) {
                free_seen++;
                EXPECT_EQ(el, -1);
            } else {
                EXPECT_EQ(el, predicted_layer);
            }
            c.set_ready(s);
            c.touch(s);
        }
        EXPECT_EQ(free_seen, 3);  // the three free slots, then victims only
    }
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
