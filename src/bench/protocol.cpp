#include "bench/protocol.h"

#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <thread>

#include "bench/cgroup.h"
#include "bench/child.h"
#include "bench/model_bench.h"
#include "bench/plot.h"
#include "bench/table.h"
#include "gguf/gguf.h"
#include "telemetry/build_info.h"
#include "telemetry/system.h"

namespace ms {

namespace fs = std::filesystem;

namespace {


// Samples the machine every interval: device counters and CPU times as
// deltas since the previous sample, and the RSS of a process.
struct Sampler {
    std::string device;
    DiskStats disk_prev;
    CpuTimes cpu_prev;
    uint64_t proc_prev = 0;
    double t_prev = 0;

    explicit Sampler(std::string dev) : device(std::move(dev)) { reset(); }
    void reset() {
        if (!device.empty()) disk_prev = read_diskstats(device);
        cpu_prev = read_cpu_times();
        proc_prev = 0;  // a new child starts from zero
        t_prev = 0;
    }
    ProtocolSample take(int pid, double t) {
        ProtocolSample s;
        s.t = t;
        double dt = t - t_prev;
        if (!device.empty()) {
            DiskStats now = read_diskstats(device);
            DiskStats d = diskstats_delta(disk_prev, now);
            disk_prev = now;
            if (dt > 0) {
                s.mb_per_s = double(d.read_bytes) / 1e6 / dt;
                s.iops = double(d.reads) / dt;
            }
        }
        CpuTimes c = read_cpu_times();
        s.cpu_idle = cpu_idle_fraction(cpu_prev, c);
        cpu_prev = c;
        s.rss_bytes = pid > 0 ? rss_bytes(pid) : 0;
        if (pid > 0) {
            uint64_t p = proc_io_read_bytes(pid);
            if (dt > 0 && p >= proc_prev) s.proc_mb_per_s = double(p - proc_prev) / 1e6 / dt;
            proc_prev = std::max(proc_prev, p);
        }
        t_prev = t;
        return s;
    }
};

std::string mb_cell(double v) { return std::isnan(v) ? "-" : strf("%.1f", v); }

std::string ms_per_token(double seconds, int64_t tokens) {
    return std::isnan(seconds) || tokens <= 0 ? "-" : strf("%.2f", seconds * 1e3 / double(tokens));
}

// Runs gnuplot on one of the scripts/plot_protocol_*.gp files.
std::string plot(const std::string& scripts_dir, const char* script, const std::string& vars,
                 const std::string& out_dir) {
    const std::string err = run_gnuplot(vars, scripts_dir + "/" + script, out_dir + "/gnuplot.err");
    return err.empty() ? "" : std::string(script) + ": " + err;
}

Json sample_json(const ProtocolSample& s) {
    Json o = Json::object();
    o["t"] = s.t;
    o["mb_per_s"] = std::isnan(s.mb_per_s) ? Json(nullptr) : Json(s.mb_per_s);
    o["process_mb_per_s"] = s.proc_mb_per_s;
    o["iops"] = std::isnan(s.iops) ? Json(nullptr) : Json(s.iops);
    o["cpu_idle"] = s.cpu_idle;
    o["rss_bytes"] = s.rss_bytes;
    return o;
}

Json nan_null(double v) { return std::isnan(v) ? Json(nullptr) : Json(v); }

}  // namespace

void summarize_samples(ProtocolCaseResult* r) {
    double mb = 0, io = 0, idle = 0;
    int n_dev = 0, n = 0;
    r->min_mb_s = r->max_mb_s = NAN;
    for (const ProtocolSample& s : r->samples) {
        idle += s.cpu_idle;
        ++n;
        if (std::isnan(s.mb_per_s)) continue;
        mb += s.mb_per_s;
        io += s.iops;
        ++n_dev;
        r->min_mb_s = std::isnan(r->min_mb_s) ? s.mb_per_s : std::min(r->min_mb_s, s.mb_per_s);
        r->max_mb_s = std::isnan(r->max_mb_s) ? s.mb_per_s : std::max(r->max_mb_s, s.mb_per_s);
    }
    r->avg_mb_s = n_dev ? mb / n_dev : NAN;
    r->avg_iops = n_dev ? io / n_dev : NAN;
    r->avg_idle = n ? idle / n : NAN;
}

ProtocolReport run_protocol(const ProtocolOptions& opt) {
    if (opt.cases.empty()) throw std::runtime_error("bench protocol: no cases");
    for (const ProtocolCase& c : opt.cases)
        if (!fs::exists(c.prompt_file)) throw std::runtime_error(c.prompt_file + ": prompt file not found");
    if (access(opt.binary.c_str(), X_OK) != 0) throw std::runtime_error(opt.binary + ": not an executable");
    uint64_t model_size = GgufFile::open(opt.model).total_bytes();
    fs::create_directories(opt.out_dir);
    const RunCaps caps = probe_run_caps(opt.binary, opt.out_dir);
    const std::string device = block_device_of(opt.model);

    // A context that holds the longest prompt and the generation, unless the
    // caller chose one: `run`'s default may be too small for the long case.
    std::vector<std::string> run_args = opt.run_args;
    int ctx = 0;
    if (std::find(run_args.begin(), run_args.end(), "-c") == run_args.end() &&
        std::find(run_args.begin(), run_args.end(), "--ctx") == run_args.end()) {
        int longest = 0;
        for (const ProtocolCase& c : opt.cases)
            longest = std::max(longest, count_prompt_tokens(opt.binary, opt.model, c.prompt_file, opt.out_dir + "/tokens"));
        ctx = (longest + opt.n_gen + 64 + 511) / 512 * 512;
        run_args.insert(run_args.end(), {"-c", std::to_string(ctx)});
    }

    ProtocolReport rep;
    Sampler sampler(device);
    std::vector<ProtocolCase> plan;
    if (opt.warmup) plan.push_back({"warmup", opt.cases[0].prompt_file, opt.cases[0].seed});
    plan.insert(plan.end(), opt.cases.begin(), opt.cases.end());
    const uint64_t steps = plan.size() + (opt.baseline_s > 0 ? 1 : 0);
    uint64_t step = 0;

    if (opt.baseline_s > 0) {
        // The machine at rest, to compare the cases against.
        if (opt.progress) opt.progress("idle baseline", step, steps);
        sampler.reset();
        for (double t = opt.interval_s; t <= opt.baseline_s + 1e-9; t += opt.interval_s) {
            std::this_thread::sleep_for(std::chrono::duration<double>(opt.interval_s));
            rep.baseline.push_back(sampler.take(0, t));
        }
        ++step;
    }

    for (const ProtocolCase& pc : plan) {
        if (opt.progress) opt.progress(pc.name, step, steps);
        ProtocolCaseResult r;
        r.name = pc.name;
        r.prompt_file = pc.prompt_file;
        r.started = time_now("%Y-%m-%d %H:%M:%S", false);
        std::unique_ptr<MemoryCgroup> cg;
        if (opt.limit_mem > 0)
            cg = std::make_unique<MemoryCgroup>(strf("moestream-protocol-%d-%s", int(getpid()), pc.name.c_str()),
                                                opt.limit_mem);
        if (opt.drop_caches) {
            drop_file_cache(opt.model);
            drop_file_cache(opt.model + ".experts");
        }
        RunRequest q;
        q.binary = opt.binary;
        q.model = opt.model;
        q.prompt_file = pc.prompt_file;
        q.n_gen = opt.n_gen;
        q.seed = pc.seed >= 0 ? uint64_t(pc.seed) : opt.seed;
        q.report = opt.out_dir + "/" + pc.name + ".report.json";
        q.trace = opt.out_dir + "/" + pc.name + ".trace.json";
        q.extra = run_args;
        q.caps = caps;
        ChildOptions co;
        co.argv = run_argv(q);
        co.stdout_path = opt.out_dir + "/" + pc.name + ".out.txt";
        co.stderr_path = opt.out_dir + "/" + pc.name + ".err.txt";
        co.cgroup = cg.get();
        co.timeout_s = opt.timeout_s;
        co.sample_interval_s = opt.interval_s;
        co.on_sample = [&](int pid, double t) {
            r.samples.push_back(sampler.take(pid, t));
            r.process_read_bytes = sampler.proc_prev;
            if (opt.progress) opt.progress(pc.name, step, steps);
        };
        MemInfo mem0 = read_meminfo();
        SwapActivity sw0 = read_swap_activity();
        DiskStats d0 = device.empty() ? DiskStats{} : read_diskstats(device);
        sampler.reset();
        ChildResult cr = run_child(co);
        r.wall_s = cr.wall_s;
        if (!device.empty()) r.device_read_bytes = diskstats_delta(d0, read_diskstats(device)).read_bytes;
        MemInfo mem1 = read_meminfo();
        SwapActivity sw1 = read_swap_activity();
        r.swap_used_delta = int64_t(mem1.swap_used()) - int64_t(mem0.swap_used());
        r.swap_in_pages = sw1.pages_in - sw0.pages_in;
        r.swap_out_pages = sw1.pages_out - sw0.pages_out;
        if (!cr.ok()) {
            r.error = strf("%s failed (%s): %s", pc.name.c_str(), cr.describe().c_str(),
                           tail_lines(co.stderr_path, 3).c_str());
        } else {
            try {
                r.run = read_run_figures(Json::parse_file(q.report), q.report);
                r.ok = true;
            } catch (const std::exception& e) {
                r.error = e.what();
            }
        }
        for (const ProtocolSample& s : r.samples) r.peak_rss_bytes = std::max(r.peak_rss_bytes, s.rss_bytes);
        if (r.ok && r.run.peak_rss_bytes) r.peak_rss_bytes = r.run.peak_rss_bytes;
        summarize_samples(&r);
        rep.cases.push_back(std::move(r));
        ++step;
    }
    if (opt.progress) opt.progress("done", steps, steps);

    // Data for the charts: samples per measured case (gnuplot index blocks)
    // and time per processed token split by kind of work.
    std::vector<const ProtocolCaseResult*> measured;
    for (const ProtocolCaseResult& c : rep.cases)
        if (c.name != "warmup") measured.push_back(&c);
    std::string titles;
    {
        std::ofstream f(opt.out_dir + "/samples.tsv");
        f << "# t_s\tmb_per_s\tiops\tcpu_idle_pct\trss_mib\tprocess_mb_per_s (one block per case: ";
        for (const ProtocolCaseResult* c : measured) f << c->name << " ";
        f << ")\n";
        for (const ProtocolCaseResult* c : measured) {
            titles += (titles.empty() ? "" : " ") + c->name;
            for (const ProtocolSample& s : c->samples)
                f << strf("%.2f\t%.3f\t%.1f\t%.1f\t%.1f\t%.3f\n", s.t, std::isnan(s.mb_per_s) ? 0.0 : s.mb_per_s,
                          std::isnan(s.iops) ? 0.0 : s.iops, s.cpu_idle * 100, double(s.rss_bytes) / (1 << 20),
                          s.proc_mb_per_s);
            if (c->samples.empty()) f << "0\t0\t0\t0\t0\t0\n";  // keep the block count right
            f << "\n\n";
        }
    }
    bool split_known = false;
    {
        std::ofstream f(opt.out_dir + "/split.tsv");
        f << "# case\tattention\trouting\tio_wait\texpert_compute\tother (ms per processed token)\n";
        for (const ProtocolCaseResult* c : measured) {
            if (!c->ok) continue;
            int64_t toks = c->run.prefill_tokens + c->run.decode_tokens;
            double total = c->run.prefill_seconds + c->run.decode_seconds;
            const PhaseTimes& p = c->run.phases;
            double ms = toks > 0 ? 1e3 / double(toks) : 0;
            // Kinds a report lacks count as 0; the time they leave is "other".
            auto z = [](double v) { return std::isnan(v) ? 0.0 : v; };
            split_known = split_known || !std::isnan(p.attention);
            const double known = z(p.attention) + z(p.routing) + z(p.io_wait) + z(p.expert_compute);
            const double other = std::isnan(p.other) ? std::max(0.0, total - known) : p.other;
            f << strf("%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", c->name.c_str(), z(p.attention) * ms, z(p.routing) * ms,
                      z(p.io_wait) * ms, z(p.expert_compute) * ms, other * ms);
        }
    }
    if (opt.scripts_dir.empty()) {
        rep.chart_note = "no scripts directory (give --scripts DIR holding plot_protocol_*.gp)";
    } else {
        std::string vars = strf("datafile='%s/samples.tsv'; outfile='%s/throughput.png'; titles='%s'",
                                opt.out_dir.c_str(), opt.out_dir.c_str(), titles.c_str());
        std::string e1 = plot(opt.scripts_dir, "plot_protocol_throughput.gp", vars, opt.out_dir);
        if (e1.empty()) rep.charts.push_back(opt.out_dir + "/throughput.png");
        vars = strf("datafile='%s/split.tsv'; outfile='%s/time_split.png'; split_known=%d", opt.out_dir.c_str(),
                    opt.out_dir.c_str(), split_known ? 1 : 0);
        std::string e2 = plot(opt.scripts_dir, "plot_protocol_split.gp", vars, opt.out_dir);
        if (e2.empty()) rep.charts.push_back(opt.out_dir + "/time_split.png");
        rep.chart_note = e1.empty() ? e2 : e1;
    }

    // The Markdown report.
    Json machine = machine_info(opt.model);
    std::string md = "# moestream bench protocol\n\n";
    md += strf("- model: `%s` (%s)\n", opt.model.c_str(), size_label(model_size).c_str());
    md += strf("- machine: %s, %lld logical cores, %s RAM, %s\n", machine.at("cpu").at("model").as_string().c_str(),
               (long long)machine.at("cpu").at("logical_cores").as_int(),
               size_label(uint64_t(machine.at("memory").at("total_bytes").as_int())).c_str(),
               machine.contains("kernel") ? machine.at("kernel").as_string().c_str() : "?");
    md += strf("- device: %s; samples every %.1f s from /proc/diskstats (reads only), /proc/stat, /proc/PID/status\n",
               device.empty() ? "none (model not on a block device: no MB/s or IOPS)" : device.c_str(), opt.interval_s);
    std::string seeds;
    for (const ProtocolCase& c : opt.cases)
        seeds += (seeds.empty() ? "" : ",") + std::to_string(c.seed >= 0 ? uint64_t(c.seed) : opt.seed);
    md += strf("- protocol: %s%zu cases, each a fresh `moestream run` process; seeds %s; %d generated tokens%s\n",
               opt.warmup ? "one discarded warm-up, then " : "", opt.cases.size(), seeds.c_str(),
               opt.n_gen, caps.ignore_eos ? " (--ignore-eos)" : " (may stop earlier at an end token: this run has no --ignore-eos)");
    if (opt.limit_mem) md += strf("- memory cgroup per case: %s\n", size_label(opt.limit_mem).c_str());
    md += "- run flags: `" + shell_join(run_args) + "`" + (ctx ? " (-c sized to the longest prompt + generation)" : "") + "\n";

    Table phases;
    phases.left_columns = 2;
    phases.header = {"phase", "start", "duration s", "prompt tok", "generated", "prefill tok/s", "decode tok/s", "status"};
    for (const ProtocolCaseResult& c : rep.cases)
        phases.add({c.name + (c.name == "warmup" ? " (discarded)" : ""), c.started, strf("%.1f", c.wall_s),
                    c.ok ? std::to_string(c.run.prefill_tokens) : "-", c.ok ? std::to_string(c.run.decode_tokens) : "-",
                    c.ok ? strf("%.2f", c.run.prefill_seconds > 0 ? c.run.prefill_tokens / c.run.prefill_seconds : 0) : "-",
                    c.ok ? strf("%.2f", c.run.decode_seconds > 0 ? c.run.decode_tokens / c.run.decode_seconds : 0) : "-",
                    c.ok ? "ok" : "failed"});
    md += "\n## Phases\n\n" + phases.markdown();

    Table dev;
    dev.header = {"case", "samples", "avg MB/s", "min MB/s", "max MB/s", "avg IOPS", "avg CPU idle %", "peak RSS",
                  "swap delta", "device read", "read / model size", "run's own reads"};
    auto dev_row = [&](const std::string& name, const ProtocolCaseResult& c) {
        dev.add({name, std::to_string(c.samples.size()), mb_cell(c.avg_mb_s), mb_cell(c.min_mb_s), mb_cell(c.max_mb_s),
                 std::isnan(c.avg_iops) ? "-" : strf("%.0f", c.avg_iops),
                 std::isnan(c.avg_idle) ? "-" : strf("%.1f", c.avg_idle * 100),
                 c.peak_rss_bytes ? size_label(c.peak_rss_bytes) : "-",
                 strf("%+lld B (%llu in, %llu out pages)", (long long)c.swap_used_delta,
                      (unsigned long long)c.swap_in_pages, (unsigned long long)c.swap_out_pages),
                 device.empty() ? "-" : size_label(c.device_read_bytes),
                 device.empty() ? "-" : strf("%.2fx", double(c.device_read_bytes) / double(model_size)),
                 c.process_read_bytes ? size_label(c.process_read_bytes) : "-"});
    };
    for (const ProtocolCaseResult& c : rep.cases) dev_row(c.name, c);
    if (!rep.baseline.empty()) {
        ProtocolCaseResult b;
        b.samples = rep.baseline;
        summarize_samples(&b);
        dev.add({"idle baseline", std::to_string(b.samples.size()), mb_cell(b.avg_mb_s), mb_cell(b.min_mb_s),
                 mb_cell(b.max_mb_s), std::isnan(b.avg_iops) ? "-" : strf("%.0f", b.avg_iops),
                 strf("%.1f", b.avg_idle * 100), "-", "-", "-", "-", "-"});
    }
    md += "\n## Device, CPU and memory (one sample per interval)\n\n" + dev.markdown();
    md += "\nMB/s, IOPS and device read count every process using the device (as iostat does); \"run's own reads\" "
          "is the run's share from /proc/PID/io (its last sample).\n";

    Table store;
    store.header = {"case", "hit rate %", "MB read / token", "I/O wait s", "read amplification"};
    for (const ProtocolCaseResult* c : measured)
        store.add({c->name, c->ok && !std::isnan(c->run.hit_rate) ? strf("%.1f", c->run.hit_rate * 100) : "-",
                   c->ok ? mb_cell(c->run.mb_read_per_token) : "-", c->ok ? mb_cell(c->run.phases.io_wait) : "-",
                   c->ok && !std::isnan(c->run.read_amplification) ? strf("%.3f", c->run.read_amplification) : "-"});
    md += "\n## Streaming store (from each run's report)\n\n" + store.markdown();

    Table split;
    split.header = {"case", "attention", "routing", "I/O wait", "expert compute", "other", "total ms/token"};
    for (const ProtocolCaseResult* c : measured) {
        if (!c->ok) continue;
        int64_t toks = c->run.prefill_tokens + c->run.decode_tokens;
        const PhaseTimes& p = c->run.phases;
        double total = c->run.prefill_seconds + c->run.decode_seconds;
        split.add({c->name, ms_per_token(p.attention, toks), ms_per_token(p.routing, toks),
                   ms_per_token(p.io_wait, toks),
                   ms_per_token(p.expert_compute, toks), ms_per_token(p.other, toks), ms_per_token(total, toks)});
    }
    md += "\n## Time per processed token (prompt + generated), ms\n\n" + split.markdown();
    if (!split_known)
        md += "\nThis build's run report has no `time_split`: only the store's I/O wait is known; the chart shows "
              "the rest of the forward time as one compute share.\n";
    md += "\n## Charts\n\n";
    for (const std::string& c : rep.charts) md += "![" + fs::path(c).stem().string() + "](" + fs::path(c).filename().string() + ")\n";
    if (!rep.chart_note.empty()) md += "\nCharts: " + rep.chart_note + "\n";
    for (const ProtocolCaseResult& c : rep.cases)
        if (!c.error.empty()) md += "\n**" + c.name + " failed:** " + c.error + "\n";
    rep.markdown = md;

    Json j = Json::object();
    j["command"] = "bench protocol";
    j["schema_version"] = 1;
    j["machine"] = machine;
    j["build"] = build_info();
    Json s = Json::object();
    s["model"] = opt.model;
    s["model_bytes"] = model_size;
    s["n_gen"] = opt.n_gen;
    s["seed"] = opt.seed;
    s["interval_s"] = opt.interval_s;
    s["baseline_s"] = opt.baseline_s;
    s["warmup"] = opt.warmup;
    s["drop_caches"] = opt.drop_caches;
    s["limit_mem_bytes"] = opt.limit_mem;
    Json ra = Json::array();
    for (const std::string& a : run_args) ra.push_back(a);
    s["run_args"] = ra;
    s["device"] = device.empty() ? Json(nullptr) : Json(device);
    j["settings"] = s;
    Json base = Json::array();
    for (const ProtocolSample& x : rep.baseline) base.push_back(sample_json(x));
    j["baseline"] = base;
    Json cases = Json::array();
    for (const ProtocolCaseResult& c : rep.cases) {
        Json o = Json::object();
        o["name"] = c.name;
        o["prompt_file"] = c.prompt_file;
        o["started"] = c.started;
        o["wall_s"] = c.wall_s;
        o["ok"] = c.ok;
        o["error"] = c.error.empty() ? Json(nullptr) : Json(c.error);
        o["prefill_tokens"] = c.run.prefill_tokens;
        o["prefill_seconds"] = c.run.prefill_seconds;
        o["decode_tokens"] = c.run.decode_tokens;
        o["decode_seconds"] = c.run.decode_seconds;
        o["prefill_tps"] = c.run.prefill_seconds > 0 ? c.run.prefill_tokens / c.run.prefill_seconds : 0.0;
        o["decode_tps"] = c.run.decode_seconds > 0 ? c.run.decode_tokens / c.run.decode_seconds : 0.0;
        o["avg_mb_per_s"] = nan_null(c.avg_mb_s);
        o["min_mb_per_s"] = nan_null(c.min_mb_s);
        o["max_mb_per_s"] = nan_null(c.max_mb_s);
        o["avg_iops"] = nan_null(c.avg_iops);
        o["avg_cpu_idle"] = nan_null(c.avg_idle);
        o["peak_rss_bytes"] = c.peak_rss_bytes;
        o["swap_used_delta_bytes"] = c.swap_used_delta;
        o["swap_in_pages"] = c.swap_in_pages;
        o["swap_out_pages"] = c.swap_out_pages;
        o["device_read_bytes"] = device.empty() ? Json(nullptr) : Json(c.device_read_bytes);
        o["process_read_bytes"] = c.process_read_bytes;
        o["read_over_model_size"] = device.empty() ? Json(nullptr) : Json(double(c.device_read_bytes) / double(model_size));
        o["hit_rate"] = nan_null(c.run.hit_rate);
        o["mb_read_per_token"] = nan_null(c.run.mb_read_per_token);
        o["read_amplification"] = nan_null(c.run.read_amplification);
        Json ts = Json::object();
        ts["attention"] = nan_null(c.run.phases.attention);
        ts["routing"] = nan_null(c.run.phases.routing);
        ts["io_wait"] = nan_null(c.run.phases.io_wait);
        ts["expert_compute"] = nan_null(c.run.phases.expert_compute);
        ts["other"] = nan_null(c.run.phases.other);
        o["time_split_s"] = ts;
        Json sm = Json::array();
        for (const ProtocolSample& x : c.samples) sm.push_back(sample_json(x));
        o["samples"] = sm;
        cases.push_back(o);
    }
    j["cases"] = cases;
    Json ch = Json::array();
    for (const std::string& c : rep.charts) ch.push_back(c);
    j["charts"] = ch;
    rep.json = j;
    return rep;
}

}  // namespace ms
