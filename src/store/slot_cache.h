// The expert cache: one 4 KiB-aligned arena cut into equal slots (each holds
// the largest expert plus its alignment headroom), an index (layer, expert)
// -> slot, and the eviction policy: LRU, LFU with aging, or WLFU (the last
// step's experts kept, the rest by use count), and the step fit that keeps a
// stable part of a decode step's experts when their union outgrows the cache.
// Slots in use (pinned) and slots still being read are never chosen as
// victims.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ms {

// Wlfu: a slot touched within the last step's worth of touches (plus an
// eighth) is kept while others remain; the expert with the fewest uses
// goes, ties to the least recent. Use counts live per (layer, expert), so an
// expert evicted and read again keeps its history; all are halved every
// 64 x slots touches. Within a step of several tokens (a prefill chunk) the
// least recent goes, as in LRU: the chunk runs the layers in order, so that
// is an expert of a layer it is done with, and counts there would evict the
// current layer's experts before its later pieces use them. Each layer comes round once a token, so LRU evicts
// the previous token's experts of the layers about to run (the next ones
// needed); the window keeps exactly those, and the counts keep the
// popular experts through the tokens that skip them (docs/routing.md). In a
// decode step of several sequences an expert counts once per sequence that
// chose it: one that most of the batch chose is the likeliest to be chosen
// again next step, and the count is what keeps it when the step's union
// outgrows the cache (docs/routing.md, "Streams decoded together").
//
// Step fit (on unless set_step_fit(false)): a decode step of several
// sequences whose previous decode step touched more distinct experts than
// the cache holds would, under LRU, evict each expert just before the next
// step needs it: the layers come round in the same order
// every step, the cyclic worst case (0 % hits at 8 streams where
// replayed). In such a step a miss evicts, in this order: an expert not
// used since the previous step began (it left the working set), by the
// policy; else one this step brought in, the most recently used first, so
// the overflow streams through a few slots; else, by the policy, one of
// those resident since before the step. What was resident when the step
// began stays, and the next step hits on it: hits near (cache - a layer's
// union) / step's union instead of near zero. WLFU keeps its counts first
// and takes this order among equal counts, instead of the least recent.
enum class CachePolicy { Lru, Lfu, Wlfu };
// "lru", "lfu" or "wlfu"; throws on anything else.
CachePolicy parse_cache_policy(const std::string& s);

class SlotCache {
public:
    enum class State : uint8_t { Empty, Loading, Ready };

    // Anonymous: the arena is anonymous memory that becomes resident only as
    // slots are first written (slot_bytes a multiple of 4 KiB). None: the
    // cache only chooses and indexes slots whose memory lives elsewhere (the
    // GPU's VRAM tier); arena() is then null.
    enum class Arena { Anonymous, None };
    SlotCache(int n_slots, uint64_t slot_bytes, int n_layers, int n_experts, CachePolicy policy,
              Arena arena = Arena::Anonymous);
    ~SlotCache();
    SlotCache(const SlotCache&) = delete;
    SlotCache& operator=(const SlotCache&) = delete;

    int n_slots() const { return int(slots_.size()); }
    uint64_t slot_bytes() const { return slot_bytes_; }
    uint8_t* arena() const { return arena_; }
    uint64_t arena_bytes() const { return slot_bytes_ * slots_.size(); }
    uint8_t* data(int slot) const { return arena_ + slot_bytes_ * uint64_t(slot); }

    // Slot holding (or loading) (layer, expert), or -1.
    int find(int layer, int expert) const { return index_[key(layer, expert)]; }

    // Assigns a slot to (layer, expert), which must not be present: a free
    // slot if any, else the policy's victim among slots that are neither
    // pinned nor loading (its old expert is forgotten). The slot comes back
    // in state Loading with no pins. Returns -1 when every slot is busy.
    // *evicted (optional) is set to the key evicted, or -1. Slots used at
    // or after use clock keep_since are not victims either (a prefetch
    // passes the clock at the start of the token, so it never displaces
    // experts this token has used).
    int claim(int layer, int expert, int* evicted_layer = nullptr, int* evicted_expert = nullptr,
              uint64_t keep_since = UINT64_MAX);
    // The slot claim() would give now (a free one first), without claiming
    // it; -1 when every slot is busy. For an admission test that compares
    // what a miss would evict with the miss.
    int next_victim(uint64_t keep_since = UINT64_MAX) const {
        return free_.empty() ? victim(keep_since) : free_.back();
    }
    // Forgets a slot's expert (e.g. its read failed); the slot becomes free.
    void drop(int slot);

    State state(int slot) const { return slots_[size_t(slot)].state; }
    void set_ready(int slot) { slots_[size_t(slot)].state = State::Ready; }
    int layer_of(int slot) const { return slots_[size_t(slot)].layer; }
    int expert_of(int slot) const { return slots_[size_t(slot)].expert; }

    // `uses` uses of the slot's expert in a row (a decode step of several
    // sequences: the rows that chose it): updates recency and frequency.
    // Inside a prefill chunk a touch counts once, whatever `uses`.
    void touch(int slot, int uses = 1);
    // A forward step of n_tokens tokens per sequence of n_seqs starts (1
    // token in decode): the touches of the one before size WLFU's window;
    // a decode step of several sequences may evict by the step fit.
    void begin_step(int n_tokens, int n_seqs = 1);
    // Step fit on or off (on by default; see CachePolicy).
    void set_step_fit(bool on) { step_fit_ = on; }
    // Whether the current step evicts by the step fit's order.
    bool step_fit_active() const { return fitting_; }
    void pin(int slot) { slots_[size_t(slot)].pins++; }
    void unpin(int slot) { slots_[size_t(slot)].pins--; }
    int pins(int slot) const { return slots_[size_t(slot)].pins; }

    uint64_t evictions() const { return evictions_; }
    // The use clock: the number of touches so far.
    uint64_t clock() const { return clock_; }
    // LFU and WLFU halve every frequency after this many uses, so experts
    // that were popular long ago do not squat in the cache forever.
    uint64_t aging_period() const { return aging_period_; }
    // WLFU: slots touched within this many touches are not victims.
    uint64_t window() const { return window_; }

private:
    struct Slot {
        int layer = -1, expert = -1;
        State state = State::Empty;
        int pins = 0;
        uint64_t last_use = 0;   // use clock of the latest touch
        uint32_t freq = 0;       // LFU count, halved every aging period
        uint32_t claim_step = 0; // the step that brought the expert in
        uint32_t touch_step = 0; // the latest step that touched it
    };
    // Lexicographic eviction order: the lowest goes first.
    struct Rank {
        int tier;
        uint64_t first, second, third;
        bool operator<(const Rank& o) const {
            if (tier != o.tier) return tier < o.tier;
            if (first != o.first) return first < o.first;
            return second != o.second ? second < o.second : third < o.third;
        }
    };
    Rank rank(const Slot& s, uint64_t recent) const;
    size_t key(int layer, int expert) const { return size_t(layer) * size_t(n_experts_) + size_t(expert); }
    int victim(uint64_t keep_since) const;
    void touch_once(int slot);

    uint8_t* arena_ = nullptr;
    uint64_t slot_bytes_;
    int n_experts_;
    CachePolicy policy_;
    std::vector<Slot> slots_;
    std::vector<int> index_;  // key -> slot or -1
    std::vector<int> free_;   // empty slots
    std::vector<uint32_t> uses_;  // WLFU: key -> use count, kept across evictions
    uint64_t clock_ = 0, evictions_ = 0, aging_period_ = 0, since_aging_ = 0;
    uint64_t step_start_ = 0, window_ = 0;  // WLFU: clock when the step began; the window
    bool by_recency_ = false;               // WLFU: this step is a prefill chunk
    // Step fit: on/off; this step evicts by its order; the step's number
    // and the clock when the step before it began; distinct experts
    // touched this decode step and in the latest whole one.
    bool step_fit_ = true, fitting_ = false;
    uint32_t step_ = 0;
    uint64_t prev_step_start_ = 0;
    uint64_t step_touched_ = 0, decode_union_ = 0;
};

}  // namespace ms
