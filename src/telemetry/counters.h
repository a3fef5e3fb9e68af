// Store statistics: every byte the store reads, by reason; hits and misses per
// layer; how often each expert of each layer was used; the reuse-distance
// histogram. Plain counters the store bumps as it works; to_json adds the
// derived figures (hit rate, experts covering 50/80/90 % of uses).
#pragma once
#include <cstdint>
#include <vector>

#include "json/json.h"

namespace ms {

// Rows: sparse rows of a table that each token reads one of (gemma4's
// per-layer embeddings), whatever the step.
enum class ReadReason : int { Resident = 0, Demand = 1, Prefetch = 2, Prefill = 3, Rows = 4 };
constexpr int kReadReasons = 5;
const char* read_reason_name(ReadReason r);

struct StoreCounters {
    // Sizes (and zeroes) the per-layer tables; byte counters are kept, so
    // resident loading may be counted before the store exists.
    void init(int n_layers, int n_experts);

    // Bytes the model needed (expert bytes, resident tensor bytes), bytes
    // actually requested from the drive (4 KiB-aligned supersets) and read
    // requests, per reason.
    uint64_t needed[kReadReasons] = {};
    uint64_t read[kReadReasons] = {};
    uint64_t requests[kReadReasons] = {};
    void add_read(ReadReason r, uint64_t needed_bytes, uint64_t read_bytes, uint64_t n_requests) {
        needed[int(r)] += needed_bytes;
        read[int(r)] += read_bytes;
        requests[int(r)] += n_requests;
    }

    int n_layers = 0, n_experts = 0;
    std::vector<uint64_t> hits, misses;  // per layer; a hit on a read still in flight is also in late_hits
    std::vector<uint64_t> late_hits;
    std::vector<uint64_t> uses;          // [layer * n_experts + expert]
    // One use of (layer, expert); distance from ReuseDistance (-1: first use).
    void record_use(int layer, int expert, bool hit, bool late, int64_t reuse_distance);

    // Reuse distances in power-of-two buckets: bucket 0 holds distance 0,
    // bucket b >= 1 holds [2^(b-1), 2^b). First uses are counted apart.
    std::vector<uint64_t> reuse_hist = std::vector<uint64_t>(40, 0);
    uint64_t first_uses = 0;

    uint64_t evictions = 0;
    uint64_t read_retries = 0;  // short reads continued with another request
    uint64_t prefetch_issued = 0, prefetch_used = 0, prefetch_unused_evicted = 0;
    uint64_t prefetch_wasted_bytes = 0;  // bytes of prefetched experts evicted before any use

    // How good the next-layer prediction is, per layer, whatever the cache
    // already held: precision = correct / predicted, recall = correct / used.
    std::vector<uint64_t> predicted, predicted_correct, predicted_actual;
    void record_prediction(int layer, uint64_t n_predicted, uint64_t n_actual, uint64_t n_correct) {
        predicted[size_t(layer)] += n_predicted;
        predicted_actual[size_t(layer)] += n_actual;
        predicted_correct[size_t(layer)] += n_correct;
    }
    uint64_t checksum_bytes = 0;  // expert bytes verified against the sidecar's xxh3
    double checksum_s = 0;
    // Forward calls; decoded tokens (a batched decode call of n sequences
    // counts n); prompt tokens.
    uint64_t steps = 0, decode_steps = 0, prefill_tokens = 0;
    // Forward calls whose misses evicted in the step fit's order (a decode
    // step of several sequences after one whose experts outgrew the cache).
    uint64_t step_fit_steps = 0;

    uint64_t total_hits() const;
    uint64_t total_misses() const;
    uint64_t total_needed() const;
    uint64_t total_read() const;

    Json to_json() const;
};

}  // namespace ms
