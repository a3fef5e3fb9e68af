// Reuse (stack) distance of expert uses: how many distinct other experts were
// used since the previous use of the same one. A fully associative LRU cache
// of C slots hits exactly the uses at distance < C, so a histogram of these
// distances reads as "hit rate for every cache size" from one run.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ms {

class ReuseDistance {
public:
    explicit ReuseDistance(size_t n_keys);
    // Records a use of key; returns its distance, or -1 on its first use.
    int64_t use(size_t key);

private:
    // Fenwick tree over use times with a 1 at the latest use of every key, so
    // the distinct keys used in (t, now) are a prefix-sum difference.
    void add(int64_t t, int32_t v);
    int64_t prefix(int64_t t) const;  // sum over [0, t]
    // Renumbers the latest uses 0..k-1 when the clock reaches the tree's end.
    void compact();

    std::vector<int64_t> last_;  // key -> time of its latest use, -1 if never
    std::vector<int32_t> tree_;
    int64_t now_ = 0;
};

}  // namespace ms
