// libFuzzer harness for the routing-trace reader (bench routing --trace):
// a std::runtime_error is the expected answer to bad input; a trace that
// parses must be safe to analyse and replay.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "bench/routing.h"
#include "telemetry/routing_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        ms::RoutingTrace tr = ms::RoutingTrace::parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
        if (tr.n_tokens() * tr.n_layer() * tr.k() > 100000) return 0;  // keep each run short
        ms::RoutingStats s = ms::routing_stats(tr, 4);
        volatile double sink = s.mean.prev_reuse + ms::replay_hit_rate(tr, tr.k(), ms::ReplayPolicy::Belady) +
                               ms::replay_hit_rate(tr, tr.k(), ms::ReplayPolicy::Lfu);
        (void)sink;
    } catch (const std::runtime_error&) {
    }
    return 0;
}
