// ExpertGroups, the grouping of a batch's (token, rank) entries by expert
// that the CPU's moe_forward and the GPU's prefill pass both follow,
// against a stable sort of the entries by the expert each chose.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "model/moe.h"

namespace ms {
namespace {

// Entries 0 .. n - 1 in the order the grouping must give them: by expert,
// and within an expert in their own order (tokens ascending).
std::vector<int32_t> sorted_entries(const std::vector<int32_t>& ids) {
    std::vector<int32_t> order(ids.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return ids[size_t(a)] < ids[size_t(b)]; });
    return order;
}

TEST(ExpertGroups, MatchesAStableSortByExpert) {
    const int n_expert = 16, k = 4;
    ExpertGroups g;
    g.resize(n_expert, 64 * k);
    std::mt19937 rng(7);
    // Batches of several sizes, regrouped in the same object, as each layer
    // of a pass does: nothing of the last batch may remain.
    for (int n_tok : {1, 5, 64, 3}) {
        std::vector<int32_t> ids;
        for (int t = 0; t < n_tok; t++) {
            std::vector<int32_t> all(n_expert);
            std::iota(all.begin(), all.end(), 0);
            std::shuffle(all.begin(), all.end(), rng);
            ids.insert(ids.end(), all.begin(), all.begin() + k);  // k distinct experts a token
        }
        g.group(ids.data(), int(ids.size()));
        const std::vector<int32_t> want = sorted_entries(ids);
        EXPECT_EQ(std::vector<int32_t>(g.entries.begin(), g.entries.begin() + long(ids.size())), want) << n_tok;
        std::vector<int32_t> used = ids;
        std::sort(used.begin(), used.end());
        used.erase(std::unique(used.begin(), used.end()), used.end());
        ASSERT_EQ(g.n_used, int(used.size())) << n_tok;
        EXPECT_EQ(std::vector<int32_t>(g.used.begin(), g.used.begin() + g.n_used), used) << n_tok;
        for (int e = 0; e < n_expert; e++) {
            EXPECT_EQ(g.count[size_t(e)], std::count(ids.begin(), ids.end(), e)) << n_tok << " expert " << e;
            for (int j = 0; j < g.count[size_t(e)]; j++) {
                EXPECT_EQ(ids[size_t(g.entries[size_t(g.first[size_t(e)] + j)])], e) << n_tok << " expert " << e;
            }
        }
    }
}

TEST(ExpertGroups, OneExpertTakesEveryEntry) {
    ExpertGroups g;
    g.resize(8, 6);
    const std::vector<int32_t> ids(6, 5);
    g.group(ids.data(), 6);
    ASSERT_EQ(g.n_used, 1);
    EXPECT_EQ(g.used[0], 5);
    EXPECT_EQ(g.first[5], 0);
    EXPECT_EQ(g.count[5], 6);
    EXPECT_EQ(g.entries, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace ms
