#include "cli/store_flags.h"

#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "gguf/gguf.h"
#include "store/store.h"
#include "telemetry/system.h"

namespace ms {

bool StoreFlags::step_fit_on() const {
    if (step_fit != "on" && step_fit != "off")
        throw std::runtime_error("--step-fit: expected on or off, got '" + step_fit + "'");
    return step_fit == "on";
}

void StoreFlags::declare(Args& a) {
    a.option("--io", &io, "ENGINE",
             "how experts are read: uring (io_uring, O_DIRECT, registered buffers), pread (thread pool, "
             "O_DIRECT), buffered (thread pool through the page cache) or mmap (copies out of a mapping: "
             "the page-fault baseline)");
    a.option("--io-depth", &io_depth, "N", "uring: reads in flight");
    a.option("--io-threads", &io_threads, "N", "pread/buffered: reader threads");
    a.option("--io-split", &io_split, "N", "pread/buffered: page-aligned chunks each expert read is cut into");
    a.option("--cache-policy", &cache_policy, "P",
             "expert cache eviction, in RAM and, with --gpu, in the VRAM tier: lru; lfu (with aging); or wlfu "
             "(the experts of the last step kept, the rest evicted by use count, ties by recency; by recency "
             "within a prefill chunk: docs/routing.md)");
    a.option("--step-fit", &step_fit, "on|off",
             "in a decode step of several sequences (serve --parallel, bench serve) after one whose experts "
             "outgrew the cache, a miss evicts an expert unused since the step before began, else one this step "
             "brought in (the most recent first), else one resident since before the step (lru and lfu take this "
             "order; wlfu keeps its use counts first and takes it among equal counts), so the next step hits on "
             "what was resident instead of the policy evicting each expert just before it is needed again (LRU's "
             "cyclic worst case), in RAM and in the GPU's VRAM tier. on (default) or off (the policy alone); the "
             "output is the same either way, only the reads and copies differ (docs/routing.md, \"The step fit\")");
    a.option("--cache-slots", &cache_slots, "N",
             "at most N expert slots, whatever --mem leaves (a smaller cache, exactly, for measuring one; at "
             "least the experts a token uses)");
    a.option("--prefetch", &prefetch, "MODE",
             "next-layer prefetch: while a layer's experts are read and computed, read the experts the next "
             "layer's router picks from the current hidden state (low priority; only when the cache cannot "
             "hold every expert). next: in prefill chunks and in decode; auto: in prefill chunks only (in "
             "decode the wrong guesses evicted experts and cost more reads than the right ones saved, "
             "where measured: docs/performance.md); off: never. Experts known for certain (deepseek4's "
             "hash-routed layers, from the token ids) are read ahead in every mode but off");
    a.option("--layout", &layout, "L",
             "where experts are read from: packed (the sidecar MODEL.gguf.experts written by `moestream "
             "pack`), gguf (the model file), or auto (the sidecar when it is valid, else gguf)");
    a.flag("--no-verify", &no_verify, "skip the xxh3 check of each expert read from a packed sidecar");
    a.flag("--verify-experts", &verify_experts,
           "reading experts from the GGUF (--layout gguf), check each against the xxh3 table of the sidecar "
           "`moestream pack` wrote (MODEL.gguf.experts; only its header is read), so bytes damaged on the way "
           "from the drive stop the run instead of changing its output");
    a.option("--io-faults", &io_faults, "SPEC",
             "inject read faults, for testing how a run meets a failing drive: comma-separated "
             "KIND@LAYER:EXPERT[xN] rules, KIND eio (the read fails), short (half of it arrives; the store "
             "reads the rest), slow=MS (it arrives MS late) or corrupt (a byte of each page flipped: caught by the "
             "packed layout's checksums and --verify-experts), LAYER and EXPERT numbers or *, xN only the first N matching reads; "
             "e.g. eio@3:17 or slow=20@*:*");
}

void StoreFlags::start(const std::string& model_path) const {
    window_ = std::make_unique<RunReport>(model_path);
    result_ = Json();
}

std::unique_ptr<ExpertSource> StoreFlags::make(const GgufFile& file, const Model& model, uint64_t fixed_bytes,
                                               uint64_t budget, uint64_t requests) const {
    std::string note;
    ExpertLayout lay = ExpertLayout::open(file, model.expert_layers(), layout, &note);
    if (verify_experts) lay.adopt_checksums(file, sidecar_path(file.path()));
    if (!note.empty()) fprintf(stderr, "note: %s\n", note.c_str());

    MemoryNeeds need;
    need.resident = model.resident_bytes();
    need.kv = fixed_bytes - std::min(fixed_bytes, need.resident);  // KV cache and scratch
    // Code, libraries, tokenizer and metadata are in RSS too, and --mem
    // bounds RSS: what the process holds beyond the resident weights now.
    uint64_t rss = rss_bytes();
    need.process = rss > need.resident ? rss - need.resident : 0;
    need.slot_bytes = lay.slot_bytes();
    need.min_slots = std::max(1, model.config().n_expert_used);
    need.max_slots = lay.total_experts();
    need.requests = requests;
    need.budget = budget;
    if (budget == 0) {
        uint64_t all = fixed_bytes + requests + need.process + uint64_t(need.max_slots) * need.slot_bytes;
        uint64_t cap = read_meminfo().available / 5 * 4;
        need.budget = cap > 0 ? std::min(all, cap) : all;
        if (need.budget < all)
            fprintf(stderr, "note: no --mem given; using 80%% of available memory (%s)\n",
                    format_bytes(double(need.budget)).c_str());
    }
    plan_ = plan_memory(need);
    if (cache_slots < 0) throw std::runtime_error("--cache-slots must be > 0");
    if (cache_slots > 0 && cache_slots < plan_.slots) {
        if (cache_slots < need.min_slots) {
            throw std::runtime_error("--cache-slots " + std::to_string(cache_slots) + " is fewer than the " +
                                     std::to_string(need.min_slots) + " experts a token uses");
        }
        plan_.slots = cache_slots;
        plan_.cache_bytes = uint64_t(cache_slots) * need.slot_bytes;
        plan_.total_bytes = plan_.fixed_bytes + plan_.cache_bytes;
        plan_.all_experts_fit = false;
    }

    StoreOptions opt;
    opt.io = io;
    opt.io_options = {io_depth, io_threads, io_split};
    opt.cache_policy = cache_policy;
    opt.step_fit = step_fit_on();
    opt.verify_checksums = !no_verify;
    opt.prefetch = prefetch;
    opt.faults = io_faults;
    counters_.add_read(ReadReason::Resident, need.resident, need.resident, 0);
    settings_ = Json::object();
    settings_["io"] = io;
    settings_["io_depth"] = io_depth;
    settings_["io_threads"] = io_threads;
    settings_["io_split"] = io_split;
    settings_["cache_policy"] = cache_policy;
    settings_["step_fit"] = step_fit;
    settings_["prefetch"] = prefetch;
    settings_["layout"] = lay.name();
    settings_["verify_checksums"] = opt.verify_checksums;
    if (!io_faults.empty()) settings_["io_faults"] = io_faults;
    settings_["budget_bytes"] = need.budget;
    settings_["resident_bytes"] = need.resident;
    settings_["kv_and_scratch_bytes"] = need.kv;
    settings_["process_bytes"] = need.process;
    settings_["slot_bytes"] = need.slot_bytes;
    settings_["slots"] = plan_.slots;
    settings_["cache_bytes"] = plan_.cache_bytes;
    settings_["experts"] = lay.total_experts();
    settings_["expert_bytes"] = lay.expert_bytes_total();
    fprintf(stderr, "store: %d slots of %s = %s cache for %d experts (%s), layout %s, io %s\n", plan_.slots,
            format_bytes(double(need.slot_bytes)).c_str(), format_bytes(double(plan_.cache_bytes)).c_str(),
            lay.total_experts(), format_bytes(double(lay.expert_bytes_total())).c_str(), lay.name(), io.c_str());

    const auto t0 = std::chrono::steady_clock::now();
    auto store = std::make_unique<Store>(std::move(lay), plan_.slots, opt, &counters_);
    const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The arena's pages are allocated as reads first reach them (io_uring
    // registers it piece by piece); a slow setup means something else did.
    if (setup_s >= 0.5) fprintf(stderr, "store: cache memory set up in %.1f s\n", setup_s);
    settings_["cache_setup_seconds"] = setup_s;
    for (const std::string& n : store->notes()) fprintf(stderr, "note: %s\n", n.c_str());
    settings_["engine"] = store->engine_name();
    return store;
}

void StoreFlags::mark_decode() const {
    if (window_) window_->mark("decode", &counters_);
}

const Json& StoreFlags::finished() const {
    if (result_.is_null() && window_) result_ = window_->finish(&counters_);
    return result_;
}

void StoreFlags::add_to_report(Json* report) const {
    const Json& r = finished();
    if (r.is_null()) return;
    (*report)["store_settings"] = settings_;
    for (const char* key : {"store", "disk", "phases", "machine", "cpu_idle", "cpu_iowait"})
        if (const Json* v = r.find(key)) (*report)[key] = *v;
}

std::string StoreFlags::summary() const {
    const Json& r = finished();
    return r.is_null() ? "" : RunReport::summary(r);
}

}  // namespace ms
