#include "bench/ssd.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "bench/bench_file.h"
#include "bench/table.h"
#include "telemetry/build_info.h"
#include "telemetry/system.h"

namespace ms {

namespace {

const char* kPatternNames[] = {"sequential", "gguf_expert", "packed_expert", "strided", "rows", "cached"};
const char* kPatternLabels[] = {"sequential", "GGUF expert (1 read per part)", "packed expert (1 read)",
                                "prefill strided ascending", "random 4 KiB rows", "RAM-cached control"};

uint64_t round4k(uint64_t n) { return (n + kBenchBlock - 1) / kBenchBlock * kBenchBlock; }

uint64_t unit_bytes(const std::vector<uint64_t>& parts) {
    uint64_t u = 0;
    for (uint64_t p : parts) u += round4k(p);
    return u;
}

struct Test {
    SsdPattern pattern;
    bool uring;
    int n;  // threads or depth
};

// Reads the device counters, or zeros when the file is on no block device.
DiskStats sample(const std::string& device) { return device.empty() ? DiskStats{} : read_diskstats(device); }

uint64_t max_op(const std::vector<ReadOp>& ops) {
    uint64_t m = kBenchBlock;
    for (const ReadOp& o : ops) m = std::max<uint64_t>(m, o.length);
    return m;
}

std::vector<uint64_t> shuffled(uint64_t n, std::mt19937_64& rng) {
    std::vector<uint64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    return order;
}

std::string gbps_cell(const SsdResult* r) { return r ? strf("%.2f", r->stats.gb_per_s()) : "-"; }

}  // namespace

const char* ssd_pattern_name(SsdPattern p) { return kPatternNames[int(p)]; }

bool parse_ssd_pattern(const std::string& s, SsdPattern* out) {
    for (int i = 0; i < 6; ++i)
        if (s == kPatternNames[i]) {
            *out = SsdPattern(i);
            return true;
        }
    return false;
}

std::vector<ReadOp> plan_reads(SsdPattern p, uint64_t base, uint64_t len, const std::vector<uint64_t>& parts,
                               int stride, std::mt19937_64& rng) {
    std::vector<ReadOp> ops;
    const uint64_t unit = unit_bytes(parts);
    switch (p) {
        case SsdPattern::Sequential: {
            const uint64_t chunk = 4ull << 20;
            for (uint64_t off = 0; off + chunk <= len; off += chunk) ops.push_back({base + off, uint32_t(chunk)});
            break;
        }
        case SsdPattern::GgufExpert:
        case SsdPattern::Cached: {
            // Region i holds part i of every expert, like ffn_gate_exps,
            // ffn_up_exps and ffn_down_exps one after another in a GGUF.
            uint64_t n_exp = len / unit;
            for (uint64_t e : shuffled(n_exp, rng)) {
                uint64_t region = base;
                for (uint64_t part : parts) {
                    uint64_t sz = round4k(part);
                    ops.push_back({region + e * sz, uint32_t(sz)});
                    region += n_exp * sz;
                }
            }
            break;
        }
        case SsdPattern::PackedExpert: {
            for (uint64_t e : shuffled(len / unit, rng)) ops.push_back({base + e * unit, uint32_t(unit)});
            break;
        }
        case SsdPattern::Strided: {
            uint64_t n_exp = len / unit;
            for (uint64_t e = 0; e < n_exp; e += uint64_t(std::max(stride, 1)))
                ops.push_back({base + e * unit, uint32_t(unit)});
            break;
        }
        case SsdPattern::Rows: {
            for (uint64_t b : shuffled(len / kBenchBlock, rng)) ops.push_back({base + b * kBenchBlock, uint32_t(kBenchBlock)});
            break;
        }
    }
    return ops;
}

SsdReport run_ssd_bench(const SsdOptions& opt) {
    if (opt.expert_parts.empty()) throw std::runtime_error("bench ssd: no expert part sizes");
    for (uint64_t p : opt.expert_parts)
        if (p == 0 || round4k(p) > (1ull << 30)) throw std::runtime_error("bench ssd: bad expert part size");

    BenchFile bf = open_or_create_bench_file(opt.file, opt.size, opt.create_progress);
    std::string device = block_device_of(bf.path);
    int fd = open(bf.path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    bool direct = fd >= 0;
    if (fd < 0) fd = open(bf.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error(bf.path + ": " + strerror(errno));
    int cached_fd = open(bf.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (cached_fd < 0) throw std::runtime_error(bf.path + ": " + strerror(errno));

    std::vector<Test> tests;
    bool want_cached = false;
    for (SsdPattern p : opt.patterns) {
        if (p == SsdPattern::Cached) {
            want_cached = true;
            continue;
        }
        for (int t : opt.threads) tests.push_back({p, false, t});
        for (int d : opt.depths) tests.push_back({p, true, d});
    }
    const uint64_t unit = unit_bytes(opt.expert_parts);
    // A slice must hold enough experts that random order means something.
    const uint64_t min_slice = std::max<uint64_t>(4ull << 20, 4 * unit * uint64_t(std::max(opt.stride, 1)));
    const uint64_t mib4 = 4ull << 20;
    uint64_t control = want_cached ? (std::max(opt.control_bytes, 4 * unit) + mib4 - 1) / mib4 * mib4 : 0;
    uint64_t fresh_before = bf.fresh_bytes();
    uint64_t slice = opt.slice;
    if (slice == 0) {
        uint64_t need = tests.size() * min_slice + control;
        // Start over when what is left unread cannot give every test a slice.
        if (bf.fresh_bytes() < need) {
            bf.cursor = bf.data_begin();
            bf.wrapped = true;
        }
        slice = tests.empty() ? 0 : (bf.fresh_bytes() - control) / tests.size();
        slice = std::min<uint64_t>(slice, 1ull << 30) / kBenchBlock * kBenchBlock;
        if (!tests.empty() && slice < min_slice)
            throw std::runtime_error(bf.path + ": file too small for " + std::to_string(tests.size()) +
                                     " tests (each needs " + std::to_string(min_slice >> 20) +
                                     " MiB); use a larger --size");
    }
    slice = round4k(slice);

    std::mt19937_64 rng(opt.seed);
    SsdReport rep;
    rep.verified = direct && !device.empty();
    const uint64_t total_steps = tests.size() + (want_cached ? opt.threads.size() : 0);
    uint64_t step = 0;
    for (const Test& t : tests) {
        std::string label = strf("%s %s=%d", ssd_pattern_name(t.pattern), t.uring ? "qd" : "threads", t.n);
        if (opt.progress) opt.progress(label, step, total_steps);
        SsdResult r;
        r.pattern = t.pattern;
        r.engine = t.uring ? "uring" : "pread";
        r.threads = t.uring ? 1 : t.n;
        r.depth = t.uring ? t.n : 1;
        r.slice_bytes = slice;
        r.slice_offset = bf.take(slice);
        std::vector<ReadOp> ops = plan_reads(t.pattern, r.slice_offset, slice, opt.expert_parts, opt.stride, rng);
        r.read_size = max_op(ops);
        r.reads_per_unit = t.pattern == SsdPattern::GgufExpert ? int(opt.expert_parts.size()) : 1;
        if (!direct) posix_fadvise(fd, off_t(r.slice_offset), off_t(slice), POSIX_FADV_DONTNEED);
        DiskStats before = sample(device);
        uint64_t proc0 = proc_io_read_bytes();
        if (t.uring) {
            r.stats = uring_read(fd, ops.data(), ops.size(), t.n, r.read_size, opt.seconds);
        } else {
            PreadPool pool(t.n, r.read_size);
            r.stats = pool.run(fd, ops.data(), ops.size(), opt.seconds);
        }
        DiskStats d = diskstats_delta(before, sample(device));
        r.process_bytes = proc_io_read_bytes() - proc0;
        r.device_bytes = d.read_bytes;
        r.device_reads = d.reads;
        if (!device.empty() && r.stats.bytes) r.physical_share = double(d.read_bytes) / double(r.stats.bytes);
        rep.results.push_back(r);
        ++step;
    }

    if (want_cached) {
        // The control: a working set read twice through the page cache to
        // warm it, then timed like the GGUF expert pattern. Its physical
        // share should be near zero.
        uint64_t at = bf.take(control);
        std::vector<ReadOp> warm = plan_reads(SsdPattern::Sequential, at, control, opt.expert_parts, 1, rng);
        {
            PreadPool pool(1, 4ull << 20);
            for (int pass = 0; pass < 2; ++pass) pool.run(cached_fd, warm.data(), warm.size(), 0);
        }
        for (int t : opt.threads) {
            if (opt.progress) opt.progress(strf("cached threads=%d", t), step, total_steps);
            std::vector<ReadOp> ops;
            // Enough repetitions of the working set to fill the time limit at
            // any plausible memory bandwidth.
            for (int rep_i = 0; rep_i < 64; ++rep_i) {
                std::vector<ReadOp> one = plan_reads(SsdPattern::Cached, at, control, opt.expert_parts, 1, rng);
                ops.insert(ops.end(), one.begin(), one.end());
            }
            SsdResult r;
            r.pattern = SsdPattern::Cached;
            r.engine = "pread";
            r.threads = t;
            r.slice_offset = at;
            r.slice_bytes = control;
            r.read_size = max_op(ops);
            r.reads_per_unit = int(opt.expert_parts.size());
            PreadPool pool(t, r.read_size);
            DiskStats before = sample(device);
            uint64_t proc0 = proc_io_read_bytes();
            r.stats = pool.run(cached_fd, ops.data(), ops.size(), opt.seconds);
            r.process_bytes = proc_io_read_bytes() - proc0;
            DiskStats d = diskstats_delta(before, sample(device));
            r.device_bytes = d.read_bytes;
            r.device_reads = d.reads;
            if (!device.empty() && r.stats.bytes) r.physical_share = double(d.read_bytes) / double(r.stats.bytes);
            rep.results.push_back(r);
            ++step;
        }
        posix_fadvise(cached_fd, off_t(at), off_t(control), POSIX_FADV_DONTNEED);
    }
    if (opt.progress) opt.progress("done", total_steps, total_steps);
    close(fd);
    close(cached_fd);
    bf.save_cursor();

    // Verdict over the uncached tests.
    size_t uncached = 0;
    for (const SsdResult& r : rep.results) {
        if (r.pattern == SsdPattern::Cached) continue;
        ++uncached;
        if (r.physical_share >= 0 && (rep.min_uncached_share < 0 || r.physical_share < rep.min_uncached_share))
            rep.min_uncached_share = r.physical_share;
    }

    // Tables: one per engine, GB/s per thread count or depth.
    auto find = [&](SsdPattern p, bool uring, int n) -> const SsdResult* {
        for (const SsdResult& r : rep.results)
            if (r.pattern == p && (r.engine == "uring") == uring && (uring ? r.depth : r.threads) == n) return &r;
        return nullptr;
    };
    auto size_cell = [&](SsdPattern p) {
        if (p == SsdPattern::Sequential) return std::string("4 MiB");
        if (p == SsdPattern::Rows) return std::string("4 KiB");
        if (p == SsdPattern::GgufExpert || p == SsdPattern::Cached) {
            bool same = std::all_of(opt.expert_parts.begin(), opt.expert_parts.end(),
                                    [&](uint64_t x) { return round4k(x) == round4k(opt.expert_parts[0]); });
            if (same) return strf("%zux%s", opt.expert_parts.size(), size_label(round4k(opt.expert_parts[0])).c_str());
            std::string s;
            for (uint64_t x : opt.expert_parts) {
                if (!s.empty()) s += '+';
                s += size_label(round4k(x));
            }
            return s;
        }
        return size_label(unit);
    };
    std::string out;
    for (int uring = 0; uring < 2; ++uring) {
        const std::vector<int>& ns = uring ? opt.depths : opt.threads;
        if (ns.empty()) continue;
        Table tb;
        tb.left_columns = 2;
        tb.header = {"pattern", "read size"};
        for (int n : ns) tb.header.push_back(strf(uring ? "qd=%d" : "t=%d", n));
        tb.header.push_back("phys %");
        bool any = false;
        for (SsdPattern p : opt.patterns) {
            if (uring && p == SsdPattern::Cached) continue;
            std::vector<std::string> row = {kPatternLabels[int(p)], size_cell(p)};
            double lo = -1, hi = -1;
            for (int n : ns) {
                const SsdResult* r = find(p, uring != 0, n);
                row.push_back(gbps_cell(r));
                if (r && r->physical_share >= 0) {
                    lo = lo < 0 ? r->physical_share : std::min(lo, r->physical_share);
                    hi = std::max(hi, r->physical_share);
                }
            }
            std::string los = strf("%.1f", lo * 100), his = strf("%.1f", hi * 100);
            row.push_back(lo < 0 ? "n/a" : los == his || p == SsdPattern::Cached ? his : los + "-" + his);
            tb.add(row);
            if (p == SsdPattern::Rows) {
                std::vector<std::string> iops = {"  (thousand reads/s)", ""};
                for (int n : ns) {
                    const SsdResult* r = find(p, uring != 0, n);
                    iops.push_back(r ? strf("%.1f", r->stats.iops() / 1e3) : "-");
                }
                iops.push_back("");
                tb.add(iops);
            }
            any = true;
        }
        if (!any) continue;
        out += uring ? "\nio_uring, one thread, GB/s by queue depth:\n" : "\npread, GB/s by thread count (one read in flight per thread):\n";
        out += tb.text();
    }
    if (rep.verified && rep.min_uncached_share >= 0) {
        out += strf("\nphysical share of uncached tests (device %s counted / bytes requested): min %.1f%% over %zu "
                    "tests: %s\n",
                    device.c_str(), rep.min_uncached_share * 100, uncached,
                    rep.min_uncached_share >= 0.99 ? "ok (>= 99%)" : "LOW (< 99%: some reads did not reach the device)");
    } else {
        out += strf("\nphysical share not verified: %s\n",
                    device.empty() ? "the file is on no block device (tmpfs/overlay?)"
                                   : "O_DIRECT is not supported here; reads may have been cached");
    }
    out += "(phys % = bytes the device served / bytes requested; above 100 when other processes read the device "
           "at the same time)\n";
    if (bf.wrapped) out += "note: the bench file was exhausted and slices read by an earlier run were reused\n";
    rep.table = out;

    Json j = Json::object();
    j["command"] = "bench ssd";
    j["schema_version"] = 1;
    j["machine"] = machine_info(bf.path);
    j["build"] = build_info();
    Json s = Json::object();
    s["seconds_per_test"] = opt.seconds;
    s["slice_bytes"] = slice;
    Json th = Json::array(), dp = Json::array(), pats = Json::array(), parts = Json::array();
    for (int t : opt.threads) th.push_back(t);
    for (int d : opt.depths) dp.push_back(d);
    for (SsdPattern p : opt.patterns) pats.push_back(ssd_pattern_name(p));
    for (uint64_t p : opt.expert_parts) parts.push_back(p);
    s["threads"] = th;
    s["depths"] = dp;
    s["patterns"] = pats;
    s["expert_part_bytes"] = parts;
    s["expert_parts_from"] = opt.model.empty() ? Json("default") : Json(opt.model);
    s["stride"] = opt.stride;
    s["control_bytes"] = control;
    s["seed"] = opt.seed;
    j["settings"] = s;
    Json f = Json::object();
    f["path"] = bf.path;
    f["size_bytes"] = bf.size;
    f["created"] = bf.created;
    f["fresh_bytes_before"] = fresh_before;
    f["wrapped"] = bf.wrapped;
    f["direct"] = direct;
    f["device"] = device.empty() ? Json(nullptr) : Json(device);
    j["file"] = f;
    Json res = Json::array();
    for (const SsdResult& r : rep.results) {
        Json o = Json::object();
        o["pattern"] = ssd_pattern_name(r.pattern);
        o["engine"] = r.engine;
        o["threads"] = r.threads;
        o["depth"] = r.depth;
        o["read_size"] = r.read_size;
        o["reads_per_expert"] = r.reads_per_unit;
        o["uncached"] = r.pattern != SsdPattern::Cached;
        o["slice_offset"] = r.slice_offset;
        o["slice_bytes"] = r.slice_bytes;
        o["reads"] = r.stats.reads;
        o["bytes"] = r.stats.bytes;
        o["seconds"] = r.stats.seconds;
        o["gb_per_s"] = r.stats.gb_per_s();
        o["iops"] = r.stats.iops();
        o["lat_avg_us"] = r.stats.lat_avg_us;
        o["lat_p50_us"] = r.stats.lat_p50_us;
        o["lat_p99_us"] = r.stats.lat_p99_us;
        o["lat_max_us"] = r.stats.lat_max_us;
        o["device_read_bytes"] = r.device_bytes;
        o["device_reads"] = r.device_reads;
        o["physical_share"] = r.physical_share >= 0 ? Json(r.physical_share) : Json(nullptr);
        o["process_read_bytes"] = r.process_bytes;
        res.push_back(o);
    }
    j["results"] = res;
    Json v = Json::object();
    v["uncached_tests"] = uint64_t(uncached);
    v["verified"] = rep.verified;
    v["min_physical_share"] = rep.min_uncached_share >= 0 ? Json(rep.min_uncached_share) : Json(nullptr);
    v["uncached_ok"] = rep.verified && rep.min_uncached_share >= 0.99;
    j["summary"] = v;
    rep.json = j;
    return rep;
}

}  // namespace ms
