#include "telemetry/time_split.h"

namespace ms {

const char* phase_name(Phase p) {
    switch (p) {
        case Phase::Attention: return "attention";
        case Phase::Routing: return "routing";
        case Phase::IoWait: return "io_wait";
        case Phase::ExpertCompute: return "expert_compute";
    }
    return "?";
}

double TimeSplit::total_seconds() const {
    double s = 0;
    for (double v : seconds) s += v;
    return s;
}

void TimeSplit::merge(const TimeSplit& o) {
    for (int i = 0; i < kPhases; i++) {
        seconds[i] += o.seconds[i];
        weight_bytes[i] += o.weight_bytes[i];
    }
    calls += o.calls;
}

Json TimeSplit::to_json(double wall_seconds) const {
    Json j = Json::object();
    for (int i = 0; i < kPhases; i++) j[phase_name(Phase(i))] = seconds[i];
    // Timer overhead or a wall clock taken around less than the phases can
    // make the difference slightly negative; it is still "nothing else".
    const double other = wall_seconds - total_seconds();
    j["other"] = other > 0 ? other : 0.0;
    Json gbs = Json::object();
    for (int i = 0; i < kPhases; i++) {
        if (weight_bytes[i] == 0 || seconds[i] <= 0) continue;
        gbs[phase_name(Phase(i))] = double(weight_bytes[i]) / seconds[i] / 1e9;
    }
    j["weight_gb_per_s"] = gbs;
    return j;
}

double PhaseTimer::stop() {
    if (done_) return 0;
    done_ = true;
    const int64_t end = Trace::now_ns();
    const double s = double(end - start_) * 1e-9;
    if (split_) split_->add(phase_, s, bytes_);
    if (Trace* t = active_trace()) t->complete(phase_name(phase_), "layer", start_, end, -1, "layer", layer_);
    return s;
}

}  // namespace ms
