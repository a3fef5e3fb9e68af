#include "telemetry/report.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace ms {

// Bytes this process caused to be read from storage (/proc/self/io
// read_bytes; O_DIRECT and io_uring reads included, page-cache hits not):
// unlike the device counters, other processes' reads do not show up here.
static uint64_t process_read_bytes() {
    FILE* f = fopen("/proc/self/io", "r");
    if (!f) return 0;
    char line[128];
    unsigned long long v = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "read_bytes: %llu", &v) == 1) break;
    fclose(f);
    return v;
}

RunReport::RunReport(const std::string& model_path) : model_path_(model_path) {
    try {
        device_ = block_device_of(model_path);
        if (!device_.empty()) disk0_ = read_diskstats(device_);
    } catch (const std::exception&) {
        device_.clear();  // no device counters: the report says so
    }
    cpu0_ = read_cpu_times();
    t0_ = std::chrono::steady_clock::now();
    phases_.push_back(snapshot("start", nullptr));
}

RunReport::Phase RunReport::snapshot(const std::string& name, const StoreCounters* store) const {
    Phase p;
    p.name = name;
    if (!device_.empty()) {
        try {
            p.disk = read_diskstats(device_);
        } catch (const std::exception&) {
        }
    }
    if (store) p.needed = store->total_needed(), p.read = store->total_read();
    p.process_read = process_read_bytes();
    p.t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    return p;
}

void RunReport::mark(const std::string& phase, const StoreCounters* store) {
    phases_.push_back(snapshot(phase, store));
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

Json RunReport::finish(const StoreCounters* store, uint64_t decode_tokens) {
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    CpuTimes cpu1 = read_cpu_times();
    Json r = Json::object();
    r["settings"] = settings;
    r["machine"] = machine_info(model_path_);
    r["results"] = results;
    r["wall_s"] = wall;
    r["cpu_idle"] = cpu_idle_fraction(cpu0_, cpu1);
    r["cpu_iowait"] = cpu_iowait_fraction(cpu0_, cpu1);
    r["rss_bytes"] = rss_bytes();
    r["peak_rss_bytes"] = peak_rss_bytes();

    // Device counters are device-wide: anything else reading the same disk
    // during the run is counted too.
    Json disk = Json::object();
    uint64_t physical = 0;
    bool have_disk = false;
    if (!device_.empty()) {
        try {
            DiskStats d = diskstats_delta(disk0_, read_diskstats(device_));
            physical = d.read_bytes;
            have_disk = true;
            disk["device"] = device_;
            disk["read_bytes"] = d.read_bytes;
            disk["reads"] = d.reads;
            disk["read_ms"] = d.read_ms;
            disk["io_ms"] = d.io_ms;
            disk["read_mb_per_s"] = wall > 0 ? double(d.read_bytes) / 1e6 / wall : 0.0;
        } catch (const std::exception&) {
        }
    }
    if (!have_disk) disk["device"] = nullptr;
    const uint64_t process_read = process_read_bytes() - phases_.front().process_read;
    disk["process_read_bytes"] = process_read;
    r["disk"] = std::move(disk);

    // Per phase: what the device delivered against what the model needed.
    phases_.push_back(snapshot("end", store));
    Json phases = Json::array();
    for (size_t i = 0; i + 1 < phases_.size(); i++) {
        const Phase &a = phases_[i], &b = phases_[i + 1];
        Json p = Json::object();
        p["phase"] = a.name;
        p["seconds"] = b.t - a.t;
        p["bytes_needed"] = b.needed - a.needed;
        p["bytes_read"] = b.read - a.read;
        if (have_disk) {
            uint64_t phys = diskstats_delta(a.disk, b.disk).read_bytes;
            p["physical_bytes"] = phys;
            p["read_amplification"] = ratio(double(phys), double(b.needed - a.needed));
        }
        p["process_read_bytes"] = b.process_read - a.process_read;
        p["process_read_amplification"] = ratio(double(b.process_read - a.process_read), double(b.needed - a.needed));
        phases.push_back(std::move(p));
    }
    // Per-token figures divide the decode phase's bytes when the command
    // marked one (else every demand and prefetch read: the prompt's too).
    const Phase* decode_from = nullptr;
    for (size_t i = 0; i + 1 < phases_.size(); i++)
        if (phases_[i].name == "decode") decode_from = &phases_[i];
    uint64_t decode_read = 0, decode_needed = 0;
    if (store && decode_from) {
        decode_read = (decode_from + 1)->read - decode_from->read;
        decode_needed = (decode_from + 1)->needed - decode_from->needed;
    } else if (store) {
        decode_read = store->read[int(ReadReason::Demand)] + store->read[int(ReadReason::Prefetch)];
        decode_needed = store->needed[int(ReadReason::Demand)] + store->needed[int(ReadReason::Prefetch)];
    }
    phases_.pop_back();
    r["phases"] = std::move(phases);

    if (store) {
        Json s = store->to_json();
        uint64_t tokens = decode_tokens ? decode_tokens : store->decode_steps;
        s["decode_tokens"] = tokens;
        s["mb_read_per_token"] = ratio(double(decode_read) / 1e6, double(tokens));
        s["mb_needed_per_token"] = ratio(double(decode_needed) / 1e6, double(tokens));
        // Bytes the drive delivered for every byte the model needed
        // (resident loading included when the runtime counted it).
        s["read_amplification"] = have_disk ? Json(ratio(double(physical), double(store->total_needed()))) : Json();
        s["process_read_amplification"] = ratio(double(process_read), double(store->total_needed()));
        s["request_amplification"] = ratio(double(store->total_read()), double(store->total_needed()));
        r["store"] = std::move(s);
    }
    return r;
}

void RunReport::write(const std::string& path, const Json& report) {
    FILE* f = fopen(path.c_str(), "w");
    if (!f) throw std::runtime_error(path + ": " + strerror(errno));
    std::string text = report.dump(2) + "\n";
    bool ok = fwrite(text.data(), 1, text.size(), f) == text.size();
    ok = (fclose(f) == 0) && ok;
    if (!ok) throw std::runtime_error(path + ": write failed");
}

std::string RunReport::summary(const Json& r) {
    std::string out;
    char line[256];
    if (const Json* s = r.find("store")) {
        snprintf(line, sizeof line, "store: hit rate %.1f%% (%lld hits, %lld misses), %.2f MB read per token\n",
                 100 * s->at("hit_rate").as_number(), (long long)s->at("hits").as_int(),
                 (long long)s->at("misses").as_int(), s->at("mb_read_per_token").as_number());
        out += line;
        const Json& amp = s->at("read_amplification");
        if (amp.is_number())
            snprintf(line, sizeof line,
                     "disk: %.1f MB physical for %.1f MB needed, read amplification %.3f (%s; this process: "
                     "%.3f)\n",
                     double(r.at("disk").at("read_bytes").as_int()) / 1e6,
                     double(s->at("bytes_needed").as_int()) / 1e6, amp.as_number(),
                     r.at("disk").at("device").as_string().c_str(), s->at("process_read_amplification").as_number());
        else
            snprintf(line, sizeof line, "disk: no device counters for this file system; %.1f MB requested\n",
                     double(s->at("bytes_read").as_int()) / 1e6);
        out += line;
    }
    return out;
}

}  // namespace ms
