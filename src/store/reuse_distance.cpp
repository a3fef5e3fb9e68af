#include "store/reuse_distance.h"

#include <algorithm>

namespace ms {

ReuseDistance::ReuseDistance(size_t n_keys)
    : last_(n_keys, -1), tree_(std::max<size_t>(1024, 2 * n_keys) + 1, 0) {}

void ReuseDistance::add(int64_t t, int32_t v) {
    for (size_t i = size_t(t) + 1; i < tree_.size(); i += i & (~i + 1)) tree_[i] += v;
}

int64_t ReuseDistance::prefix(int64_t t) const {
    int64_t s = 0;
    for (size_t i = size_t(t) + 1; i > 0; i -= i & (~i + 1)) s += tree_[i];
    return s;
}

int64_t ReuseDistance::use(size_t key) {
    if (now_ + 1 >= int64_t(tree_.size())) compact();
    int64_t t = last_[key], dist = -1;
    if (t >= 0) {
        dist = prefix(now_ - 1) - prefix(t);
        add(t, -1);
    }
    add(now_, 1);
    last_[key] = now_++;
    return dist;
}

void ReuseDistance::compact() {
    std::vector<std::pair<int64_t, size_t>> live;
    for (size_t k = 0; k < last_.size(); k++)
        if (last_[k] >= 0) live.push_back({last_[k], k});
    std::sort(live.begin(), live.end());
    std::fill(tree_.begin(), tree_.end(), 0);
    now_ = 0;
    for (auto& [t, k] : live) {
        last_[k] = now_;
        add(now_++, 1);
    }
}

}  // namespace ms
