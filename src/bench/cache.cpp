#include "bench/cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>

#include "bench/bench_file.h"
#include "bench/model_experts.h"
#include "bench/table.h"
#include "telemetry/build_info.h"
#include "telemetry/system.h"

namespace ms {

namespace {

constexpr uint64_t kPage = 4096;

struct Source {
    std::string kind, path;
    std::vector<CacheExpert> experts;
    bool remove_after = false;
};

CacheExpert packed_expert(uint64_t offset, uint64_t bytes) {
    CacheExpert e;
    e.ranges.push_back({offset, uint32_t(bytes), 0});
    e.bytes = bytes;
    return e;
}

Source model_source(const CacheOptions& opt) {
    ModelExperts me = read_model_experts(opt.model);
    size_t li = opt.layer >= 0 && opt.layer < me.n_layers ? size_t(opt.layer) : 0;
    const ExpertLayer& l = me.layers[li];
    if (l.gate.split != l.up.split || l.gate.split != l.down.split)
        throw std::runtime_error(opt.model + ": layer " + std::to_string(l.layer) +
                                 ": expert tensors lie in different split files");
    Source s;
    s.kind = "model";
    s.path = me.files.at(size_t(l.gate.split));
    int n = std::min(opt.experts, l.n_expert);
    for (int e = 0; e < n; ++e) {
        CacheExpert x;
        for (const ExpertMatrix* m : {&l.gate, &l.up, &l.down}) x.ranges.push_back({m->offset(e), uint32_t(m->bytes), 0});
        x.bytes = l.expert_bytes();
        s.experts.push_back(x);
    }
    return s;
}

Source file_source(const CacheOptions& opt) {
    struct stat st;
    if (stat(opt.file.c_str(), &st) != 0) throw std::runtime_error(opt.file + ": " + strerror(errno));
    uint64_t n = uint64_t(st.st_size) / opt.expert_bytes;
    if (n == 0) throw std::runtime_error(opt.file + ": smaller than one expert of " + size_label(opt.expert_bytes));
    Source s;
    s.kind = "file";
    s.path = opt.file;
    n = std::min<uint64_t>(n, uint64_t(opt.experts));
    for (uint64_t e = 0; e < n; ++e) s.experts.push_back(packed_expert(e * opt.expert_bytes, opt.expert_bytes));
    return s;
}

// A packed file of random experts in the current directory, written through
// the page cache (which is exactly where this benchmark wants them).
Source synthetic_source(const CacheOptions& opt) {
    Source s;
    s.kind = "synthetic";
    s.path = "moestream-cache-bench." + std::to_string(getpid()) + ".dat";
    s.remove_after = true;
    uint64_t total = opt.expert_bytes * uint64_t(opt.experts);
    if (total + (1ull << 30) > free_bytes_at(s.path))
        throw std::runtime_error(s.path + ": not enough free space for " + size_label(total));
    int fd = open(s.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error(s.path + ": " + strerror(errno));
    std::vector<uint8_t> buf(4ull << 20);
    for (uint64_t off = 0; off < total; off += buf.size()) {
        uint64_t n = std::min<uint64_t>(buf.size(), total - off);
        fill_bench_bytes(buf.data(), (n + 7) / 8 * 8, off, opt.seed);
        if (write(fd, buf.data(), n) != ssize_t(n)) {
            int e = errno;
            close(fd);
            unlink(s.path.c_str());
            throw std::runtime_error(s.path + ": write: " + strerror(e));
        }
    }
    close(fd);
    for (int e = 0; e < opt.experts; ++e) s.experts.push_back(packed_expert(uint64_t(e) * opt.expert_bytes, opt.expert_bytes));
    return s;
}

double mean(const std::vector<double>& v) { return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()); }

}  // namespace

std::vector<ReadOp> split_expert(const CacheExpert& e, int split, uint64_t dst_base) {
    std::vector<ReadOp> out;
    uint64_t dst = dst_base;
    for (const ReadOp& r : e.ranges) {
        uint64_t chunk = (uint64_t(r.length) + uint64_t(std::max(split, 1)) - 1) / uint64_t(std::max(split, 1));
        chunk = (chunk + kPage - 1) / kPage * kPage;
        for (uint64_t off = 0; off < r.length; off += chunk) {
            uint64_t n = std::min<uint64_t>(chunk, r.length - off);
            out.push_back({r.offset + off, uint32_t(n), dst + off});
        }
        dst += r.length;
    }
    return out;
}

CacheReport run_cache_bench(const CacheOptions& opt) {
    if (opt.experts < 1) throw std::runtime_error("bench cache: --experts must be at least 1");
    if (opt.passes < 1) throw std::runtime_error("bench cache: --passes must be at least 1");
    if (opt.expert_bytes == 0 || opt.expert_bytes > (1ull << 31)) throw std::runtime_error("bench cache: bad --expert-size");
    Source src = !opt.model.empty() ? model_source(opt) : !opt.file.empty() ? file_source(opt) : synthetic_source(opt);
    int fd = open(src.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error(src.path + ": " + strerror(errno));

    CacheReport rep;
    rep.source = src.kind;
    rep.path = src.path;
    rep.experts = int(src.experts.size());
    rep.reads_per_expert = int(src.experts[0].ranges.size());
    uint64_t slot = 0;
    for (const CacheExpert& e : src.experts) {
        rep.pass_bytes += e.bytes;
        slot = std::max(slot, (e.bytes + kPage - 1) / kPage * kPage);
    }
    // Each expert lands in its own slot of an arena, as in the store's
    // cache: copying every expert into one small buffer would keep the
    // destination in the CPU cache and flatter the numbers.
    uint64_t arena_bytes = slot * src.experts.size();
    void* arena_p = nullptr;
    if (posix_memalign(&arena_p, kPage, arena_bytes) != 0) throw std::runtime_error("bench cache: out of memory");
    uint8_t* arena = static_cast<uint8_t*>(arena_p);
    memset(arena, 0, arena_bytes);

    std::vector<std::pair<int, int>> configs;
    if (opt.grid) {
        for (int t : opt.grid_threads)
            for (int s : opt.grid_splits) configs.push_back({t, s});
    } else {
        configs.push_back({opt.threads, opt.split});
    }
    std::string device = block_device_of(src.path);
    Json machine = machine_info(src.path);  // before a synthetic file is removed
    std::mt19937_64 rng(opt.seed);
    std::vector<size_t> order(src.experts.size());
    std::iota(order.begin(), order.end(), 0);
    uint64_t steps = configs.size() * uint64_t(opt.warmup + opt.passes), step = 0;
    try {
        for (auto [threads, split] : configs) {
            PreadPool pool(threads, kPage);
            CacheRun run;
            run.threads = threads;
            run.split = split;
            DiskStats d0;
            for (int p = 0; p < opt.warmup + opt.passes; ++p) {
                if (opt.progress) opt.progress(strf("threads %d split %d", threads, split), step++, steps);
                std::shuffle(order.begin(), order.end(), rng);
                std::vector<ReadOp> ops;
                for (size_t e : order) {
                    std::vector<ReadOp> part = split_expert(src.experts[e], split, e * slot);
                    ops.insert(ops.end(), part.begin(), part.end());
                }
                if (p == opt.warmup && !device.empty()) d0 = read_diskstats(device);
                ReadStats s = pool.run(fd, ops.data(), ops.size(), 0, arena);
                if (p >= opt.warmup) run.passes.push_back({s.seconds, s.bytes});
            }
            if (!device.empty()) run.device_bytes = diskstats_delta(d0, read_diskstats(device)).read_bytes;
            std::vector<double> secs;
            for (const CachePass& c : run.passes) secs.push_back(c.seconds);
            run.avg_seconds = mean(secs);
            run.best_seconds = *std::min_element(secs.begin(), secs.end());
            run.worst_seconds = *std::max_element(secs.begin(), secs.end());
            rep.runs.push_back(run);
        }
    } catch (...) {
        free(arena);
        close(fd);
        if (src.remove_after) unlink(src.path.c_str());
        throw;
    }
    if (opt.progress) opt.progress("done", steps, steps);
    free(arena);
    close(fd);
    if (src.remove_after) unlink(src.path.c_str());

    // Text: per-pass detail for a single configuration, a grid table otherwise.
    auto gbs = [&](double secs) { return secs > 0 ? double(rep.pass_bytes) / secs / 1e9 : 0; };
    auto us_per_expert = [&](double secs) { return secs * 1e6 / double(rep.experts); };
    std::string t = strf("bench cache: %d experts of %s (%s%s, %d read%s each), %d warm-up + %d timed passes, "
                         "shuffled each pass\n",
                         rep.experts, size_label(rep.pass_bytes / uint64_t(rep.experts)).c_str(), src.kind.c_str(),
                         src.kind == "synthetic" ? "" : (" " + src.path).c_str(), rep.reads_per_expert,
                         rep.reads_per_expert > 1 ? "s" : "", opt.warmup, opt.passes);
    uint64_t dev_total = 0;
    if (!opt.grid) {
        const CacheRun& r = rep.runs[0];
        t += strf("threads %d, split %d\n\n", r.threads, r.split);
        Table tb;
        tb.header = {"pass", "ms", "GB/s", "GiB/s", "us/expert"};
        for (size_t i = 0; i < r.passes.size(); ++i) {
            double s = r.passes[i].seconds;
            tb.add({std::to_string(i + 1), strf("%.2f", s * 1e3), strf("%.2f", gbs(s)),
                    strf("%.2f", gbs(s) * 1e9 / double(1ull << 30)), strf("%.1f", us_per_expert(s))});
        }
        for (auto [name, s] : {std::pair<const char*, double>{"average", r.avg_seconds},
                               {"best", r.best_seconds}, {"worst", r.worst_seconds}})
            tb.add({name, strf("%.2f", s * 1e3), strf("%.2f", gbs(s)), strf("%.2f", gbs(s) * 1e9 / double(1ull << 30)),
                    strf("%.1f", us_per_expert(s))});
        t += tb.text();
    } else {
        Table tb;
        tb.left_columns = 0;
        tb.header = {"threads", "split", "avg GB/s", "avg GiB/s", "avg us/expert", "best GB/s", "worst GB/s"};
        for (const CacheRun& r : rep.runs)
            tb.add({std::to_string(r.threads), std::to_string(r.split), strf("%.2f", gbs(r.avg_seconds)),
                    strf("%.2f", gbs(r.avg_seconds) * 1e9 / double(1ull << 30)), strf("%.1f", us_per_expert(r.avg_seconds)),
                    strf("%.2f", gbs(r.best_seconds)), strf("%.2f", gbs(r.worst_seconds))});
        t += "\n" + tb.text();
    }
    for (const CacheRun& r : rep.runs) dev_total += r.device_bytes;
    uint64_t timed_bytes = rep.pass_bytes * uint64_t(opt.passes) * rep.runs.size();
    if (!device.empty())
        t += strf("\ndevice %s served %s during the timed passes (%.2f%% of the %s delivered): %s\n", device.c_str(),
                  size_label(dev_total).c_str(), 100.0 * double(dev_total) / double(timed_bytes),
                  size_label(timed_bytes).c_str(),
                  dev_total * 100 < timed_bytes ? "warm, as intended" : "NOT warm: the working set does not stay cached");
    rep.text = t;

    Json j = Json::object();
    j["command"] = "bench cache";
    j["schema_version"] = 1;
    j["machine"] = machine;
    j["build"] = build_info();
    Json s = Json::object();
    s["source"] = src.kind;
    s["path"] = src.kind == "synthetic" ? Json(nullptr) : Json(src.path);
    s["model"] = opt.model.empty() ? Json(nullptr) : Json(opt.model);
    s["layer"] = opt.layer;
    s["experts"] = rep.experts;
    s["reads_per_expert"] = rep.reads_per_expert;
    s["pass_bytes"] = rep.pass_bytes;
    s["warmup"] = opt.warmup;
    s["passes"] = opt.passes;
    s["grid"] = opt.grid;
    s["seed"] = opt.seed;
    j["settings"] = s;
    Json runs = Json::array();
    for (const CacheRun& r : rep.runs) {
        Json o = Json::object();
        o["threads"] = r.threads;
        o["split"] = r.split;
        Json ps = Json::array();
        for (const CachePass& c : r.passes) {
            Json p = Json::object();
            p["seconds"] = c.seconds;
            p["bytes"] = c.bytes;
            p["gb_per_s"] = c.gb_per_s();
            ps.push_back(p);
        }
        o["passes"] = ps;
        o["avg_gb_per_s"] = gbs(r.avg_seconds);
        o["avg_gib_per_s"] = gbs(r.avg_seconds) * 1e9 / double(1ull << 30);
        o["avg_us_per_expert"] = us_per_expert(r.avg_seconds);
        o["best_gb_per_s"] = gbs(r.best_seconds);
        o["worst_gb_per_s"] = gbs(r.worst_seconds);
        o["device_read_bytes"] = r.device_bytes;
        runs.push_back(o);
    }
    j["runs"] = runs;
    rep.json = j;
    return rep;
}

}  // namespace ms
