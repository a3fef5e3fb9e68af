// The store's flags, shared by every command that runs a model (declared
// through SessionFlags): --io, --io-depth, --io-threads, --io-split,
// --cache-policy, --step-fit, --layout, --no-verify, --verify-experts, --io-faults; and what they make: a Store whose
// cache is what --mem leaves after the session's fixed memory, its counters,
// and the store's part of the run report (hit rate, MB read per token,
// physical bytes and read amplification).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "cli/args.h"
#include "json/json.h"
#include "model/model.h"
#include "store/budget.h"
#include "telemetry/counters.h"
#include "telemetry/report.h"

namespace ms {

class GgufFile;

struct StoreFlags {
    std::string io = "uring";
    std::string layout = "auto";
    std::string cache_policy = "wlfu";
    std::string prefetch = "auto";
    std::string step_fit = "on";
    std::string io_faults;
    int io_depth = 64, io_threads = 4, io_split = 1;
    int cache_slots = 0;  // > 0: at most this many expert slots, whatever --mem leaves
    bool no_verify = false, verify_experts = false;

    void declare(Args& a);
    // --step-fit as a bool; throws on anything but on or off. (The GPU's
    // VRAM tier takes it and --cache-policy too.)
    bool step_fit_on() const;
    // Opens the report's measurement window; call before loading the model.
    void start(const std::string& model_path) const;
    // The session's expert source: a Store sized by plan_memory. budget 0
    // means no --mem: every expert gets a slot if that fits in 80 % of the
    // available memory, else that 80 % is the budget. The StoreFlags must
    // outlive the returned source (it owns the counters).
    // requests: bytes held beside the sessions (serve's request reserve).
    std::unique_ptr<ExpertSource> make(const GgufFile& file, const Model& model, uint64_t fixed_bytes,
                                       uint64_t budget, uint64_t requests = 0) const;
    // Marks the start of decoding (after the prompt) in the report.
    void mark_decode() const;
    // Adds the store's settings, memory plan, counters, disk and phase
    // figures to a run report.
    void add_to_report(Json* report) const;
    // Hit rate, MB read per token, read amplification: lines for stderr.
    std::string summary() const;
    // Whether decode reads experts from the drive (the cache holds fewer
    // than all of them); known once make() has run.
    bool streams() const { return !plan_.all_experts_fit; }
    // The store's live counters (serve's /metrics reads them between forward passes).
    const StoreCounters& counters() const { return counters_; }

private:
    const Json& finished() const;
    // What a run made. Mutable: sessions are opened from const SessionFlags.
    mutable std::unique_ptr<RunReport> window_;
    mutable StoreCounters counters_;
    mutable MemoryPlan plan_;
    mutable Json settings_ = Json::object();
    mutable Json result_;
};

}  // namespace ms
