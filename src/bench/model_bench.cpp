#include "bench/model_bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>

#include "bench/cgroup.h"
#include "bench/child.h"
#include "bench/run_figures.h"
#include "bench/table.h"
#include "gguf/gguf.h"
#include "store/budget.h"
#include "telemetry/build_info.h"
#include "telemetry/system.h"

namespace ms {

namespace fs = std::filesystem;

namespace {

struct ModelInfo {
    std::string path, type;
    uint64_t size = 0, n_params = 0;
};

// llama.cpp's names for general.file_type (the common ones).
const char* file_type_name(int64_t t) {
    switch (t) {
        case 0: return "all F32";
        case 1: return "F16";
        case 2: return "Q4_0";
        case 3: return "Q4_1";
        case 7: return "Q8_0";
        case 8: return "Q5_0";
        case 9: return "Q5_1";
        case 10: return "Q2_K - Medium";
        case 12: return "Q3_K - Medium";
        case 14: return "Q4_K - Small";
        case 15: return "Q4_K - Medium";
        case 16: return "Q5_K - Small";
        case 17: return "Q5_K - Medium";
        case 18: return "Q6_K";
        case 30: return "IQ4_XS";
        case 32: return "BF16";
        case 38: return "MXFP4 MoE";
        default: return nullptr;
    }
}

ModelInfo model_info(const std::string& path) {
    GgufFile f = GgufFile::open(path);
    ModelInfo m;
    m.path = path;
    m.size = f.total_bytes();
    for (const GgufTensor& t : f.tensors()) m.n_params += uint64_t(t.n_elements());
    std::string arch = f.get_string("general.architecture", "?");
    std::string label = f.get_string("general.size_label");
    const char* ft = file_type_name(f.get_int("general.file_type", -1));
    m.type = arch + (label.empty() ? "" : " " + label) + (ft ? std::string(" ") + ft : "");
    return m;
}


// "--io-depth" -> "io_depth": the record key of a swept flag.
std::string flag_key(const std::string& flag) {
    std::string k = flag.substr(flag.find_first_not_of('-'));
    for (char& c : k)
        if (c == '-') c = '_';
    if (k == "t") return "n_threads";
    if (k == "b") return "n_batch";
    if (k == "ub") return "n_ubatch";
    return k;
}

std::string num_cell(const Json& r, const char* key, const char* fmt, double scale = 1) {
    const Json* v = r.find(key);
    if (!v || !v->is_number()) return "-";
    return strf(fmt, v->as_number() * scale);
}

struct Case {
    const ModelInfo* model;
    uint64_t limit = 0;
    std::vector<std::pair<std::string, std::string>> flags;  // swept flag values of this case
    ModelTest test;
};

}  // namespace

std::string ModelTest::name() const {
    const std::string depth = n_depth > 0 ? " @ d" + std::to_string(n_depth) : "";
    if (n_gen == 0) return "pp" + std::to_string(n_prompt) + depth;
    if (n_prompt == 0) return "tg" + std::to_string(n_gen) + depth;
    return "pp" + std::to_string(n_prompt) + "+tg" + std::to_string(n_gen) + depth;
}

void mean_stddev(const std::vector<double>& v, double* mean, double* stddev) {
    double s = 0;
    for (double x : v) s += x;
    *mean = v.empty() ? 0 : s / double(v.size());
    double q = 0;
    for (double x : v) q += (x - *mean) * (x - *mean);
    *stddev = v.size() > 1 ? std::sqrt(q / double(v.size() - 1)) : 0;
}

bool drop_file_cache(const std::string& path) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    fdatasync(fd);  // dirty pages cannot be dropped
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return true;
}

std::vector<MdColumn> model_md_columns(const ModelBenchOptions& opt) {
    std::vector<MdColumn> c;
    c.push_back({"model", [](const Json& r) { return r.at("model_type").as_string(); }, true});
    c.push_back({"size", [](const Json& r) { return size_label(uint64_t(r.at("model_size").as_int())); }});
    c.push_back({"params", [](const Json& r) { return strf("%.2f B", double(r.at("model_n_params").as_int()) / 1e9); }});
    c.push_back({"backend", [](const Json& r) { return r.at("backends").as_string(); }});
    c.push_back({"threads", [](const Json& r) {
                     const Json& t = r.at("n_threads");
                     return t.is_number() ? std::to_string(t.as_int()) : std::string("-");
                 }});
    for (const ModelSweep& s : opt.sweeps) {
        std::string key = flag_key(s.flag);
        if (key == "n_threads") continue;
        c.push_back({key, [key](const Json& r) {
                         const Json* v = r.find(key);
                         return v && v->is_string() ? v->as_string() : v ? v->dump() : std::string("-");
                     }});
    }
    bool limited = false;
    for (uint64_t l : opt.limit_mem) limited = limited || l > 0;
    if (limited)
        c.push_back({"limit_mem", [](const Json& r) {
                         const Json& v = r.at("limit_mem_bytes");
                         return v.is_number() && v.as_int() > 0 ? size_label(uint64_t(v.as_int())) : std::string("-");
                     }});
    c.push_back({"test", [](const Json& r) { return r.at("test").as_string(); }});
    c.push_back({"t/s", [](const Json& r) {
                     if (r.at("error").is_string()) return std::string("failed");
                     const Json* sk = r.find("skipped");
                     if (sk && sk->is_string()) return std::string("skipped");
                     return strf("%.2f ± %.2f", r.at("avg_ts").as_number(), r.at("stddev_ts").as_number());
                 }});
    c.push_back({"hit %", [](const Json& r) { return num_cell(r, "hit_rate", "%.1f", 100); }});
    c.push_back({"MB/tok", [](const Json& r) { return num_cell(r, "mb_read_per_token", "%.1f"); }});
    c.push_back({"stall ms/tok", [](const Json& r) { return num_cell(r, "io_stall_ms_per_token", "%.2f"); }});
    c.push_back({"read amp", [](const Json& r) { return num_cell(r, "read_amplification", "%.3f"); }});
    // The GPU's own tier: the store's columns above count the RAM tier's
    // uses, which a run whose routing stays on the device does not make.
    bool gpu = false;
    for (const ModelSweep& s : opt.sweeps) {
        const bool gpu_flag = s.flag == "--gpu" || s.flag == "--gpu-mem" || s.flag == "--gpu-ram-tier" ||
                              s.flag == "--gpu-host-share";
        for (const std::string& v : s.values) gpu = gpu || (gpu_flag && v != "off");
    }
    if (gpu) {
        c.push_back({"VRAM hit %", [](const Json& r) { return num_cell(r, "vram_hit_rate", "%.1f", 100); }});
        c.push_back({"PCIe MB/tok", [](const Json& r) { return num_cell(r, "pcie_mb_per_token", "%.1f"); }});
        // --gpu-ram-tier cpu: the experts' weights the host's cores read.
        c.push_back({"host MB/tok", [](const Json& r) { return num_cell(r, "host_mb_per_token", "%.1f"); }});
        // With VRAM short: the copies alone at the link's rate over the
        // test's time (1.0: the run was as fast as its copies allow).
        c.push_back({"copy bound", [](const Json& r) { return num_cell(r, "copy_bound_fraction", "%.2f"); }});
    }
    c.push_back({"peak RSS", [](const Json& r) {
                     const Json& v = r.at("peak_rss_bytes");
                     return v.is_number() ? size_label(uint64_t(v.as_int())) : std::string("-");
                 }});
    if (limited) {
        c.push_back({"cgroup peak", [](const Json& r) {
                         const Json& v = r.at("cgroup_peak_bytes");
                         return v.is_number() ? size_label(uint64_t(v.as_int())) : std::string("-");
                     }});
        c.push_back({"page cache", [](const Json& r) {
                         const Json& v = r.at("cgroup_file_bytes");
                         return v.is_number() ? size_label(uint64_t(v.as_int())) : std::string("-");
                     }});
    }
    c.push_back({"model cached", [](const Json& r) { return size_label(uint64_t(r.at("model_cached_bytes").as_int())); }});
    return c;
}

ModelBenchReport run_model_bench(const ModelBenchOptions& opt) {
    if (opt.models.empty()) throw std::runtime_error("bench model: no model (-m)");
    if (opt.tests.empty()) throw std::runtime_error("bench model: no test (-p, -n and -pg are all 0)");
    if (opt.repetitions < 1) throw std::runtime_error("bench model: -r must be at least 1");
    if (access(opt.binary.c_str(), X_OK) != 0) throw std::runtime_error(opt.binary + ": not an executable");

    std::vector<ModelInfo> models;
    for (const std::string& m : opt.models) models.push_back(model_info(m));

    // The cases: models x limits x every combination of swept values x tests.
    std::vector<Case> cases;
    std::vector<std::vector<std::pair<std::string, std::string>>> combos = {{}};
    for (const ModelSweep& s : opt.sweeps) {
        std::vector<std::vector<std::pair<std::string, std::string>>> next;
        for (const auto& c : combos)
            for (const std::string& v : s.values) {
                auto x = c;
                x.push_back({s.flag, v});
                next.push_back(x);
            }
        combos = next;
    }
    for (const ModelInfo& m : models)
        for (uint64_t limit : opt.limit_mem)
            for (const auto& combo : combos)
                for (const ModelTest& t : opt.tests) cases.push_back({&m, limit, combo, t});

    std::string work = opt.work_dir;
    bool made_work = false;
    if (work.empty()) {
        char tmpl[] = "/tmp/moestream-bench-model-XXXXXX";
        if (!mkdtemp(tmpl)) throw std::runtime_error("bench model: cannot make a temporary directory");
        work = tmpl;
        made_work = true;
    } else {
        fs::create_directories(work);
    }

    std::string cpu = cpu_model_name();
    const RunCaps caps = probe_run_caps(opt.binary, work);
    // Without --random-prompt, prompts are word texts cut to n tokens by the
    // model's tokenizer: one file per (model, length).
    std::map<std::pair<std::string, int>, std::string> prompt_files;
    auto prompt_file_for = [&](const std::string& model, int n) {
        auto key = std::make_pair(model, n);
        auto it = prompt_files.find(key);
        if (it != prompt_files.end()) return it->second;
        std::string path = strf("%s/prompt%zu_%d.txt", work.c_str(), prompt_files.size(), n);
        write_token_prompt(opt.binary, model, std::max(n, 1), path);
        return prompt_files[key] = path;
    };
    ModelBenchReport rep;
    const uint64_t runs_per_case = uint64_t(opt.repetitions + (opt.warmup ? 1 : 0));
    const uint64_t total = cases.size() * runs_per_case;
    uint64_t done = 0;
    for (size_t ci = 0; ci < cases.size(); ++ci) {
        const Case& c = cases[ci];
        std::unique_ptr<MemoryCgroup> cg;
        if (c.limit > 0)
            cg = std::make_unique<MemoryCgroup>(strf("moestream-bench-%d-%zu", int(getpid()), ci), c.limit);

        Json r = Json::object();
        r["build_commit"] = "unknown";
        r["build_number"] = 0;
        r["cpu_info"] = cpu;
        r["gpu_info"] = "";
        r["backends"] = "CPU";
        r["model_filename"] = c.model->path;
        r["model_type"] = c.model->type;
        r["model_size"] = c.model->size;
        r["model_n_params"] = c.model->n_params;
        r["n_batch"] = 512;
        r["n_ubatch"] = 512;
        r["n_threads"] = nullptr;
        r["type_k"] = "f16";
        r["type_v"] = "f16";
        r["n_gpu_layers"] = 0;
        r["use_mmap"] = false;
        std::vector<std::string> extra;
        for (const auto& [flag, value] : c.flags) {
            extra.push_back(flag);
            if (!value.empty()) extra.push_back(value);  // a switch such as --ignore-eos takes none
            std::string key = flag_key(flag);
            if (key == "n_threads" || key == "n_batch" || key == "n_ubatch") {
                r[key] = atoi(value.c_str());
                if (key == "n_batch") r["n_ubatch"] = std::min<int64_t>(atoi(value.c_str()), r["n_ubatch"].as_int());
            } else if (key == "kv_type") {
                r["type_k"] = value;
                r["type_v"] = value;
            } else {
                r[key] = value;
            }
        }
        // A depth needs a context that holds it (run's -c is 4096 unless set).
        const bool has_ctx = std::any_of(c.flags.begin(), c.flags.end(), [](const auto& f) { return f.first == "-c"; });
        if (c.test.n_depth > 0 && !has_ctx)
            extra.insert(extra.end(), {"-c", std::to_string(c.test.n_depth + c.test.n_prompt + c.test.n_gen + 1)});
        r["n_prompt"] = c.test.n_prompt;
        r["n_gen"] = c.test.n_gen;
        r["n_depth"] = c.test.n_depth;
        r["test"] = c.test.name();
        r["test_time"] = time_now("%Y-%m-%dT%H:%M:%SZ", true);

        std::vector<double> ns, ts, hit, mbt, stall, amp, vram_hit, pcie, host_mb, copy_bound;
        int64_t prompt_run = 0, gen_run = 0;
        uint64_t peak_rss = 0, dev_bytes = 0;
        bool has_dev = false;
        std::string error, skipped;
        for (int rep_i = opt.warmup ? -1 : 0; rep_i < opt.repetitions && error.empty() && skipped.empty(); ++rep_i) {
            bool warm = rep_i < 0;
            if (opt.progress)
                opt.progress(strf("%s %s%s", c.test.name().c_str(), warm ? "warm-up" : "run ", warm ? "" : std::to_string(rep_i + 1).c_str()),
                             done, total);
            if (opt.drop_caches) {
                drop_file_cache(c.model->path);
                drop_file_cache(c.model->path + ".experts");
            }
            RunRequest q;
            q.binary = opt.binary;
            q.model = c.model->path;
            // llama-bench warms a generation test up with one token.
            // The depth is prompt tokens before the test's own (a warm-up
            // skips it: it only loads the model).
            q.n_prompt = c.test.n_prompt + (warm ? 0 : c.test.n_depth);
            q.n_gen = warm && c.test.n_gen > 0 && c.test.n_prompt == 0 ? 1 : c.test.n_gen;
            q.seed = opt.seed + uint64_t(std::max(rep_i, 0));
            q.report = strf("%s/case%zu_rep%d.json", work.c_str(), ci, rep_i);
            q.extra = extra;
            q.caps = caps;
            if (!caps.random_prompt) {
                try {
                    q.prompt_file = prompt_file_for(c.model->path, c.test.n_prompt);
                } catch (const std::exception& e) {
                    error = e.what();
                    break;
                }
            }
            ChildOptions co;
            co.argv = run_argv(q);
            co.stdout_path = strf("%s/case%zu_rep%d.out", work.c_str(), ci, rep_i);
            co.stderr_path = strf("%s/case%zu_rep%d.err", work.c_str(), ci, rep_i);
            co.cgroup = cg.get();
            co.timeout_s = opt.timeout_s;
            ChildResult cr = run_child(co);
            ++done;
            if (cr.exit_code == kExitBudget && cr.signal == 0 && !cr.timed_out) {
                // A budget of the sweep too small for this model (--mem,
                // --gpu-mem): a case that cannot run, not a failure.
                skipped = strf("%s: %s skipped: %s", c.model->path.c_str(), c.test.name().c_str(),
                               tail_lines(co.stderr_path, 1).c_str());
                break;
            }
            if (!cr.ok()) {
                error = strf("%s: %s failed (%s): %s", c.model->path.c_str(), c.test.name().c_str(),
                             cr.describe().c_str(), tail_lines(co.stderr_path, 3).c_str());
                break;
            }
            if (warm) continue;
            RunFigures f;
            try {
                const Json rj = Json::parse_file(q.report);
                f = read_run_figures(rj, q.report);
                // llama-bench's names for a run on the GPU (run --gpu).
                const Json* b = rj.find("backend");
                if (b && b->as_string().rfind("GPU: ", 0) == 0) {
                    r["backends"] = "CUDA";
                    r["gpu_info"] = b->as_string().substr(5);
                }
                // The pass size the run took (its -ub, or the backend's default).
                const Json* settings = rj.find("settings");
                const Json* ub = settings ? settings->find("ubatch") : nullptr;
                if (ub && ub->is_number()) r["n_ubatch"] = ub->as_int();
            } catch (const std::exception& e) {
                error = e.what();
                break;
            }
            // llama-bench's timing: prompt tests time the prompt, generation
            // tests the generated tokens, combined tests both.
            double secs = (c.test.n_prompt > 0 ? f.prefill_seconds : 0) + (c.test.n_gen > 0 ? f.decode_seconds : 0);
            int64_t toks = (c.test.n_prompt > 0 ? f.prefill_tokens : 0) + (c.test.n_gen > 0 ? f.decode_tokens : 0);
            prompt_run = f.prefill_tokens;
            gen_run = f.decode_tokens;
            ns.push_back(secs * 1e9);
            ts.push_back(secs > 0 ? double(toks) / secs : 0);
            if (!std::isnan(f.hit_rate)) hit.push_back(f.hit_rate);
            // The store counts MB per generated token; a prompt-only run has none.
            if (!std::isnan(f.mb_read_per_token) && f.decode_tokens > 0) mbt.push_back(f.mb_read_per_token);
            if (!std::isnan(f.phases.io_wait) && toks > 0) stall.push_back(f.phases.io_wait * 1e3 / double(toks));
            if (!std::isnan(f.read_amplification)) amp.push_back(f.read_amplification);
            // The VRAM tier of the timed part: a prompt test's prefill, a
            // generation test's decode, where the report splits them.
            const VramFigures& phase = c.test.n_gen == 0 ? f.vram_prefill : c.test.n_prompt == 0 ? f.vram_decode : f.vram;
            const VramFigures& vf = std::isnan(phase.hit_rate) ? f.vram : phase;
            if (!std::isnan(vf.hit_rate)) vram_hit.push_back(vf.hit_rate);
            if (!std::isnan(vf.pcie_mb_per_token)) pcie.push_back(vf.pcie_mb_per_token);
            if (!std::isnan(vf.host_mb_per_token)) host_mb.push_back(vf.host_mb_per_token);
            if (!std::isnan(vf.copy_bound_fraction)) copy_bound.push_back(vf.copy_bound_fraction);
            peak_rss = std::max(peak_rss, f.peak_rss_bytes);
            dev_bytes += f.device_read_bytes;
            has_dev = has_dev || f.has_device;
            if (f.threads > 0 && r.at("n_threads").is_null()) r["n_threads"] = f.threads;
        }
        double m, sd;
        mean_stddev(ns, &m, &sd);
        r["avg_ns"] = uint64_t(m);
        r["stddev_ns"] = uint64_t(sd);
        mean_stddev(ts, &m, &sd);
        r["avg_ts"] = m;
        r["stddev_ts"] = sd;
        Json sns = Json::array(), sts = Json::array();
        for (double x : ns) sns.push_back(uint64_t(x));
        for (double x : ts) sts.push_back(x);
        r["samples_ns"] = sns;
        r["samples_ts"] = sts;
        auto avg_or_null = [](const std::vector<double>& v) {
            double a, s;
            mean_stddev(v, &a, &s);
            return v.empty() ? Json(nullptr) : Json(a);
        };
        // What the runs really did: the prompt can differ from n_prompt when
        // `run` lacks --random-prompt, generation can stop early at an end
        // token when it lacks --ignore-eos. t/s counts these.
        r["prompt_tokens_run"] = prompt_run;
        r["gen_tokens_run"] = gen_run;
        r["limit_mem_bytes"] = c.limit;
        r["cgroup_version"] = cg ? Json(cg->version()) : Json(nullptr);
        r["hit_rate"] = avg_or_null(hit);
        r["mb_read_per_token"] = avg_or_null(mbt);
        r["io_stall_ms_per_token"] = avg_or_null(stall);
        r["read_amplification"] = avg_or_null(amp);
        r["vram_hit_rate"] = avg_or_null(vram_hit);
        r["pcie_mb_per_token"] = avg_or_null(pcie);
        r["host_mb_per_token"] = avg_or_null(host_mb);
        r["copy_bound_fraction"] = avg_or_null(copy_bound);
        r["peak_rss_bytes"] = peak_rss ? Json(peak_rss) : Json(nullptr);
        r["device_read_bytes"] = has_dev ? Json(dev_bytes) : Json(nullptr);
        r["cgroup_peak_bytes"] = cg ? Json(cg->peak_bytes()) : Json(nullptr);
        r["cgroup_file_bytes"] = cg ? Json(cg->file_bytes()) : Json(nullptr);
        // Checked independently of the cgroup's accounting: how much of the
        // model file the page cache holds after the case.
        r["model_cached_bytes"] = page_cache_bytes(c.model->path);
        r["error"] = error.empty() ? Json(nullptr) : Json(error);
        r["skipped"] = skipped.empty() ? Json(nullptr) : Json(skipped);
        if (!error.empty()) rep.errors.push_back(error);
        if (!skipped.empty()) rep.skipped.push_back(skipped);
        if (!error.empty() || !skipped.empty()) done = (ci + 1) * runs_per_case;
        rep.records.push_back(r);
    }
    if (opt.progress) opt.progress("done", total, total);
    if (made_work && !opt.keep_reports) fs::remove_all(work);

    Json j = Json::object();
    j["command"] = "bench model";
    j["schema_version"] = 1;
    j["machine"] = machine_info(opt.models[0]);
    j["build"] = build_info();
    Json s = Json::object();
    s["binary"] = opt.binary;
    Json ms_ = Json::array(), tests = Json::array(), sweeps = Json::object(), limits = Json::array();
    for (const std::string& m : opt.models) ms_.push_back(m);
    for (const ModelTest& t : opt.tests) tests.push_back(t.name());
    for (const ModelSweep& sw : opt.sweeps) {
        Json v = Json::array();
        for (const std::string& x : sw.values) v.push_back(x);
        sweeps[sw.flag] = v;
    }
    for (uint64_t l : opt.limit_mem) limits.push_back(l);
    s["models"] = ms_;
    s["tests"] = tests;
    s["sweeps"] = sweeps;
    s["limit_mem_bytes"] = limits;
    s["repetitions"] = opt.repetitions;
    s["warmup"] = opt.warmup;
    s["drop_caches"] = opt.drop_caches;
    s["seed"] = opt.seed;
    s["run_has_random_prompt"] = caps.random_prompt;
    s["run_has_ignore_eos"] = caps.ignore_eos;
    s["reports_dir"] = opt.keep_reports ? Json(work) : Json(nullptr);
    j["settings"] = s;
    j["records"] = Json(Json::Array(rep.records));
    rep.json = j;
    return rep;
}

}  // namespace ms
