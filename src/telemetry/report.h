// The run report: what was run (settings), where (machine), and what it cost:
// the store's counters with derived figures (hit rate, MB read per token),
// the physical bytes the model's device saw over the run (/proc/diskstats)
// and the read amplification, CPU idle, wall time, peak RSS. `--report
// FILE.json` writes it; summary() gives the store lines printed after a run.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

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

    // Starts a named phase (e.g. "decode") of the window: the report gives
    // each phase's physical device bytes, needed bytes and amplification.
    // The part before the first mark is phase "start".
    void mark(const std::string& phase, const StoreCounters* store);

    // Closes the window and assembles the report. store may be null (no
    // streaming); decode_tokens is what per-token figures divide by (0: use
    // the store's decode steps).
    Json finish(const StoreCounters* store, uint64_t decode_tokens = 0);

    // Writes report as indented JSON; throws "PATH: reason".
    static void write(const std::string& path, const Json& report);
    // Hit rate, MB read per token and read amplification, for stderr (the
    // peak RSS line is printed by every run's own summary).
    static std::string summary(const Json& report);

private:
    struct Phase {
        std::string name;
        DiskStats disk;
        uint64_t needed = 0, read = 0;
        uint64_t process_read = 0;  // /proc/self/io read_bytes
        double t = 0;
    };
    Phase snapshot(const std::string& name, const StoreCounters* store) const;
    std::vector<Phase> phases_;
    std::string model_path_, device_;
    DiskStats disk0_;
    CpuTimes cpu0_;
    std::chrono::steady_clock::time_point t0_;
};

}  // namespace ms
