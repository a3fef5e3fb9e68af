// `bench protocol`: the community benchmark protocol with a device-level
// autopsy. An idle baseline, one discarded warm-up, then short / medium /
// long prompt cases (fixed prompt files, seed and generation length), each a
// fresh `moestream run` process, sampled every second for device MB/s and
// IOPS (/proc/diskstats of the model's drive), CPU idle % and the child's
// RSS. Produces a Markdown report, the samples as TSV, PNG charts (gnuplot)
// and JSON.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/run_figures.h"
#include "json/json.h"

namespace ms {

struct ProtocolCase {
    std::string name;         // "short"
    std::string prompt_file;
    int64_t seed = -1;        // this case's sampling seed (-1: ProtocolOptions::seed)
};

struct ProtocolOptions {
    std::string binary, model;
    std::vector<ProtocolCase> cases;
    int n_gen = 128;
    uint64_t seed = 42;
    double interval_s = 1.0;
    double baseline_s = 3.0;             // idle sampling before the cases (0: none)
    bool warmup = true;                  // the first case once more, first, discarded
    bool drop_caches = false;            // evict the model's pages before every case
    uint64_t limit_mem = 0;              // memory cgroup per case (0: none)
    std::vector<std::string> run_args;   // further flags for every run
    std::string out_dir;
    std::string scripts_dir;             // where plot_protocol_*.gp live ("" : no charts)
    double timeout_s = 0;
    std::function<void(const std::string&, uint64_t, uint64_t)> progress;
};

struct ProtocolSample {
    double t = 0;              // seconds since the case's process started
    double mb_per_s = NAN;     // device read MB/s over the last interval (NaN: no device)
    double iops = NAN;         // device read requests per second
    double proc_mb_per_s = 0;  // read from storage by the run itself (/proc/PID/io), MB/s
    double cpu_idle = 0;       // 0..1, whole machine
    uint64_t rss_bytes = 0;    // the child's
};

struct ProtocolCaseResult {
    std::string name, prompt_file, started;
    double wall_s = 0;
    std::vector<ProtocolSample> samples;
    RunFigures run;
    bool ok = false;
    std::string error;
    uint64_t device_read_bytes = 0;   // over the whole case, every process on the device
    uint64_t process_read_bytes = 0;  // the run's own storage reads (last sample before it exited)
    int64_t swap_used_delta = 0;      // bytes, end - start
    uint64_t swap_in_pages = 0, swap_out_pages = 0;
    uint64_t peak_rss_bytes = 0;      // the run's own report, else the sampled maximum
    double avg_mb_s = NAN, min_mb_s = NAN, max_mb_s = NAN, avg_iops = NAN, avg_idle = NAN;
};

struct ProtocolReport {
    std::vector<ProtocolCaseResult> cases;   // warm-up first when run
    std::vector<ProtocolSample> baseline;
    std::string markdown;
    std::vector<std::string> charts;         // PNGs written
    std::string chart_note;                  // why charts are missing, when they are
    Json json;
};

ProtocolReport run_protocol(const ProtocolOptions& opt);

// Average, minimum and maximum of the finite values of the samples' MB/s,
// IOPS and idle (NaN when none).
void summarize_samples(ProtocolCaseResult* r);

}  // namespace ms
