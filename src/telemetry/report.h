// The run report: what was run (settings), where (machine), and what it cost:
// the store's counters with derived figures (hit rate, MB read per token),
// the physical bytes the model's device saw over the run (/proc/diskstats)
// and the read amplification, CPU idle, wall time, peak RSS. `--report
// FILE.json` writes it; summary() is the few lines printed after a run.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "json/json.h"
#include "telemetry/counters.h"
#include "telemetry/system.h"

namespace ms {

class RunReport {
public:
    // Opens the measurement window: device counters of the disk under
    // model_path (none on tmpfs and the like), CPU times, the clock.
    explicit RunReport(const std::string& model_path);

    // Filled by the command: flags, model, memory plan...
    Json settings = Json::object();
    // Filled by the runtime: tokens, tok/s, timings...
    Json results = Json::object();

    // Closes the window and assembles the report. store may be null (no
    // streaming); decode_tokens is what per-token figures divide by (0: use
    // the store's decode steps).
    Json finish(const StoreCounters* store, uint64_t decode_tokens = 0);

    // Writes report as indented JSON; throws "PATH: reason".
    static void write(const std::string& path, const Json& report);
    // Hit rate, MB read per token, read amplification and peak RSS, one
    // figure per line, for stderr.
    static std::string summary(const Json& report);

private:
    std::string model_path_, device_;
    DiskStats disk0_;
    CpuTimes cpu0_;
    std::chrono::steady_clock::time_point t0_;
};

}  // namespace ms
