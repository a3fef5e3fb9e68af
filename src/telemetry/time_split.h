// Where the forward pass's time goes, by kind of work (attention, routing,
// waiting for expert reads, expert compute), summed over a run, with the
// weight bytes each kind streamed through the cores so its GB/s can be set
// against memory bandwidth. A PhaseTimer adds one span to a TimeSplit and,
// when a trace is active, to the timeline.
#pragma once
#include <cstdint>

#include "json/json.h"
#include "telemetry/trace.h"

namespace ms {

enum class Phase : int { Attention = 0, Routing = 1, IoWait = 2, ExpertCompute = 3 };
constexpr int kPhases = 4;
const char* phase_name(Phase p);  // "attention", "routing", "io_wait", "expert_compute"

struct TimeSplit {
    double seconds[kPhases] = {};
    uint64_t weight_bytes[kPhases] = {};  // weights read by the phase's kernels (none for io_wait)
    uint64_t calls = 0;                   // forward calls

    void add(Phase p, double s, uint64_t bytes = 0) {
        seconds[int(p)] += s;
        weight_bytes[int(p)] += bytes;
    }
    double total_seconds() const;
    void merge(const TimeSplit& o);
    // {"attention": s, ..., "other": s} where other = wall_seconds minus the
    // phases (embedding, output head, sampling, bookkeeping); plus
    // "weight_gb_per_s": {phase: GB/s} for the phases that read weights.
    Json to_json(double wall_seconds) const;
};

// Times one scope into split (may be null: then only the trace sees it) as
// phase p of layer `layer`.
class PhaseTimer {
public:
    PhaseTimer(TimeSplit* split, Phase p, int layer, uint64_t weight_bytes = 0)
        : split_(split), phase_(p), layer_(layer), bytes_(weight_bytes), start_(Trace::now_ns()) {}
    ~PhaseTimer() { stop(); }
    PhaseTimer(const PhaseTimer&) = delete;
    PhaseTimer& operator=(const PhaseTimer&) = delete;
    // Ends the span early; returns its seconds (0 when already stopped).
    double stop();

private:
    TimeSplit* split_;
    Phase phase_;
    int layer_;
    uint64_t bytes_;
    int64_t start_;
    bool done_ = false;
};

}  // namespace ms
