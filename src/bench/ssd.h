// `bench ssd`: what the drive really delivers for the read patterns of
// expert streaming. Every uncached test reads its own never-read slice of a
// file of unique incompressible blocks with O_DIRECT, and /proc/diskstats of
// the device under the file confirms the device served the bytes (the
// "physical share"). A RAM-cached control shows the page-cache ceiling.
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/readers.h"
#include "json/json.h"

namespace ms {

enum class SsdPattern { Sequential, GgufExpert, PackedExpert, Strided, Rows, Cached };
const char* ssd_pattern_name(SsdPattern p);  // "sequential", "gguf_expert", ...
bool parse_ssd_pattern(const std::string& s, SsdPattern* out);

// Reads for one test over the slice [base, base + len), in the order the
// pattern issues them:
//  Sequential:   4 MiB reads, ascending.
//  GgufExpert:   the slice holds one region per expert part (gate, up, down
//                as separate tensors, as in a GGUF); experts in random order,
//                each as one read per part.
//  PackedExpert: experts stored whole and contiguous; one read per expert,
//                random order.
//  Strided:      packed experts in ascending order, every `stride`-th one
//                (the union of experts a prefill chunk reads).
//  Rows:         random 4 KiB blocks (embedding-row lookups), each once.
//  Cached:       as GgufExpert (the control runs it through the page cache).
// Part sizes are rounded up to 4 KiB (O_DIRECT). Every byte is read at most
// once per plan.
std::vector<ReadOp> plan_reads(SsdPattern p, uint64_t base, uint64_t len, const std::vector<uint64_t>& parts,
                               int stride, std::mt19937_64& rng);

struct SsdOptions {
    std::string file = "moestream-bench.dat";
    uint64_t size = 0;             // bench file size; 0: keep an existing file's size
    uint64_t slice = 0;            // bytes per test; 0: share the fresh part of the file
    double seconds = 1.5;          // most time one test may take
    std::vector<int> threads = {1, 2, 4, 8};
    std::vector<int> depths = {1, 2, 4, 8, 16, 32, 64};
    std::vector<SsdPattern> patterns = {SsdPattern::Sequential, SsdPattern::GgufExpert, SsdPattern::PackedExpert,
                                        SsdPattern::Strided, SsdPattern::Rows, SsdPattern::Cached};
    std::vector<uint64_t> expert_parts = {512 << 10, 512 << 10, 512 << 10};
    std::string model;             // where expert_parts came from, for the report
    int stride = 2;
    uint64_t control_bytes = 256ull << 20;  // page-cache control working set
    uint64_t seed = 1;
    // progress(label, tests done, tests total); file creation reports bytes
    // through create_progress.
    std::function<void(const std::string&, uint64_t, uint64_t)> progress;
    std::function<void(uint64_t, uint64_t)> create_progress;
};

struct SsdResult {
    SsdPattern pattern;
    std::string engine;  // "pread" (threads) or "uring" (depth, one thread)
    int threads = 1, depth = 1;
    uint64_t read_size = 0;     // bytes per read (largest part for GgufExpert)
    int reads_per_unit = 1;     // reads per expert (3 for GgufExpert)
    uint64_t slice_offset = 0, slice_bytes = 0;
    ReadStats stats;
    uint64_t device_bytes = 0;  // read bytes the device counted meanwhile
    uint64_t device_reads = 0;
    double physical_share = -1; // device_bytes / stats.bytes; -1 when unknown
    uint64_t process_bytes = 0; // read from storage by this process (/proc/self/io): others' reads excluded
};

struct SsdReport {
    std::vector<SsdResult> results;
    Json json;                  // machine, settings, file, results, verdict
    std::string table;          // the human-readable tables
    bool verified = false;      // device known and O_DIRECT in effect
    double min_uncached_share = -1;
};

SsdReport run_ssd_bench(const SsdOptions& opt);

}  // namespace ms
