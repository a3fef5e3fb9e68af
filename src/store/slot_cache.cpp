#include "store/slot_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "ops/buffer.h"

namespace ms {

CachePolicy parse_cache_policy(const std::string& s) {
    if (s == "lru") return CachePolicy::Lru;
    if (s == "lfu") return CachePolicy::Lfu;
    if (s == "wlfu") return CachePolicy::Wlfu;
    throw std::runtime_error("--cache-policy: expected lru, lfu or wlfu, got '" + s + "'");
}

SlotCache::SlotCache(int n_slots, uint64_t slot_bytes, int n_layers, int n_experts, CachePolicy policy, Arena arena)
    : slot_bytes_(slot_bytes), n_experts_(n_experts), policy_(policy) {
    const bool own = arena == Arena::Anonymous;
    if (n_slots < 1 || slot_bytes == 0 || (own && slot_bytes % 4096 != 0) || n_layers < 1 || n_experts < 1)
        throw std::runtime_error("slot cache: bad geometry (" + std::to_string(n_slots) + " slots of " +
                                 std::to_string(slot_bytes) + " bytes)");
    if (own) {
        void* p = mmap(nullptr, slot_bytes * uint64_t(n_slots), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (p == MAP_FAILED)
            throw std::runtime_error("slot cache: cannot reserve " + std::to_string(slot_bytes * uint64_t(n_slots)) +
                                     " bytes: " + strerror(errno));
        arena_ = static_cast<uint8_t*>(p);
        advise_huge_pages(arena_, slot_bytes * uint64_t(n_slots));
    }
    slots_.resize(size_t(n_slots));
    index_.assign(size_t(n_layers) * size_t(n_experts), -1);
    for (int i = n_slots - 1; i >= 0; i--) free_.push_back(i);
    aging_period_ = std::max<uint64_t>(64, 4 * uint64_t(n_slots));
    if (policy == CachePolicy::Wlfu) {
        uses_.assign(index_.size(), 0);
        aging_period_ = 64 * uint64_t(n_slots);
    }
}

SlotCache::~SlotCache() {
    if (arena_) munmap(arena_, arena_bytes());
}

SlotCache::Rank SlotCache::rank(const Slot& s, uint64_t recent) const {
    Rank r{0, 0, 0, 0};
    switch (policy_) {
        case CachePolicy::Lru: r = {0, s.last_use, 0, 0}; break;
        case CachePolicy::Lfu: r = {0, s.freq, s.last_use, 0}; break;
        case CachePolicy::Wlfu:
            // Outside the window before inside it; then the fewest uses; then
            // the least recent. (Inside, too, by uses: when the window covers
            // the whole cache, evicting by recency is LRU's cyclic worst case.)
            // Within a prefill chunk: the least recent.
            r = by_recency_ ? Rank{0, s.last_use, 0, 0}
                            : Rank{s.last_use <= recent ? 0 : 1, uses_[key(s.layer, s.expert)], s.last_use, 0};
            break;
    }
    if (!fitting_) return r;
    // The step fit's order: an expert that left the working set (by the
    // policy); else the overflow, most recent first; else, by the policy,
    // one resident since before the step.
    const bool stale = s.last_use <= prev_step_start_, overflow = !stale && s.claim_step == step_;
    // WLFU keeps its counts first (they keep the experts most of the batch
    // chose; ordered by the fit alone, a replay read more) and takes the
    // fit's order among equal counts, where it would take the least recent.
    if (policy_ == CachePolicy::Wlfu)
        return {r.tier, r.first, uint64_t(stale ? 0 : overflow ? 1 : 2), overflow ? UINT64_MAX - s.last_use : s.last_use};
    if (stale) return r;
    if (overflow) return {2, UINT64_MAX - s.last_use, 0, 0};
    return {r.tier + 3, r.first, r.second, 0};
}

int SlotCache::victim(uint64_t keep_since) const {
    const uint64_t recent = clock_ > window_ ? clock_ - window_ : 0;
    int best = -1;
    Rank best_rank{0, 0, 0, 0};
    for (int i = 0; i < int(slots_.size()); i++) {
        const Slot& s = slots_[size_t(i)];
        if (s.pins > 0 || s.state != State::Ready || s.last_use >= keep_since) continue;
        const Rank r = rank(s, recent);
        if (best < 0 || r < best_rank) best = i, best_rank = r;
    }
    return best;
}

int SlotCache::claim(int layer, int expert, int* evicted_layer, int* evicted_expert, uint64_t keep_since) {
    if (evicted_layer) *evicted_layer = -1;
    if (evicted_expert) *evicted_expert = -1;
    int s;
    if (!free_.empty()) {
        s = free_.back();
        free_.pop_back();
    } else {
        s = victim(keep_since);
        if (s < 0) return -1;
        Slot& v = slots_[size_t(s)];
        if (evicted_layer) *evicted_layer = v.layer;
        if (evicted_expert) *evicted_expert = v.expert;
        index_[key(v.layer, v.expert)] = -1;
        evictions_++;
    }
    Slot& n = slots_[size_t(s)];
    n.layer = layer;
    n.expert = expert;
    n.state = State::Loading;
    n.pins = 0;
    n.freq = 0;
    n.last_use = clock_;
    n.claim_step = step_;
    n.touch_step = step_ - 1;  // not touched this step yet
    index_[key(layer, expert)] = s;
    return s;
}

void SlotCache::drop(int slot) {
    Slot& s = slots_[size_t(slot)];
    if (s.state == State::Empty) return;
    index_[key(s.layer, s.expert)] = -1;
    s = Slot{};
    free_.push_back(slot);
}

void SlotCache::touch(int slot, int uses) {
    Slot& s = slots_[size_t(slot)];
    if (s.touch_step != step_) s.touch_step = step_, step_touched_++;  // the step's union, each expert once
    // A prefill chunk's touches count once: its counts would otherwise
    // grow with the chunk's length and bury the decode steps' after it.
    for (int u = by_recency_ ? 1 : std::max(1, uses); u > 0; u--) touch_once(slot);
}

void SlotCache::touch_once(int slot) {
    Slot& s = slots_[size_t(slot)];
    s.last_use = ++clock_;
    s.freq++;
    if (policy_ == CachePolicy::Lfu && ++since_aging_ >= aging_period_) {
        since_aging_ = 0;
        for (Slot& o : slots_) o.freq /= 2;
    }
    if (policy_ == CachePolicy::Wlfu) {
        uses_[key(s.layer, s.expert)]++;
        if (++since_aging_ >= aging_period_) {
            since_aging_ = 0;
            for (uint32_t& u : uses_) u /= 2;
        }
    }
}

void SlotCache::begin_step(int n_tokens, int n_seqs) {
    // The step fit needs the union of a whole decode step: a prefill chunk
    // between two (serve evaluates new prompts between decode steps) keeps
    // the latest one.
    if (!by_recency_ && step_touched_ > 0) decode_union_ = step_touched_;
    step_touched_ = 0;
    by_recency_ = n_tokens > 1;
    // One sequence is left to the policy alone: the fit is measured (and
    // meant) for batches, and single-stream caches were tuned without it.
    fitting_ = step_fit_ && !by_recency_ && n_seqs > 1 && decode_union_ > slots_.size();
    step_++;
    const uint64_t last = clock_ - step_start_;
    if (last > 0) window_ = last + last / 8;  // an eighth more: a step's touches vary a little
    prev_step_start_ = step_start_;
    step_start_ = clock_;
}

}  // namespace ms
