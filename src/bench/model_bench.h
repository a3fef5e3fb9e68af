// `bench model`: llama-bench's prompt-processing / text-generation benchmark
// for moestream. Every repetition is a fresh `moestream run` process (so
// nothing stays warm in the process between runs), optionally inside a
// memory cgroup that bounds the page cache like a smaller machine; the
// timings and the store's figures come from the run's JSON report. Records
// carry llama-bench's field names plus the streaming figures.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/records.h"
#include "json/json.h"

namespace ms {

// A test as llama-bench names it: pp512 (n_gen 0), tg128 (n_prompt 0),
// pp512+tg128; "tg32 @ d4096" generates after n_depth prompt tokens (their
// prefill not timed, like llama-bench -d).
struct ModelTest {
    int n_prompt = 0, n_gen = 0, n_depth = 0;
    std::string name() const;
};

// A flag of `moestream run` swept over values ("-t" {"1","2"}, "--mem"
// {"2G","4G"}); each value is passed as "FLAG VALUE".
struct ModelSweep {
    std::string flag;
    std::vector<std::string> values;
};

struct ModelBenchOptions {
    std::string binary;                  // the moestream executable
    std::vector<std::string> models;
    std::vector<ModelTest> tests;
    std::vector<ModelSweep> sweeps;
    std::vector<uint64_t> limit_mem = {0};  // 0: no cgroup; a sweep dimension too
    int repetitions = 5;
    bool warmup = true;                  // one discarded run per case first
    bool drop_caches = false;            // evict the model's pages before every run
    uint64_t seed = 1;
    double timeout_s = 0;
    std::string work_dir;                // reports of the runs (a temp dir when empty)
    bool keep_reports = false;
    std::function<void(const std::string&, uint64_t, uint64_t)> progress;
};

struct ModelBenchReport {
    std::vector<Json> records;           // one per case, llama-bench fields first
    std::vector<std::string> errors;     // cases that failed, with the run's last words
    // Cases a budget of the sweep cannot hold (the run exited kExitBudget,
    // store/budget.h), with its reason: in the records as "skipped", not
    // failures.
    std::vector<std::string> skipped;
    Json json;                           // machine, settings, records
};

ModelBenchReport run_model_bench(const ModelBenchOptions& opt);

// The Markdown columns for these options: llama-bench's, the swept flags,
// then ours.
std::vector<MdColumn> model_md_columns(const ModelBenchOptions& opt);

// Evicts the page cache of a file (posix_fadvise DONTNEED): no privileges
// needed and nothing else on the machine is disturbed. Returns false when the
// file cannot be opened.
bool drop_file_cache(const std::string& path);

// Mean and sample standard deviation (0 for fewer than two values).
void mean_stddev(const std::vector<double>& v, double* mean, double* stddev);

}  // namespace ms
