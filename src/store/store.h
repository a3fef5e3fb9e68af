// The store: routed experts streamed from the drive into the slot cache, as an
// ExpertSource for the forward pass. acquire() serves hits at once and sends
// every miss of the call to the I/O engine as one batch; next_ready() hands
// experts out as their reads complete (verifying packed checksums);
// release() unpins them. Every byte is counted in StoreCounters by reason.
#pragma once
#include <xxhash.h>

#include <memory>
#include <string>
#include <vector>

#include "model/expert_source.h"
#include "store/io.h"
#include "store/layout.h"
#include "store/reuse_distance.h"
#include "store/slot_cache.h"
#include "telemetry/counters.h"
#include "telemetry/trace.h"

namespace ms {

struct StoreOptions {
    std::string io = "uring";           // uring | pread | buffered | mmap
    IoOptions io_options;
    std::string cache_policy = "wlfu";  // lru | lfu | wlfu (docs/routing.md)
    bool step_fit = true;               // SlotCache's step fit in decode steps that outgrow the cache
    bool verify_checksums = true;       // xxh3 of every expert read where the layout has checksums
    std::string prefetch = "auto";      // off | auto (take next-layer hints in prefill chunks) | next (always)
    std::string faults;                 // injected read faults (store/io.h parse_faults); empty: none
};

class Store : public ExpertSource {
public:
    // n_slots from plan_memory (store/budget.h). counters may be null.
    Store(ExpertLayout layout, int n_slots, const StoreOptions& options, StoreCounters* counters);
    ~Store() override;
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;

    int capacity() const override { return cache_.n_slots(); }
    void begin_step(int n_tokens) override;
    void begin_decode_step(int n_seqs) override;
    void acquire(int layer, const int32_t* ids, int n, const int32_t* rows = nullptr) override;
    int next_ready(int layer, ExpertView* view) override;
    int next_ready_now(int layer, ExpertView* view) override;
    void release(int layer) override;
    std::vector<std::pair<uint8_t*, size_t>> host_memory() const override {
        return {{cache_.arena(), size_t(cache_.arena_bytes())}};
    }
    void prefetch(int layer, const int32_t* ids, int n) override;
    // Hints pay only when some experts must be read again. In decode they
    // did not pay where measured (docs/performance.md: wrong guesses evict
    // experts and add more reads than the right ones save), so `auto` takes
    // them for prefill chunks only, where a chunk's prediction is ~97 % right.
    bool wants_prefetch() const override {
        if (capacity() >= layout_.total_experts()) return false;
        return options_.prefetch == "next" || (options_.prefetch == "auto" && step_tokens_ > 1);
    }

    bool wants_certain_prefetch() const override { return options_.prefetch != "off"; }

    const ExpertLayout& layout() const { return layout_; }
    const SlotCache& cache() const { return cache_; }
    const char* engine_name() const { return engine_->name(); }
    // Things the user should know: O_DIRECT unsupported, buffers not
    // registered... one line each.
    const std::vector<std::string>& notes() const { return notes_; }

private:
    // One acquire() still held: which experts, in which slots, which handed out.
    struct Held {
        int layer = -1;
        std::vector<int32_t> ids;
        std::vector<int> slots;
        std::vector<uint8_t> handed;
        int n_handed = 0;
    };
    // Per-slot read bookkeeping.
    struct SlotIo {
        int reads_left = 0;
        uint64_t start[3] = {};   // per read: where its latest request began (a short read continues there)
        int64_t error = 0;        // first failure: -errno, or 1 for the end of the file
        uint64_t error_offset = 0;
        bool prefetched = false;  // loaded by prefetch and not used yet
        uint64_t bytes = 0;       // bytes requested for the slot's expert
        ReadReason reason = ReadReason::Demand;
        int64_t submit_ns = 0;    // when tracing: when the reads were queued
        int lane = -1;            // when tracing: the timeline lane of this read
    };

    // begin_step's work, for n_seqs sequences of n_tokens each.
    void start_step(int n_tokens, int n_seqs);
    Held* held(int layer);
    void start_reads(int slot, int layer, int expert, ReadReason reason);
    // Processes finished reads; with wait, blocks until at least one.
    void reap(bool wait);
    // next_ready's work: hands out a ready expert of `layer`; when none is,
    // waits for reads (wait) or returns kNoneReadyYet after one look.
    int hand_out(int layer, ExpertView* view, bool wait);
    void complete_read(const IoCompletion& c);
    void slot_loaded(int slot);
    // Drops the slot and keeps the first failure's message for reap() to throw.
    void fail(int slot, const std::string& path, const std::string& why);
    void note_eviction(int slot);
    // Timeline lanes for reads in flight, so overlapping reads never share one.
    int take_lane(Trace* t);

    ExpertLayout layout_;
    StoreOptions options_;
    StoreCounters* counters_;
    StoreCounters own_counters_;
    SlotCache cache_;
    std::unique_ptr<IoEngine> engine_;  // after cache_: destroyed first
    std::vector<int> fds_;
    std::vector<SlotIo> slot_io_;
    std::vector<Held> held_;
    std::vector<IoRequest> batch_;
    std::vector<IoCompletion> done_;
    ReuseDistance reuse_;
    std::vector<std::string> notes_;
    std::vector<std::vector<int32_t>> predicted_;  // per layer: the latest hint, until the layer is acquired
    int step_tokens_ = 1;
    uint64_t step_clock_ = 0;  // cache use clock at the start of the current step
    uint64_t layer_clock_ = 0; // ... and at the start of the latest acquire
    std::vector<int> free_lanes_;
    int n_lanes_ = 0;
    XXH3_state_t* hash_ = nullptr;
    std::string failure_;  // reused for every checksum (no allocation per read)
};

}  // namespace ms
