// moestream bench {ssd,cache,gemm,model,protocol,routing}: flags and terminal output
// for the measurement toolkit; the measuring itself lives in src/bench/.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_file.h"
#include "bench/cache.h"
#include "bench/gemm.h"
#include "bench/model_bench.h"
#include "bench/model_experts.h"
#include "bench/protocol.h"
#include "bench/routing.h"
#include "bench/ssd.h"
#include "bench/table.h"
#include "cli/args.h"
#include "cli/bench_args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/session_flags.h"
#include "gpu/gpu.h"
#include "json/json.h"
#include "telemetry/build_info.h"
#include "telemetry/routing_trace.h"
#include "telemetry/system.h"

namespace ms {

namespace {

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i <= s.size()) {
        size_t comma = s.find(',', i);
        if (comma == std::string::npos) comma = s.size();
        out.push_back(s.substr(i, comma - i));
        i = comma + 1;
    }
    return out;
}

}  // namespace

// "1,2,4" -> {1, 2, 4}; every item an integer in [min, 2^20].
std::vector<int> parse_int_list(const std::string& flag, const std::string& s, long min) {
    std::vector<int> out;
    for (const std::string& item : split_list(s)) {
        char* end = nullptr;
        long v = strtol(item.c_str(), &end, 10);
        if (item.empty() || *end || v < min || v > (1 << 20))
            throw std::runtime_error(flag + ": expected a comma list of integers >= " + std::to_string(min) +
                                     ", got '" + s + "'");
        out.push_back(int(v));
    }
    return out;
}

void write_json(const std::string& path, const Json& j) {
    std::ofstream f(path);
    if (!f) throw std::runtime_error(path + ": cannot write");
    f << j.dump(2) << "\n";
    if (!f) throw std::runtime_error(path + ": write failed");
    fprintf(stderr, "wrote %s\n", path.c_str());
}

namespace {

// A progress bar over a count of steps whose label names the current one.
struct StepProgress {
    std::unique_ptr<ProgressBar> bar;
    std::string name;
    explicit StepProgress(std::string n) : name(std::move(n)) {}
    void operator()(const std::string& label, uint64_t done, uint64_t total) {
        if (!bar) bar = std::make_unique<ProgressBar>(name, total, false);
        if (done >= total) {
            bar->finish();
            return;
        }
        (void)label;
        bar->update(done);
    }
};

const char* kBenchUsage =
    "usage: moestream bench <ssd|cache|gemm|gpu|model|protocol|routing|serve> [options]   (moestream bench <name> --help)\n\n"
    "  ssd       uncached drive study: read patterns of expert streaming, threads and io_uring depths,\n"
    "            every byte verified through /proc/diskstats\n"
    "  cache     warm page-cache pread study: threads x split fan-out over experts\n"
    "  gemm      compute ceiling of our kernels, and a sustained run for thermal sag\n"
    "  model     llama-bench compatible prompt/generation benchmark of `moestream run`\n"
    "  protocol  community benchmark protocol: warm-up, short/medium/long cases, device autopsy\n"
    "  gpu       the CUDA device's bounds: memory and host-device copy rates, matvec kernel rates\n"
    "  routing   a model's routing on a text (spread, popularity, reuse) and the hit rate a cache of each\n"
    "            size would reach under LRU, LFU and Belady's optimum\n"
    "  serve     N concurrent streams through serve's engine: tok/s, time to first token, expert bytes per\n"
    "            generated token, hit rate and peak RSS against N\n";

int bench_ssd(int argc, char** argv) {
    SsdOptions o;
    std::string file, model, threads = "1,2,4,8", depths = "1,2,4,8,16,32,64",
                         patterns = "sequential,gguf_expert,packed_expert,strided,rows,cached", json;
    uint64_t size = 0, slice = 0, part = 512 << 10, control = o.control_bytes;
    int parts = 3, layer = 0, stride = o.stride;
    int64_t seed = 1;
    double seconds = o.seconds;
    bool quick = false, remove = false;
    Args a("moestream bench ssd [options]",
           "Measures what the drive delivers for the read patterns of expert streaming, uncached: every test "
           "reads its own never-read slice of a file of unique incompressible 4 KiB blocks with O_DIRECT, and "
           "the device's /proc/diskstats counters confirm the bytes came from the device (the physical share, "
           "which must be >= 99%). Patterns: sequential 4 MiB; GGUF experts (one read per gate/up/down part, "
           "random order); packed experts (one contiguous read, random order); prefill strided ascending; random "
           "4 KiB rows (embedding lookups); and a RAM-cached control through the page cache. Each runs with 1..N "
           "threads of blocking pread and at io_uring queue depths. The file is kept and reused by later runs, "
           "which continue where the previous one stopped reading.");
    a.option("--file", &file, "PATH",
             "bench data file (created if missing; default moestream-bench.dat in the model's directory with -m, "
             "else in the current directory)");
    a.size_option("--size", &size, "SIZE",
                  "size of a new bench file (default: 16 GiB or a quarter of the free space, whichever is less); "
                  "an existing file of another size is recreated");
    a.size_option("--slice", &slice, "SIZE", "bytes each test may read (default: the unread part of the file "
                                              "shared among the tests, at most 1 GiB each)");
    a.option("--seconds", &seconds, "S", "time limit of one test");
    a.option("-t,--threads", &threads, "LIST", "pread thread counts");
    a.option("--depths", &depths, "LIST", "io_uring queue depths (one submitting thread)");
    a.option("--patterns", &patterns, "LIST",
             "which patterns: sequential,gguf_expert,packed_expert,strided,rows,cached");
    a.option("-m,--model", &model, "MODEL.gguf", "use this model's real expert part sizes (gate, up, down)");
    a.option("--layer", &layer, "N", "with -m: which MoE layer's sizes (index among MoE layers)");
    a.size_option("--part-size", &part, "SIZE", "without -m: bytes of one expert part");
    a.option("--parts", &parts, "N", "without -m: parts per expert (GGUF gate, up, down = 3)");
    a.option("--stride", &stride, "N", "strided pattern: read every N-th expert, ascending");
    a.size_option("--control", &control, "SIZE", "working set of the RAM-cached control");
    a.option("--seed", &seed, "N", "seed of the random read orders");
    a.flag("--quick", &quick,
           "small and fast: 512 MiB file, 0.25 s per test, threads 1,4, depths 1,16 (for tests and a first look)");
    a.flag("--remove", &remove, "delete the bench file at the end instead of keeping it for the next run");
    a.option("--json", &json, "FILE", "write the report (machine, settings, every result) as JSON");
    if (!a.parse(argc, argv, 3)) return 0;

    if (quick) {
        if (!a.given("--size")) size = 512ull << 20;
        if (!a.given("--seconds")) seconds = 0.25;
        if (!a.given("--threads")) threads = "1,4";
        if (!a.given("--depths")) depths = "1,16";
        if (!a.given("--control")) control = 32ull << 20;
    }
    if (seconds <= 0) throw std::runtime_error("--seconds must be positive");
    if (parts < 1 || parts > 3) throw std::runtime_error("--parts must be 1, 2 or 3");
    o.threads = parse_int_list("--threads", threads);
    o.depths = parse_int_list("--depths", depths);
    o.patterns.clear();
    for (const std::string& p : split_list(patterns)) {
        SsdPattern sp;
        if (!parse_ssd_pattern(p, &sp)) throw std::runtime_error("--patterns: unknown pattern '" + p + "'");
        o.patterns.push_back(sp);
    }
    if (!model.empty()) {
        ModelExperts me = read_model_experts(model);
        o.expert_parts = expert_part_sizes(me, layer);
        o.model = model;
    } else {
        o.expert_parts.assign(size_t(parts), part);
    }
    if (file.empty()) {
        std::string dir = ".";
        if (!model.empty() && model.find('/') != std::string::npos) dir = model.substr(0, model.rfind('/'));
        file = dir + "/moestream-bench.dat";
    }
    if (size == 0 && access(file.c_str(), F_OK) != 0)
        size = std::min<uint64_t>(16ull << 30, free_bytes_at(file) / 4) / (4ull << 20) * (4ull << 20);
    o.file = file;
    o.size = size;
    o.slice = slice;
    o.seconds = seconds;
    o.stride = stride;
    o.control_bytes = control;
    o.seed = uint64_t(seed);

    std::unique_ptr<ProgressBar> create_bar;
    o.create_progress = [&](uint64_t done, uint64_t total) {
        if (!create_bar) create_bar = std::make_unique<ProgressBar>("creating " + file, total);
        if (done >= total) create_bar->finish();
        else create_bar->update(done);
    };
    StepProgress steps("bench ssd tests");
    o.progress = [&](const std::string& l, uint64_t d, uint64_t t) { steps(l, d, t); };

    fprintf(stderr, "bench ssd: %s, %.2f s per test at most\n", file.c_str(), seconds);
    SsdReport r = run_ssd_bench(o);
    const Json& f = r.json.at("file");
    printf("bench ssd: %s (%s, device %s, %s), %s per test, expert parts from %s\n", f.at("path").as_string().c_str(),
           size_label(uint64_t(f.at("size_bytes").as_int())).c_str(),
           f.at("device").is_null() ? "none" : f.at("device").as_string().c_str(),
           f.at("direct").as_bool() ? "O_DIRECT" : "buffered", size_label(uint64_t(r.json.at("settings").at("slice_bytes").as_int())).c_str(),
           model.empty() ? "defaults" : model.c_str());
    fputs(r.table.c_str(), stdout);
    if (!json.empty()) write_json(json, r.json);
    if (remove) unlink(file.c_str());
    return 0;
}


int bench_cache(int argc, char** argv) {
    CacheOptions o;
    std::string json, grid_threads = "1,2,4,8", grid_splits = "1,2,4,8";
    uint64_t expert_size = o.expert_bytes;
    int64_t seed = 1;
    Args a("moestream bench cache [options]",
           "Measures effective warm page-cache expert bandwidth: pread of every expert of a set (a model's layer "
           "with -m, a packed expert file with --file, else a synthetic file written here and removed after) into "
           "its own slot of an arena, experts shuffled each pass, by N threads, each expert optionally split into "
           "page-aligned chunks read concurrently. Warm-up passes fill the cache; timed passes report GB/s, GiB/s "
           "and microseconds per expert, per pass and as average/best/worst. These are cached-read figures, not "
           "drive figures: the bytes the device served during the timed passes are shown beside them.");
    a.option("-m,--model", &o.model, "MODEL.gguf", "read this model's experts (gate, up, down: 3 reads each)");
    a.option("--layer", &o.layer, "N", "with -m: which MoE layer (index among MoE layers)");
    a.option("--file", &o.file, "PATH", "a packed expert file: experts of --expert-size back to back");
    a.size_option("--expert-size", &expert_size, "SIZE", "bytes per expert for --file and the synthetic file");
    a.option("--experts", &o.experts, "N", "experts per pass (with -m: at most the layer's count)");
    a.option("-t,--threads", &o.threads, "N", "reader threads");
    a.option("--split", &o.split, "N", "page-aligned chunks per expert part, read as separate tasks");
    a.option("--warmup", &o.warmup, "N", "untimed passes first (they fill the page cache)");
    a.option("--passes", &o.passes, "N", "timed passes");
    a.flag("--grid", &o.grid, "run every combination of --grid-threads x --grid-splits and print one table");
    a.option("--grid-threads", &grid_threads, "LIST", "thread counts of the grid");
    a.option("--grid-splits", &grid_splits, "LIST", "split counts of the grid");
    a.option("--seed", &seed, "N", "seed of the shuffles (and of the synthetic file's bytes)");
    a.option("--json", &json, "FILE", "write the report (machine, settings, every pass) as JSON");
    if (!a.parse(argc, argv, 3)) return 0;
    if (!o.model.empty() && !a.given("--experts")) o.experts = 1 << 20;  // the whole layer
    if (o.threads < 1 || o.split < 1 || o.warmup < 0) throw std::runtime_error("--threads and --split must be >= 1");
    o.expert_bytes = expert_size;
    o.grid_threads = parse_int_list("--grid-threads", grid_threads);
    o.grid_splits = parse_int_list("--grid-splits", grid_splits);
    o.seed = uint64_t(seed);
    StepProgress steps("bench cache passes");
    o.progress = [&](const std::string& l, uint64_t d, uint64_t t) { steps(l, d, t); };
    CacheReport r = run_cache_bench(o);
    fputs(r.text.c_str(), stdout);
    if (!json.empty()) write_json(json, r.json);
    return 0;
}


// The CUDA device's bounds: device-memory and host-device copy rates, and
// the weight bytes per second our matvec kernels read.
int bench_gpu(int argc, char** argv) {
    uint64_t size = uint64_t(1) << 30;
    int reps = 20;
    std::string json;
    Args a("moestream bench gpu [options]",
           "Measures the CUDA device's bounds: device-to-device copy (bytes read + written), host-to-device "
           "copy from pinned and pageable memory, device-to-host into pinned memory, the weight GB/s of "
           "moestream's matrix-vector kernels per weight type, and the time each kernel of a chain of empty "
           "dependent kernels adds (the floor under decode's launches); each the median of --reps timed runs.");
    a.size_option("--size", &size, "SIZE", "bytes per buffer");
    a.option("--reps", &reps, "N", "timed repetitions");
    a.option("--json", &json, "FILE", "also write the figures as JSON to FILE");
    if (!a.parse(argc, argv, 3)) return 0;
    std::string why;
    if (!gpu::available(&why)) {
        fprintf(stderr, "bench gpu: %s\n", why.c_str());
        return 1;
    }
    const gpu::Rates r = gpu::measure_rates(size_t(size), reps);
    Json j = Json::object();
    j["build"] = build_info();
    j["device"] = gpu::describe();
    j["bytes"] = size;
    j["reps"] = reps;
    j["device_copy_gbs"] = r.device_copy;
    j["h2d_pinned_gbs"] = r.h2d_pinned;
    j["h2d_pageable_gbs"] = r.h2d_pageable;
    j["d2h_pinned_gbs"] = r.d2h_pinned;
    j["chain_us_per_kernel"] = r.chain_us;
    Json mv = Json::object();
    printf("device %s\n", gpu::describe().c_str());
    printf("device copy   %8.1f GB/s (read + write)\nh2d pinned    %8.1f GB/s\nh2d pageable  %8.1f GB/s\n"
           "d2h pinned    %8.1f GB/s\n",
           r.device_copy, r.h2d_pinned, r.h2d_pageable, r.d2h_pinned);
    printf("kernel chain  %8.2f us a kernel (512 empty dependent kernels, one graph)\n", r.chain_us);
    for (auto [t, g] : r.matvec) {
        printf("matvec %-6s %8.1f GB/s of weights\n", type_name(t), g);
        mv[type_name(t)] = g;
    }
    j["matvec_weight_gbs"] = mv;
    if (!json.empty()) {
        std::ofstream(json) << j.dump(2) << "\n";
    }
    return 0;
}

int bench_gemm(int argc, char** argv) {
    GemmOptions o;
    std::string json, ms_list = "512,1024,4096", types = "f32,f16,bf16,q8_0", sustain_type = "q8_0";
    std::string gpu = "auto", gpu_types = "f32,tf32,f16,bf16,int8", gpu_sustain_type = "bf16";
    int64_t k = o.k, n = o.n, sustain_m = o.sustain_m, gpu_sustain_m = o.gpu_sustain_m;
    bool quick = false;
    Args a("moestream bench gemm [options]",
           "Measures this machine's compute ceiling through moestream's own kernels: Y = X . W^T with X of M rows "
           "(tokens) of K floats and W of N rows of K weights, computed the way the model computes (activations "
           "converted to the weight type's dot format, rows split over the thread pool). Synthetic weights in each "
           "--types at every --m, plus with -m the model's real expert matrices (gate, up, down of one layer) at "
           "every --m. First, the memory read bandwidth (a streaming sum over --mem-read bytes on the same "
           "threads): the bound of decode, which streams each weight once. Then a sustained run (--duration seconds, one sample per --sample seconds) reports the sag "
           "from the first to the last sample. A theoretical peak (cores x clock x operations per cycle of the "
           "SIMD level in use) is printed with its formula, beside the measured FMA peak of each SIMD level the CPU "
           "runs (independent FP32 fused multiply-adds on registers on every thread, best of 5: the FLOP bound "
           "of float kernels such as decode attention, with turbo and the core's real FMA width in it); CPU "
           "share shows when other work shared the cores. "
           "In a build with CUDA (MOESTREAM_CUDA), the same shapes then run on GPU 0 through cuBLAS in each "
           "--gpu-types type (timed with CUDA events after warm-up, against SMs x clock x the per-SM rate of its "
           "compute capability), with their own sustained run; without a usable GPU one line says why.");
    a.option("--m", &ms_list, "LIST", "token counts M (rows of X)");
    a.option("--k", &k, "K", "synthetic shapes: input width K");
    a.option("--n", &n, "N", "synthetic shapes: output width N (rows of W)");
    a.option("--types", &types, "LIST", "synthetic weight types (f32,f16,bf16,q8_0,q4_0,q4_k,q6_k,...; none: only -m)");
    a.option("-m,--model", &o.model, "MODEL.gguf", "also time this model's expert matrices (real weights of expert 0)");
    a.option("--layer", &o.layer, "N", "with -m: which MoE layer (index among MoE layers)");
    a.option("-t,--threads", &o.threads, "N", "threads (0: every CPU)");
    a.option("--min-seconds", &o.min_seconds, "S", "time each shape at least this long (after one untimed call)");
    a.option("--duration", &o.sustain_seconds, "S", "sustained run length (0: skip it)");
    a.option("--sample", &o.sample_seconds, "S", "sustained run: seconds per sample");
    a.option("--sustain-type", &sustain_type, "TYPE", "sustained run: weight type");
    a.option("--sustain-m", &sustain_m, "M", "sustained run: token count (K and N as above)");
    a.size_option("--mem-read", &o.memory_bytes, "SIZE",
                  "buffer of the memory read measurement, far larger than the caches (0: skip it)");
    a.option("--gpu", &gpu, "MODE",
             "GPU part through cuBLAS: auto (when a CUDA device is usable, else one line saying why), on (no "
             "usable device is an error), off");
    a.option("--gpu-types", &gpu_types, "LIST", "GPU arithmetic: f32,tf32,f16,bf16,int8 (fp32 accumulation; int8: int32)");
    a.option("--gpu-sustain-type", &gpu_sustain_type, "TYPE", "GPU sustained run: type");
    a.option("--gpu-sustain-m", &gpu_sustain_m, "M", "GPU sustained run: token count (K and N as above)");
    a.flag("--quick", &quick,
           "small and fast: f32,q8_0 at M=64, K=N=1024, 0.2 s per shape, 3 s sustained (1 s samples), 64 MiB "
           "memory read; GPU sustained at M=1024");
    a.option("--json", &json, "FILE", "write the report (machine, settings, peaks, results, samples) as JSON");
    if (!a.parse(argc, argv, 3)) return 0;
    if (quick) {
        if (!a.given("--m")) ms_list = "64";
        if (!a.given("--k")) k = 1024;
        if (!a.given("--n")) n = 1024;
        if (!a.given("--types")) types = "f32,q8_0";
        if (!a.given("--min-seconds")) o.min_seconds = 0.2;
        if (!a.given("--duration")) o.sustain_seconds = 3;
        if (!a.given("--sample")) o.sample_seconds = 1;
        if (!a.given("--sustain-m")) sustain_m = 64;
        if (!a.given("--gpu-sustain-m")) gpu_sustain_m = 1024;
        if (!a.given("--mem-read")) o.memory_bytes = uint64_t(64) << 20;
    }
    if (k < 1 || n < 1 || sustain_m < 1 || gpu_sustain_m < 1)
        throw std::runtime_error("--k, --n, --sustain-m and --gpu-sustain-m must be positive");
    if (!parse_gpu_mode(gpu, &o.gpu)) throw std::runtime_error("--gpu: expected on, off or auto, got '" + gpu + "'");
    o.gpu_types.clear();
    for (const std::string& t : split_list(gpu_types)) {
        GpuType gt;
        if (!parse_gpu_type(t, &gt)) throw std::runtime_error("--gpu-types: unknown type '" + t + "' (f32,tf32,f16,bf16,int8)");
        o.gpu_types.push_back(gt);
    }
    if (!parse_gpu_type(gpu_sustain_type, &o.gpu_sustain_type))
        throw std::runtime_error("--gpu-sustain-type: unknown type '" + gpu_sustain_type + "'");
    o.gpu_sustain_m = gpu_sustain_m;
    if (o.sample_seconds <= 0 || o.min_seconds < 0 || o.sustain_seconds < 0)
        throw std::runtime_error("--sample must be positive, --min-seconds and --duration not negative");
    o.ms.clear();
    for (int m : parse_int_list("--m", ms_list)) o.ms.push_back(m);
    o.k = k;
    o.n = n;
    o.sustain_m = sustain_m;
    o.types.clear();
    if (types != "none") {
        for (const std::string& t : split_list(types)) {
            GgmlType gt;
            if (!parse_type_name(t, &gt)) throw std::runtime_error("--types: unknown type '" + t + "'");
            o.types.push_back(gt);
        }
    }
    if (!parse_type_name(sustain_type, &o.sustain_type))
        throw std::runtime_error("--sustain-type: unknown type '" + sustain_type + "'");
    StepProgress steps("bench gemm shapes");
    o.progress = [&](const std::string& l, uint64_t d, uint64_t t) { steps(l, d, t); };
    GemmReport r = run_gemm_bench(o);
    fputs(r.text.c_str(), stdout);
    if (!json.empty()) write_json(json, r.json);
    return 0;
}


// The moestream executable itself, to spawn `moestream run` children.
std::string self_binary() {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) throw std::runtime_error("cannot find the moestream executable (/proc/self/exe); give --binary");
    return std::string(buf, size_t(n));
}

std::vector<std::string> split_words(const std::string& s) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && s[i] == ' ') ++i;
        size_t b = i;
        while (i < s.size() && s[i] != ' ') ++i;
        if (i > b) out.push_back(s.substr(b, i - b));
    }
    return out;
}

int bench_model(int argc, char** argv) {
    ModelBenchOptions o;
    std::string models, prompts = "512", gens = "128", depths = "0", pg, threads, batch, ctk, limit, output = "md", json, run_args;
    // Flags of `moestream run` that can be swept, under the same names.
    const char* run_flags[] = {"--mem", "--io", "--io-depth", "--io-threads", "--io-split", "--cache-policy",
                               "--step-fit", "--prefetch", "--layout", "-c", "--gpu", "--gpu-mem", "--gpu-prefill", "-ub",
                               "--parallel"};
    std::vector<std::string> run_values(std::size(run_flags));
    int64_t seed = 1;
    bool no_warmup = false;
    Args a("moestream bench model -m MODEL[,MODEL...] [options]",
           "llama-bench for moestream: prompt processing (pp, -p tokens of random ids), text generation (tg, -n "
           "tokens after a one-token prompt) and combined (-pg) tests, -r repetitions each, every repetition a "
           "fresh `moestream run` process whose --report JSON supplies the timings and the store's figures. Comma "
           "lists sweep: every combination of the listed values is a case. --limit-mem runs each case inside a "
           "fresh memory cgroup (v2 or v1) that bounds the page cache, as on a smaller machine. Output (-o) uses "
           "llama-bench's field names plus: hit_rate, mb_read_per_token, io_stall_ms_per_token, "
           "read_amplification, peak_rss_bytes, cgroup_peak_bytes, cgroup_file_bytes. A case whose --mem or --gpu-mem "
           "is too small for the model (the run exits 3) is listed as skipped, with the reason in its record's "
           "\"skipped\"; a run that fails otherwise is listed as failed (\"error\") and the command exits 1.");
    a.option("-m,--model", &models, "LIST", "GGUF model(s), comma separated");
    a.option("-p,--n-prompt", &prompts, "LIST", "prompt lengths of pp tests (0: none)");
    a.option("-n,--n-gen", &gens, "LIST", "generation lengths of tg tests (0: none)");
    a.option("-pg", &pg, "PP,TG[,PP,TG...]", "combined tests: prompt then generation, pairs");
    a.option("-d,--n-depth", &depths, "LIST",
             "context depths of tg tests: each generates after a prompt of D tokens whose prefill is not timed "
             "(llama-bench's -d; run's -c is raised to hold it unless -c is given)");
    a.option("-r,--repetitions", &o.repetitions, "N", "repetitions of every case");
    a.option("-t,--threads", &threads, "LIST", "thread counts (passed to run as -t)");
    a.option("-b,--batch-size", &batch, "LIST", "prompt batch sizes (passed to run as -b)");
    a.option("-ctk,--cache-type-k,--kv-type", &ctk, "LIST",
             "KV cache types f16,f32,q8_0 (passed to run as --kv-type: keys and values both, like llama-bench's "
             "-ctk q8_0 -ctv q8_0)");
    for (size_t i = 0; i < std::size(run_flags); ++i)
        a.option(run_flags[i], &run_values[i], "LIST", (std::string("values of run's ") + run_flags[i] + " to sweep").c_str());
    a.option("--limit-mem", &limit, "LIST", "memory cgroup limit per case (e.g. 4G; 0: none); bounds page cache + RSS");
    a.flag("--drop-caches", &o.drop_caches,
           "evict the model's (and its .experts sidecar's) page cache before every run (posix_fadvise, no root needed)");
    a.flag("--no-warmup", &no_warmup, "skip the discarded warm-up run of each case");
    a.option("-o,--output", &output, "FORMAT", "md, csv, json or jsonl (to stdout)");
    a.option("--json", &json, "FILE", "also write the full report (machine, settings, records) as JSON");
    a.option("--seed", &seed, "N", "seed of the random prompts and sampling (repetition i uses seed+i)");
    a.option("--timeout", &o.timeout_s, "S", "kill a run after S seconds (0: never)");
    a.option("--work-dir", &o.work_dir, "DIR", "keep every run's report, stdout and stderr here");
    a.option("--run-args", &run_args, "ARGS", "further flags for every run, space separated (not swept)");
    a.option("--binary", &o.binary, "PATH", "the moestream executable to run (default: this one)");
    if (!a.parse(argc, argv, 3)) return 0;
    if (models.empty()) throw std::runtime_error("-m MODEL is required");
    o.models = split_list(models);
    for (int p : parse_int_list("-p", prompts, 0))
        if (p > 0) o.tests.push_back({p, 0});
    const std::vector<int> depth_list = parse_int_list("-d", depths, 0);
    for (int n : parse_int_list("-n", gens, 0))
        for (int d : depth_list)
            if (n > 0) o.tests.push_back({0, n, d});
    if (!pg.empty()) {
        std::vector<int> v = parse_int_list("-pg", pg, 0);
        if (v.size() % 2) throw std::runtime_error("-pg: expected pairs PP,TG");
        for (size_t i = 0; i < v.size(); i += 2) o.tests.push_back({v[i], v[i + 1]});
    }
    if (!threads.empty()) o.sweeps.push_back({"-t", split_list(threads)});
    if (!batch.empty()) o.sweeps.push_back({"-b", split_list(batch)});
    if (!ctk.empty()) o.sweeps.push_back({"--kv-type", split_list(ctk)});
    for (size_t i = 0; i < std::size(run_flags); ++i)
        if (!run_values[i].empty()) o.sweeps.push_back({run_flags[i], split_list(run_values[i])});
    if (!limit.empty()) {
        o.limit_mem.clear();
        for (const std::string& l : split_list(limit)) o.limit_mem.push_back(l == "0" ? 0 : parse_size(l));
    }
    o.warmup = !no_warmup;
    o.seed = uint64_t(seed);
    o.keep_reports = !o.work_dir.empty();
    if (o.binary.empty()) o.binary = self_binary();
    if (!run_args.empty()) {
        // Unswept extras ride along as a one-value sweep.
        std::vector<std::string> w = split_words(run_args);
        for (size_t i = 0; i < w.size(); ++i) {
            bool has_value = i + 1 < w.size() && w[i + 1][0] != '-';
            o.sweeps.push_back({w[i], {has_value ? w[i + 1] : ""}});
            if (has_value) ++i;
        }
    }
    if (output != "md" && output != "csv" && output != "json" && output != "jsonl")
        throw std::runtime_error("-o: unknown output format '" + output + "' (md, csv, json, jsonl)");
    StepProgress steps("bench model runs");
    o.progress = [&](const std::string& l, uint64_t d, uint64_t t) { steps(l, d, t); };
    ModelBenchReport r = run_model_bench(o);
    fputs(format_records(output, r.records, model_md_columns(o)).c_str(), stdout);
    if (!json.empty()) write_json(json, r.json);
    for (const std::string& e : r.skipped) fprintf(stderr, "bench model: %s\n", e.c_str());
    for (const std::string& e : r.errors) fprintf(stderr, "bench model: %s\n", e.c_str());
    return r.errors.empty() ? 0 : 1;
}


}  // namespace

// A directory shipped in the repository (bench/prompts, scripts), looked up
// next to the executable's build directory and then under the current one.
std::string repo_dir(const std::string& rel) {
    namespace fs = std::filesystem;
    fs::path bin = fs::path(self_binary()).parent_path();
    for (const fs::path& p : {bin / ".." / rel, bin / rel, fs::current_path() / rel})
        if (fs::is_directory(p)) return fs::weakly_canonical(p).string();
    return "";
}

namespace {

int bench_protocol(int argc, char** argv) {
    ProtocolOptions o;
    std::string prompts, cases = "short,medium,long", limit, run_args, json, scripts;
    int64_t seed = int64_t(o.seed);
    bool no_warmup = false;
    Args a("moestream bench protocol -m MODEL [options]",
           "The community benchmark protocol with a device autopsy: an idle baseline, one discarded warm-up (the "
           "first case), then each case (prompt files shipped in bench/prompts: short ~60, medium ~430, long ~3000 "
           "tokens) as a fresh `moestream run` with a fixed seed and generation length. Every --interval the "
           "model's drive is sampled (/proc/diskstats: MB/s, IOPS), with the CPU idle share and the run's RSS. "
           "Per case: samples, avg/min/max MB/s, avg IOPS, avg idle %, prefill and decode tok/s, peak RSS, swap "
           "delta, bytes read vs the model's size, the store's figures. Writes OUT/report.md, OUT/protocol.json, "
           "the samples (TSV) and PNG charts (gnuplot): throughput over time and time per token by kind of work.");
    a.option("-m,--model", &o.model, "MODEL.gguf", "the model (required)");
    a.option("--prompts", &prompts, "DIR", "directory of CASE.txt prompt files (default: the repository's bench/prompts)");
    a.option("--cases", &cases, "LIST", "which prompt files, in order");
    a.option("-n,--n-gen", &o.n_gen, "N", "tokens generated per case");
    a.option("--seed", &seed, "N", "sampling seed of every run");
    std::string seeds;
    a.option("--seeds", &seeds, "LIST",
             "a sampling seed per case, in --cases order (the warm-up takes the first case's); e.g. "
             "TurboFieldfare's 20260721,20260722,20260723");
    a.option("--interval", &o.interval_s, "S", "seconds between samples");
    a.option("--baseline", &o.baseline_s, "S", "idle sampling before the cases (0: none)");
    a.flag("--no-warmup", &no_warmup, "skip the discarded warm-up run");
    a.flag("--drop-caches", &o.drop_caches, "evict the model's page cache before every case (posix_fadvise)");
    a.option("--limit-mem", &limit, "SIZE", "run each case in a memory cgroup of this size");
    a.option("--run-args", &run_args, "ARGS", "further flags for every run, space separated (e.g. \"--mem 4G --io uring\")");
    a.option("-o,--out", &o.out_dir, "DIR", "output directory (default: protocol-DATE-TIME)");
    a.option("--scripts", &scripts, "DIR", "directory of plot_protocol_*.gp (default: the repository's scripts)");
    a.option("--timeout", &o.timeout_s, "S", "kill a run after S seconds (0: never)");
    a.option("--binary", &o.binary, "PATH", "the moestream executable to run (default: this one)");
    a.option("--json", &json, "FILE", "also write the JSON report here (it is always in OUT/protocol.json)");
    if (!a.parse(argc, argv, 3)) return 0;
    if (o.model.empty()) throw std::runtime_error("-m MODEL is required");
    if (o.n_gen < 0 || o.interval_s <= 0 || o.baseline_s < 0)
        throw std::runtime_error("-n must be >= 0, --interval > 0, --baseline >= 0");
    if (o.binary.empty()) o.binary = self_binary();
    if (prompts.empty()) prompts = repo_dir("bench/prompts");
    if (prompts.empty()) throw std::runtime_error("cannot find bench/prompts; give --prompts DIR");
    for (const std::string& c : split_list(cases)) o.cases.push_back({c, prompts + "/" + c + ".txt"});
    if (!seeds.empty()) {
        const std::vector<std::string> list = split_list(seeds);
        if (list.size() != o.cases.size())
            throw std::runtime_error("--seeds gives " + std::to_string(list.size()) + " seeds for " +
                                     std::to_string(o.cases.size()) + " cases");
        for (size_t i = 0; i < list.size(); i++) o.cases[i].seed = std::stoll(list[i]);
    }
    o.scripts_dir = scripts.empty() ? repo_dir("scripts") : scripts;
    o.seed = uint64_t(seed);
    o.warmup = !no_warmup;
    if (!limit.empty()) o.limit_mem = parse_size(limit);
    o.run_args = split_words(run_args);
    if (o.out_dir.empty()) {
        o.out_dir = time_now("protocol-%Y%m%d-%H%M%S", false);
    }
    StepProgress steps("bench protocol phases");
    o.progress = [&](const std::string& l, uint64_t d, uint64_t t) { steps(l, d, t); };
    ProtocolReport r = run_protocol(o);
    fputs(r.markdown.c_str(), stdout);
    std::ofstream(o.out_dir + "/report.md") << r.markdown;
    write_json(o.out_dir + "/protocol.json", r.json);
    if (!json.empty()) write_json(json, r.json);
    fprintf(stderr, "wrote %s/report.md\n", o.out_dir.c_str());
    for (const ProtocolCaseResult& c : r.cases)
        if (!c.ok) return 1;
    return 0;
}

int bench_routing(int argc, char** argv) {
    SessionFlags flags;
    std::string text_file, trace_in, trace_out, json, png, sizes, streams;
    int window = 8, max_tokens = 0;
    Args a("moestream bench routing (-m MODEL -f TEXT | --trace FILE) [options]",
           "How a model routes on a text and what memory buys: runs the model over the text (as prefill, so "
           "each token's experts are those decode would choose at that position) recording every token's "
           "experts per layer, or reads a trace that `run --routing-trace` or --save-trace wrote. Per layer: "
           "distinct experts, how few experts cover 50/80/90 % of the picks, the top expert's share, entropy, "
           "the share of a token's experts the previous token (and any of the previous --window tokens) also "
           "chose. Then the trace is replayed in decode order through an expert cache shared by all layers, "
           "as the store's is, starting empty: the hit rate under LRU, LFU and WLFU (the store's own policies) "
           "and Belady's optimum (evict the expert used again furthest in the future: the ceiling at that size).");
    flags.declare(a, false);
    a.option("-f,--file", &text_file, "TEXT", "the text to run the model over");
    a.option("--tokens", &max_tokens, "N", "use only the first N tokens of the text (0: all that fit the context)");
    a.option("--trace", &trace_in, "FILE", "analyse this routing trace instead of running a model");
    a.option("--save-trace", &trace_out, "FILE", "write the routing trace of the run to FILE");
    a.option("--window", &window, "N", "reuse window in tokens (the 'within N' column)");
    a.option("--replay-slots", &sizes, "LIST",
             "cache sizes to replay, in slots per routed layer (comma list; default 1/16 .. 7/8 of the experts; "
             "--cache-slots is the store's, for the run over the text)");
    a.option("--streams", &streams, "LIST",
             "also replay the trace as N sequences decoded together, for each N of the comma list (e.g. "
             "1,8,16,32): the tokens cut into N parts, a step running one token of each, each layer acquiring "
             "the union of their experts, as `serve --parallel N` does; hit rates and experts read per "
             "generated token at the --replay-slots sizes (raised to N x k where smaller)");
    a.option("--json", &json, "FILE", "write the statistics and the replay as JSON");
    a.option("--png", &png, "FILE", "plot hit rate against cache size per policy (gnuplot)");
    if (!a.parse(argc, argv, 3)) return 0;
    if (trace_in.empty() == (flags.model.empty() || text_file.empty()))
        throw std::runtime_error("give either -m MODEL -f TEXT or --trace FILE");
    if (window < 1 || max_tokens < 0) throw std::runtime_error("--window must be >= 1 and --tokens >= 0");

    std::unique_ptr<RoutingTrace> trace;
    if (!trace_in.empty()) {
        trace = std::make_unique<RoutingTrace>(RoutingTrace::read(trace_in));
    } else {
        std::ifstream f(text_file, std::ios::binary);
        if (!f) throw std::runtime_error(text_file + ": cannot open");
        const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        auto s = flags.open();
        std::vector<int32_t> tokens = s->tokenize(text);
        const size_t limit = size_t(max_tokens > 0 ? std::min<int64_t>(max_tokens, s->n_ctx()) : s->n_ctx());
        if (tokens.size() > limit) {
            fprintf(stderr, "using the first %zu of the text's %zu tokens (%s)\n", limit, tokens.size(),
                    max_tokens > 0 ? "--tokens" : "the context; raise -c for more");
            tokens.resize(limit);
        }
        if (tokens.size() < 2) throw std::runtime_error(text_file + ": the text gives fewer than 2 tokens");
        const ModelConfig& c = s->config();
        if (c.n_expert <= 0) throw std::runtime_error(flags.model + ": the model has no routed experts");
        trace = std::make_unique<RoutingTrace>(c.n_layer, c.n_expert, c.n_expert_used);
        trace->reserve(int64_t(tokens.size()));
        s->experts().routing_trace = trace.get();
        ProgressBar bar("routing " + std::to_string(tokens.size()) + " tokens", tokens.size(), false);
        const size_t step = size_t(std::max(1, flags.batch));
        for (size_t at = 0; at < tokens.size(); at += step) {
            s->prefill(std::vector<int32_t>(tokens.begin() + ptrdiff_t(at),
                                            tokens.begin() + ptrdiff_t(std::min(tokens.size(), at + step))));
            bar.update(std::min(tokens.size(), at + step));
        }
        bar.finish();
        s->experts().routing_trace = nullptr;
        if (!trace_out.empty()) {
            trace->write(trace_out);
            fprintf(stderr, "wrote %s\n", trace_out.c_str());
        }
        flags.finish("bench routing", *s);
    }
    const RoutingStats stats = routing_stats(*trace, window);
    const std::vector<int> per_layer =
        sizes.empty() ? default_cache_sizes(trace->n_expert(), trace->k()) : parse_int_list("--replay-slots", sizes);
    const std::vector<CachePoint> cache = replay_cache_sizes(*trace, per_layer);
    fputs(routing_text(stats, cache).c_str(), stdout);
    std::vector<StreamsPoint> by_streams;
    if (!streams.empty()) {
        by_streams = replay_streams(*trace, parse_int_list("--streams", streams), per_layer);
        fputs(streams_text(by_streams).c_str(), stdout);
    }
    if (!json.empty()) {
        Json j = routing_json(stats, cache);
        if (!by_streams.empty()) j["streams"] = streams_json(by_streams);
        j["build"] = build_info();
        write_json(json, j);
    }
    if (!png.empty()) {
        const std::string err = plot_cache_curve(cache, trace->n_expert(), png);
        if (!err.empty()) throw std::runtime_error(png + ": " + err);
        fprintf(stderr, "wrote %s\n", png.c_str());
    }
    return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
    if (argc < 3 || !strcmp(argv[2], "-h") || !strcmp(argv[2], "--help")) {
        fputs(kBenchUsage, argc < 3 ? stderr : stdout);
        return argc < 3 ? 2 : 0;
    }
    std::string which = argv[2];
    if (which == "ssd") return bench_ssd(argc, argv);
    if (which == "cache") return bench_cache(argc, argv);
    if (which == "gemm") return bench_gemm(argc, argv);
    if (which == "model") return bench_model(argc, argv);
    if (which == "protocol") return bench_protocol(argc, argv);
    if (which == "routing") return bench_routing(argc, argv);
    if (which == "gpu") return bench_gpu(argc, argv);
    if (which == "serve") return bench_serve(argc, argv);
    fprintf(stderr, "moestream bench: unknown benchmark '%s'\n%s", which.c_str(), kBenchUsage);
    return 2;
}

}  // namespace ms
