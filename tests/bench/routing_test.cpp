// bench/routing: statistics checked on traces small enough to count by hand,
// and the cache replay against independent implementations: LRU as a list,
// WLFU as its rule reads over std::map, and Belady's figure against an
// exhaustive search over every eviction choice (the optimum by definition).
#include "bench/routing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <list>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

using namespace ms;

namespace {

// One routed layer; rows of k ids per token.
RoutingTrace one_layer(int n_expert, int k, const std::vector<std::vector<int32_t>>& rows) {
    RoutingTrace tr(1, n_expert, k);
    for (const auto& r : rows) tr.record(0, r.data(), 1, k);
    return tr;
}

RoutingTrace random_trace(int layers, int n_expert, int k, int tokens, uint64_t seed) {
    std::mt19937_64 rng(seed);
    RoutingTrace tr(layers, n_expert, k);
    for (int t = 0; t < tokens; t++)
        for (int l = 0; l < layers; l++) {
            // A skewed choice: lower ids more likely.
            std::vector<int32_t> pick;
            while (int(pick.size()) < k) {
                int e = int(std::min<double>(n_expert - 1, std::floor(std::pow(double(rng() % 1000) / 1000, 2) * n_expert)));
                if (std::find(pick.begin(), pick.end(), e) == pick.end()) pick.push_back(e);
            }
            tr.record(l, pick.data(), 1, k);
        }
    return tr;
}

// The accesses in decode order.
std::vector<int64_t> accesses(const RoutingTrace& tr) {
    std::vector<int64_t> seq;
    for (int64_t t = 0; t < tr.n_tokens(); t++)
        for (int l = 0; l < tr.n_layer(); l++)
            for (int r = 0; r < tr.k() && tr.ids(t, l)[r] >= 0; r++) seq.push_back(int64_t(l) * tr.n_expert() + tr.ids(t, l)[r]);
    return seq;
}

// Fewest misses over every possible eviction choice (exponential: tiny traces only).
int min_misses(const std::vector<int64_t>& seq, size_t i, std::set<int64_t> cache, size_t cap) {
    for (; i < seq.size(); i++) {
        if (cache.count(seq[i])) continue;
        if (cache.size() < cap) {
            cache.insert(seq[i]);
            continue;
        }
        int best = 1 << 30;
        for (int64_t victim : cache) {
            std::set<int64_t> c = cache;
            c.erase(victim);
            c.insert(seq[i]);
            best = std::min(best, 1 + min_misses(seq, i + 1, c, cap));
        }
        // The misses before this one are counted by the caller's loop below.
        return best;
    }
    return 0;
}

int exhaustive_misses(const std::vector<int64_t>& seq, size_t cap) {
    // Count compulsory fills until the cache is full, then search.
    std::set<int64_t> cache;
    int misses = 0;
    size_t i = 0;
    for (; i < seq.size() && (cache.size() < cap || cache.count(seq[i])); i++)
        if (!cache.count(seq[i])) cache.insert(seq[i]), misses++;
    return misses + min_misses(seq, i, cache, cap);
}

// WLFU as docs/routing.md states it, written plainly: each token is a step
// whose window is the previous step's touches plus an eighth; a victim is
// never one of the current layer's experts; outside the window goes before
// inside, then the fewest uses (counted per expert across evictions, all
// halved every 64 x cap uses), then the least recent.
double reference_wlfu(const RoutingTrace& tr, int64_t cap) {
    std::map<int64_t, int64_t> last_use;  // resident key -> clock of its latest use
    std::map<int64_t, uint32_t> uses;
    int64_t clock = 0, step_start = 0, window = 0, since_aging = 0, hits = 0, total = 0;
    for (int64_t t = 0; t < tr.n_tokens(); t++) {
        if (clock > step_start) window = (clock - step_start) + (clock - step_start) / 8;
        step_start = clock;
        for (int l = 0; l < tr.n_layer(); l++) {
            std::set<int64_t> this_layer;
            for (int r = 0; r < tr.k() && tr.ids(t, l)[r] >= 0; r++) {
                const int64_t key = int64_t(l) * tr.n_expert() + tr.ids(t, l)[r];
                if (last_use.count(key)) {
                    hits++;
                } else if (int64_t(last_use.size()) == cap) {
                    int64_t victim = -1;
                    std::tuple<bool, uint32_t, int64_t> best;
                    for (const auto& [k, at] : last_use) {
                        if (this_layer.count(k)) continue;
                        std::tuple<bool, uint32_t, int64_t> rank{at > clock - window, uses[k], at};
                        if (victim < 0 || rank < best) victim = k, best = rank;
                    }
                    last_use.erase(victim);
                }
                last_use[key] = ++clock;
                uses[key]++;
                if (++since_aging >= 64 * cap) {
                    since_aging = 0;
                    for (auto& u : uses) u.second /= 2;
                }
                this_layer.insert(key);
                total++;
            }
        }
    }
    return double(hits) / double(total);
}

}  // namespace

TEST(RoutingStats, CountsMatchAHandCount) {
    // 8 experts, top-2, 5 tokens.
    RoutingTrace tr = one_layer(8, 2, {{0, 1}, {1, 2}, {0, 3}, {0, 1}, {4, 0}});
    RoutingStats s = routing_stats(tr, 2);
    ASSERT_EQ(s.layers.size(), 1u);
    const LayerRouting& L = s.layers[0];
    EXPECT_EQ(L.picks, 10);
    EXPECT_EQ(L.unique, 5);  // 0 1 2 3 4
    // Uses: 0:4, 1:3, 2:1, 3:1, 4:1 -> 50 % needs 2 experts (7 >= 5), 80 % 3 (8), 90 % 4 (9).
    EXPECT_EQ(L.for_50, 2);
    EXPECT_EQ(L.for_80, 3);
    EXPECT_EQ(L.for_90, 4);
    EXPECT_DOUBLE_EQ(L.top_share, 0.4);
    const double H = -(0.4 * std::log2(0.4) + 0.3 * std::log2(0.3) + 3 * 0.1 * std::log2(0.1));
    EXPECT_NEAR(L.entropy, H, 1e-12);
    // Previous token: t1 shares 1 with t0, t2 nothing with t1, t3 shares 0
    // with t2, t4 shares 0 with t3: (1/2 + 0 + 1/2 + 1/2) / 4.
    EXPECT_DOUBLE_EQ(L.prev_reuse, 1.5 / 4);
    // Window 2, tokens t >= 2: t2 {0 in t0} 1/2; t3 {0: t2, 1: t1} 2/2; t4 {0: t3} 1/2 -> 2/3.
    EXPECT_DOUBLE_EQ(L.window_reuse, 2.0 / 3);
}

TEST(RoutingReplay, LruMatchesAListLru) {
    RoutingTrace tr = random_trace(3, 16, 2, 200, 7);
    const std::vector<int64_t> seq = accesses(tr);
    for (int64_t cap : {6, 12, 24}) {
        std::list<int64_t> lru;  // front: most recent
        int64_t hits = 0;
        // Per layer step the pinned experts are the step's own, which an LRU
        // never evicts anyway (they were just used).
        for (int64_t key : seq) {
            auto it = std::find(lru.begin(), lru.end(), key);
            if (it != lru.end()) {
                hits++;
                lru.erase(it);
            } else if (int64_t(lru.size()) == cap) {
                lru.pop_back();
            }
            lru.push_front(key);
        }
        EXPECT_DOUBLE_EQ(replay_hit_rate(tr, cap, ReplayPolicy::Lru), double(hits) / double(seq.size())) << cap;
    }
}

TEST(RoutingReplay, WlfuMatchesItsRuleWrittenPlainly) {
    for (uint64_t seed : {5, 6}) {
        // 12 uses a token: a window of 13. At 6 and 12 slots the window holds
        // every slot; 6 x 64 < 3600 uses, so counts age too.
        RoutingTrace tr = random_trace(4, 16, 3, 300, seed);
        for (int64_t cap : {6, 12, 18, 40})
            EXPECT_DOUBLE_EQ(replay_hit_rate(tr, cap, ReplayPolicy::Wlfu), reference_wlfu(tr, cap))
                << "seed " << seed << " cap " << cap;
    }
}

TEST(RoutingReplay, BeladyIsTheOptimum) {
    for (uint64_t seed : {1, 2, 3}) {
        RoutingTrace tr = random_trace(2, 6, 1, 7, seed);
        const std::vector<int64_t> seq = accesses(tr);
        for (int64_t cap : {2, 3, 4}) {
            const int best = exhaustive_misses(seq, size_t(cap));
            EXPECT_NEAR(replay_hit_rate(tr, cap, ReplayPolicy::Belady), 1.0 - double(best) / double(seq.size()), 1e-12)
                << "seed " << seed << " cap " << cap;
        }
    }
}

TEST(RoutingReplay, PoliciesAreOrderedAndGrowWithSize) {
    RoutingTrace tr = random_trace(4, 32, 4, 300, 11);
    std::vector<CachePoint> pts = replay_cache_sizes(tr, default_cache_sizes(32, 4));
    ASSERT_GE(pts.size(), 5u);
    for (size_t i = 0; i < pts.size(); i++) {
        EXPECT_GE(pts[i].belady + 1e-12, pts[i].lru);
        EXPECT_GE(pts[i].belady + 1e-12, pts[i].lfu);
        EXPECT_GE(pts[i].belady + 1e-12, pts[i].wlfu);
        if (i) {
            EXPECT_GE(pts[i].belady + 1e-12, pts[i - 1].belady);
        }
        EXPECT_EQ(pts[i].slots, int64_t(pts[i].per_layer) * 4);
    }
    EXPECT_THROW(replay_cache_sizes(tr, {2}), std::runtime_error);  // fewer than k
}

// Two streams over a 5-token trace: step i runs tokens i and 2 + i (the
// fifth token is dropped); each layer acquires the union of the two
// tokens' experts, the first stream's first.
TEST(RoutingStreams, UnionTraceRunsOneTokenOfEachPart) {
    RoutingTrace tr(2, 8, 2);
    const int32_t rows[5][2][2] = {{{0, 1}, {2, 3}}, {{1, 4}, {5, 6}}, {{1, 0}, {7, 2}}, {{4, 5}, {6, 5}},
                                   {{3, 3}, {3, 3}}};
    for (const auto& t : rows)
        for (int l = 0; l < 2; l++) tr.record(l, t[l], 1, 2);
    const RoutingTrace u = union_trace(tr, 2);
    ASSERT_EQ(u.n_tokens(), 2);
    ASSERT_EQ(u.k(), 4);
    const std::vector<int32_t> want[2][2] = {{{0, 1, -1, -1}, {2, 3, 7, -1}}, {{1, 4, 5, -1}, {5, 6, -1, -1}}};
    for (int i = 0; i < 2; i++)
        for (int l = 0; l < 2; l++)
            EXPECT_EQ(std::vector<int32_t>(u.ids(i, l), u.ids(i, l) + 4), want[i][l]) << "step " << i << " layer " << l;
    EXPECT_THROW(union_trace(tr, 6), std::runtime_error);  // fewer tokens than streams
}

// The union's rows count the sequences that chose each expert; the bound
// counts a step's union beyond the cache, or its experts never seen before.
TEST(RoutingStreams, UnionRowsAndTheReadBound) {
    RoutingTrace tr(2, 8, 2);
    const int32_t picks[4][2][2] = {{{0, 1}, {2, 3}}, {{1, 4}, {5, 6}}, {{1, 0}, {7, 2}}, {{4, 5}, {6, 5}}};
    for (const auto& t : picks)
        for (int l = 0; l < 2; l++) tr.record(l, t[l], 1, 2);
    std::vector<int32_t> rows;
    const RoutingTrace u = union_trace(tr, 2, &rows);  // step 0: tokens 0 and 2; step 1: tokens 1 and 3
    ASSERT_EQ(rows.size(), size_t(2 * 2 * 4));
    const std::vector<int32_t> want = {2, 2, 0, 0, 2, 1, 1, 0, 1, 2, 1, 0, 2, 2, 0, 0};
    EXPECT_EQ(rows, want);
    // Unions: step 0 {0,1} + {2,3,7} (5, all new), step 1 {1,4,5} + {5,6} (5, 4 new).
    EXPECT_EQ(streams_read_bound(u, 100), 5 + 4);
    EXPECT_EQ(streams_read_bound(u, 3), 5 + 4);  // 5 - 3 = 2 < 4 new
    EXPECT_EQ(streams_read_bound(u, 0), 5 + 5);
    // No policy reads less than the bound, the store's own or Belady's.
    RoutingTrace big = random_trace(4, 32, 4, 400, 7);
    for (int n : {1, 4, 8}) {
        std::vector<int32_t> r;
        const RoutingTrace v = union_trace(big, n, &r);
        int64_t acquired = 0;
        for (int64_t t = 0; t < v.n_tokens(); t++)
            for (int l = 0; l < v.n_layer(); l++)
                for (int j = 0; j < v.k() && v.ids(t, l)[j] >= 0; j++) acquired++;
        for (int64_t slots : {32, 48, 64}) {
            const double ceiling = 1 - double(streams_read_bound(v, slots)) / double(acquired);
            for (ReplayPolicy p : {ReplayPolicy::Lru, ReplayPolicy::Lfu, ReplayPolicy::Wlfu, ReplayPolicy::Belady})
                EXPECT_LE(replay_hit_rate(v, slots, p, r.data(), n), ceiling + 1e-12)
                    << n << " streams, " << slots << " slots, " << replay_policy_name(p);
        }
    }
}

// One stream is the trace itself: the same hit rates as replay_cache_sizes,
// and a token's acquisitions are its k experts a layer.
// Steps of 8 streams whose union (about 80 experts) outgrows 48 slots: LRU
// alone evicts each expert just before the next step needs it, with the
// step fit it keeps what was resident when each step began. WLFU takes the
// fit's order only among equal counts.
TEST(RoutingStreams, StepFitKeepsAStablePartOfTheUnion) {
    RoutingTrace big = random_trace(4, 32, 4, 800, 9);
    std::vector<int32_t> r;
    const RoutingTrace v = union_trace(big, 8, &r);
    const double lru_plain = replay_hit_rate(v, 48, ReplayPolicy::Lru, r.data(), 8, false);
    const double lru_fit = replay_hit_rate(v, 48, ReplayPolicy::Lru, r.data(), 8, true);
    EXPECT_LT(lru_plain, 0.05);
    EXPECT_GT(lru_fit, 0.2);  // 0.24 (a layer's union pinned, the rest of the union new each step)
    EXPECT_GT(replay_hit_rate(v, 48, ReplayPolicy::Wlfu, r.data(), 8, true), lru_plain);
    // One stream never evicts by the fit, so its replay is the plain one.
    const RoutingTrace one = union_trace(big, 1, &r);
    EXPECT_DOUBLE_EQ(replay_hit_rate(one, 8, ReplayPolicy::Lru, r.data(), 1, true),
                     replay_hit_rate(one, 8, ReplayPolicy::Lru, r.data(), 1, false));
}

TEST(RoutingStreams, OneStreamIsThePlainReplay) {
    RoutingTrace tr = random_trace(4, 32, 4, 200, 13);
    const std::vector<int> sizes = {4, 8, 16};
    const std::vector<CachePoint> plain = replay_cache_sizes(tr, sizes);
    const std::vector<StreamsPoint> s = replay_streams(tr, {1, 4}, sizes);
    ASSERT_EQ(s.size(), 2u);
    EXPECT_DOUBLE_EQ(s[0].acquired_per_token, 16.0);
    for (size_t i = 0; i < sizes.size(); i++) {
        EXPECT_DOUBLE_EQ(s[0].cache[i].lru, plain[i].lru);
        EXPECT_DOUBLE_EQ(s[0].cache[i].wlfu, plain[i].wlfu);
        EXPECT_DOUBLE_EQ(s[0].cache[i].belady, plain[i].belady);
    }
    // Four streams share experts: fewer acquired per token, and Belady still
    // bounds every policy.
    EXPECT_LT(s[1].acquired_per_token, 16.0);
    for (const CachePoint& q : s[1].cache) {
        EXPECT_GE(q.belady + 1e-12, q.lru);
        EXPECT_GE(q.belady + 1e-12, q.wlfu);
    }
}
