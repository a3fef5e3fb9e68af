// `bench cache`: how fast experts come out of a warm page cache through
// pread, and how that scales with reader threads and with splitting each
// expert into page-aligned chunks read concurrently. These are effective
// cached-read figures, not drive figures: the report also counts the bytes
// the device served during the timed passes (about zero when warm).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/readers.h"
#include "json/json.h"

namespace ms {

// One expert: one byte range (packed layout) or one per part (GGUF layout).
struct CacheExpert {
    std::vector<ReadOp> ranges;  // offset, length; dst unused
    uint64_t bytes = 0;
};

// Splits every range of an expert into `split` chunks whose boundaries fall
// on 4 KiB multiples from the range's start (the last chunk takes the rest),
// destinations consecutive from dst_base.
std::vector<ReadOp> split_expert(const CacheExpert& e, int split, uint64_t dst_base);

struct CacheOptions {
    std::string model;            // -m: that model's experts, read from the GGUF
    int layer = 0;                // which MoE layer (index among MoE layers)
    std::string file;             // a packed expert file; with neither, a synthetic one
    uint64_t expert_bytes = 1536ull << 10;  // packed/synthetic expert size
    int experts = 128;            // experts per pass
    int threads = 8, split = 4, warmup = 2, passes = 5;
    bool grid = false;
    std::vector<int> grid_threads = {1, 2, 4, 8}, grid_splits = {1, 2, 4, 8};
    uint64_t seed = 1;
    std::function<void(const std::string&, uint64_t, uint64_t)> progress;
};

struct CachePass {
    double seconds = 0;
    uint64_t bytes = 0;
    double gb_per_s() const { return seconds > 0 ? double(bytes) / seconds / 1e9 : 0; }
};

struct CacheRun {
    int threads = 0, split = 0;
    std::vector<CachePass> passes;
    double avg_seconds = 0, best_seconds = 0, worst_seconds = 0;
    uint64_t device_bytes = 0;    // read by the device during the timed passes
};

struct CacheReport {
    std::string source;           // "synthetic", "file" or "model"
    std::string path;
    int experts = 0, reads_per_expert = 1;
    uint64_t pass_bytes = 0;      // bytes of one pass (all experts)
    std::vector<CacheRun> runs;
    std::string text;             // what the terminal shows
    Json json;
};

CacheReport run_cache_bench(const CacheOptions& opt);

}  // namespace ms
