// What `bench model` and `bench protocol` need from one `moestream run`: the
// command line that asks for it, and the figures read back from the JSON it
// writes with --report (telemetry/report.h). A field the report lacks (no
// store, no device counters) comes back as NaN, shown as "-".
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "json/json.h"

namespace ms {

// What the `run` at hand understands beyond -m/-p/-f/-n/--seed/--report,
// found by reading its --help (older builds lack some flags).
struct RunCaps {
    bool random_prompt = false;  // --random-prompt N: N random token ids, as llama-bench uses
    bool ignore_eos = false;     // --ignore-eos: generate exactly -n tokens
    bool trace = false;          // --trace FILE
};
RunCaps probe_run_caps(const std::string& binary, const std::string& work_dir);

// One run. The prompt is either n_prompt random token ids (--random-prompt,
// as llama-bench does) or the text of prompt_file (-f). --ignore-eos makes
// the generation exactly n_gen tokens long where supported.
struct RunRequest {
    std::string binary;                 // the moestream executable
    std::string model;
    int n_prompt = 0;                   // used when prompt_file is empty (at least 1)
    std::string prompt_file;
    int n_gen = 0;
    uint64_t seed = 1;
    std::string report;                 // --report path
    std::string trace;                  // --trace path, optional
    std::vector<std::string> extra;     // further flags, passed as given
    RunCaps caps = {true, true, true};
};
std::vector<std::string> run_argv(const RunRequest& r);

// Where `run` has no --random-prompt: writes to `path` a text of common
// English words (fixed seed) cut to the longest prefix the model's tokenizer
// (`moestream tokenize`) turns into at most n tokens, and returns that count.
int write_token_prompt(const std::string& binary, const std::string& model, int n, const std::string& path);

// Tokens of the text in `path` under the model's tokenizer (`moestream
// tokenize`, BOS included as the model adds it); scratch names a file prefix
// it may write.
int count_prompt_tokens(const std::string& binary, const std::string& model, const std::string& path,
                        const std::string& scratch);

// Time the forward pass spent per kind of work over the whole run (prompt
// and generation), seconds: the report's "time_split" object (at the top
// level or in results) with keys attention, routing, io_wait,
// expert_compute, other, when the runtime records it.
struct PhaseTimes {
    double attention = NAN, routing = NAN, io_wait = NAN, expert_compute = NAN, other = NAN;
};

// A run on the GPU (gpu.vram_tier): the share of chosen experts its
// kernels found in VRAM, and what it moved host to device a token (copies,
// and a mapped RAM tier's reads by the kernels).
struct VramFigures {
    double hit_rate = NAN;
    double pcie_mb_per_token = NAN;
    double host_mb_per_token = NAN;  // experts the host computed (--gpu-ram-tier cpu)
    // The copies alone at the link's measured rate over the phase's time
    // (gpu.vram_tier.*.copy_bound_fraction; NAN where not measured).
    double copy_bound_fraction = NAN;
};

struct RunFigures {
    int64_t prefill_tokens = 0, decode_tokens = 0;
    double prefill_seconds = 0, decode_seconds = 0;
    double hit_rate = NAN;
    double mb_read_per_token = NAN;
    // The whole run's, and its prefill's and decode's alone where the report
    // splits them (gpu.vram_tier.prefill / .decode; else NAN).
    VramFigures vram, vram_prefill, vram_decode;
    double read_amplification = NAN;
    double cpu_idle = NAN;
    double wall_s = NAN;
    uint64_t peak_rss_bytes = 0;
    uint64_t device_read_bytes = 0;
    bool has_device = false;
    PhaseTimes phases;
    int threads = 0;                    // settings.threads when reported
};

// Reads a run report: timings from results.{prefill,decode}_{tokens,seconds}
// or from {prefill,decode}.{tokens,seconds} objects (at the top level or in
// results). Throws "REPORT: no prefill timing" and the like when absent.
RunFigures read_run_figures(const Json& report, const std::string& what);

}  // namespace ms
