#include "bench/gemm.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <map>
#include <random>
#include <stdexcept>

#include "bench/model_experts.h"
#include "bench/readers.h"
#include "bench/table.h"
#include "gguf/gguf.h"
#include "ops/buffer.h"
#include "ops/linear.h"
#include "ops/thread_pool.h"
#include "quant/blocks.h"
#include "quant/cpu.h"
#include "quant/dot.h"
#include "quant/half.h"
#include "telemetry/build_info.h"
#include "telemetry/system.h"

namespace ms {

namespace {

// Where the fp16 scale fields of each block type sit: everything else in a
// block is quantized values or packed sub-scales, for which any bits are
// valid.
struct ScaleFields {
    GgmlType type;
    size_t offsets[2];
    int count;
};
const ScaleFields kScaleFields[] = {
    {GgmlType::Q4_0, {offsetof(BlockQ4_0, d), 0}, 1},
    {GgmlType::Q4_1, {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)}, 2},
    {GgmlType::Q5_0, {offsetof(BlockQ5_0, d), 0}, 1},
    {GgmlType::Q5_1, {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)}, 2},
    {GgmlType::IQ4_NL, {offsetof(BlockIQ4_NL, d), 0}, 1},
    {GgmlType::Q2_K, {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)}, 2},
    {GgmlType::Q3_K, {offsetof(BlockQ3_K, d), 0}, 1},
    {GgmlType::Q4_K, {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)}, 2},
    {GgmlType::Q5_K, {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)}, 2},
    {GgmlType::Q6_K, {offsetof(BlockQ6_K, d), 0}, 1},
    {GgmlType::IQ4_XS, {offsetof(BlockIQ4_XS, d), 0}, 1},
};

const ScaleFields* scale_fields(GgmlType t) {
    for (const ScaleFields& s : kScaleFields)
        if (s.type == t) return &s;
    return nullptr;
}

// Types whose weight rows have exactly the activation format's layout, so
// quantize_act writes valid weight rows.
bool act_layout_type(GgmlType t) {
    return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0;
}

bool is_float_type(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

double cpu_seconds() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

struct Weights {
    AlignedBuffer data;
    Tensor t;
};

// One timed shape: an untimed call, then repeated until min_seconds pass.
GemmResult time_shape(ThreadPool& pool, const GemmShape& s, const Tensor& w, double min_seconds) {
    AlignedBuffer x(size_t(s.m * s.k) * sizeof(float));
    float* xf = reinterpret_cast<float*>(x.data());
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t i = 0; i < s.m * s.k; ++i) xf[i] = nd(rng);
    AlignedBuffer y(size_t(s.m * s.n) * sizeof(float));
    AlignedBuffer act(linear_scratch_bytes(w, s.m));
    float* yf = reinterpret_cast<float*>(y.data());
    linear(pool, w, xf, s.m, yf, act.data());
    GemmResult r;
    r.shape = s;
    int64_t t0 = now_ns();
    double c0 = cpu_seconds();
    do {
        linear(pool, w, xf, s.m, yf, act.data());
        ++r.iterations;
        r.seconds = double(now_ns() - t0) / 1e9;
    } while (r.seconds < min_seconds);
    r.cpu_seconds = cpu_seconds() - c0;
    return r;
}

}  // namespace

bool gemm_synthetic_type_ok(GgmlType t) { return act_layout_type(t) || scale_fields(t) != nullptr; }

void fill_random_weights(GgmlType t, int64_t k, int64_t n_rows, uint8_t* dst, uint64_t seed) {
    const size_t rb = row_bytes(t, k);
    if (act_layout_type(t)) {
        std::mt19937 rng(static_cast<uint32_t>(seed));
        std::normal_distribution<float> nd(0.0f, 0.02f);
        std::vector<float> row(static_cast<size_t>(k));
        for (int64_t r = 0; r < n_rows; ++r) {
            for (float& v : row) v = nd(rng);
            quantize_act(t, row.data(), dst + size_t(r) * rb, k);
        }
        return;
    }
    const ScaleFields* sf = scale_fields(t);
    if (!sf) throw std::runtime_error(std::string("bench gemm: cannot make synthetic ") + type_name(t) + " weights");
    std::mt19937_64 rng(seed);
    size_t total = rb * size_t(n_rows);
    for (size_t i = 0; i < total; i += 8) {
        uint64_t v = rng();
        memcpy(dst + i, &v, std::min<size_t>(8, total - i));
    }
    const size_t block = type_traits(t).type_size;
    const uint16_t scale = fp32_to_fp16(0.01f);
    for (size_t b = 0; b < total; b += block)
        for (int f = 0; f < sf->count; ++f) memcpy(dst + b + sf->offsets[f], &scale, 2);
}

PeakEstimate theoretical_peak(GgmlType t, int threads) {
    SimdLevel lvl = simd_level();
    const CpuFeatures& f = cpu_features();
    int cores = std::min(threads, physical_core_count());
    double ghz = cpu_mhz() / 1000.0;
    double per_cycle = 2;
    std::string unit;
    if (is_float_type(t)) {
        if (t == GgmlType::BF16 && lvl == SimdLevel::Avx512 && f.avx512bf16) {
            per_cycle = 128, unit = "128 FLOP/cycle (AVX512-BF16 vdpbf16ps: 2 units x 32 bf16 pairs x 2)";
        } else if (lvl >= SimdLevel::Avx2) {
            // The AVX-512 level keeps the 256-bit float kernels (quant/dot_avx512.cpp says why).
            per_cycle = 32, unit = "32 FLOP/cycle (AVX2: 2 FMA units x 8 fp32 lanes x 2)";
        } else {
            unit = "2 FLOP/cycle (scalar FMA)";
        }
    } else {
        if (lvl == SimdLevel::Avx512 && f.avx512vnni) {
            per_cycle = 256, unit = "256 int8 ops/cycle (AVX512-VNNI vpdpbusd: 2 units x 64 multiply-adds x 2)";
        } else if (lvl >= SimdLevel::Avx2) {
            per_cycle = 128, unit = "128 int8 ops/cycle (AVX2 vpmaddubsw: 2 units x 32 multiply-adds x 2)";
        } else {
            per_cycle = 4, unit = "4 ops/cycle (scalar)";
        }
    }
    PeakEstimate p;
    p.gflops = cores * ghz * per_cycle;
    p.how = strf("%d cores x %.2f GHz x %s; cores = min(threads, physical cores), clock = 'cpu MHz' of "
                 "/proc/cpuinfo (nominal; turbo not counted), two vector units per core assumed",
                 cores, ghz, unit.c_str());
    return p;
}


uint64_t stream_sum(ThreadPool& pool, const uint8_t* p, uint64_t bytes) {
    const uint64_t* w = reinterpret_cast<const uint64_t*>(p);
    const int64_t n = int64_t(bytes / 8);
    std::vector<uint64_t> sums(size_t(pool.size()) * 8, 0);  // a cache line per thread
    pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
        // Four independent chains, so the adds never wait on each other.
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        int64_t i = b;
        for (; i + 4 <= e; i += 4) {
            s0 += w[i];
            s1 += w[i + 1];
            s2 += w[i + 2];
            s3 += w[i + 3];
        }
        for (; i < e; i++) s0 += w[i];
        sums[size_t(t) * 8] += s0 + s1 + s2 + s3;
    });
    uint64_t total = 0;
    for (uint64_t v : sums) total += v;
    return total;
}

double MemoryRead::best() const {
    double b = 0;
    for (double g : gb_per_s) b = std::max(b, g);
    return b;
}

MemoryRead measure_memory_read(ThreadPool& pool, uint64_t bytes, int passes) {
    MemoryRead m;
    m.bytes = bytes & ~uint64_t(63);
    m.threads = pool.size();
    AlignedBuffer buf(m.bytes, PageSize::Huge);  // as the weights decode streams
    const int64_t t_touch = now_ns();
    prefault(buf.data(), m.bytes);  // as Model::load_resident does
    std::memset(buf.data(), 1, m.bytes);
    m.first_touch_gb_per_s = double(m.bytes) / double(now_ns() - t_touch);
    volatile uint64_t sink = stream_sum(pool, buf.data(), m.bytes);
    for (int i = 0; i < passes; i++) {
        const int64_t t0 = now_ns();
        sink = sink + stream_sum(pool, buf.data(), m.bytes);
        m.gb_per_s.push_back(double(m.bytes) / double(now_ns() - t0));
    }
    return m;
}

GemmReport run_gemm_bench(const GemmOptions& opt) {
    // The GPU is probed first, so that --gpu on fails before any measuring.
    GemmReport rep;
    bool use_gpu = false;
    if (opt.gpu == GpuMode::Off) {
        rep.gpu.reason = "--gpu off";
    } else if (gpu_probe(&rep.gpu.device, &rep.gpu.reason)) {
        use_gpu = true;
    } else if (opt.gpu == GpuMode::On) {
        throw std::runtime_error("bench gemm --gpu on: " + rep.gpu.reason);
    }
    GpuGemmPlan gpu;
    gpu.types = opt.gpu_types;
    gpu.min_seconds = opt.min_seconds;
    gpu.sustain = {"sustained", opt.gpu_sustain_m, opt.k, opt.n};
    gpu.sustain_type = opt.gpu_sustain_type;
    gpu.sustain_seconds = opt.sustain_seconds;
    gpu.sample_seconds = opt.sample_seconds;
    if (!opt.types.empty())
        for (int64_t m : opt.ms) gpu.shapes.push_back({"synthetic", m, opt.k, opt.n});

    ThreadPool pool(opt.threads);
    std::vector<GemmShape> shapes;
    std::map<std::string, Weights> weights;  // by label + type + k + n
    auto key = [](const GemmShape& s) { return s.label + "/" + type_name(s.type) + "/" + std::to_string(s.k) + "x" + std::to_string(s.n); };
    for (GgmlType t : opt.types) {
        if (!gemm_synthetic_type_ok(t))
            throw std::runtime_error(std::string("bench gemm: no synthetic weights for type ") + type_name(t));
        if (opt.k % int64_t(type_traits(t).block_size) != 0)
            throw std::runtime_error(strf("bench gemm: K=%lld is not a multiple of %s's block size %u",
                                          (long long)opt.k, type_name(t), type_traits(t).block_size));
        for (int64_t m : opt.ms) shapes.push_back({"synthetic", t, m, opt.k, opt.n});
    }
    if (!opt.model.empty()) {
        ModelExperts me = read_model_experts(opt.model);
        const ExpertLayer& l = me.layers.at(opt.layer >= 0 && opt.layer < me.n_layers ? size_t(opt.layer) : 0);
        GgufFile f = GgufFile::open(opt.model);
        for (const ExpertMatrix* mx : {&l.gate, &l.up, &l.down}) {
            GemmShape s{mx->tensor, mx->type, 0, mx->cols, mx->rows};
            Weights& w = weights[key(s)];
            w.data.resize(mx->bytes, PageSize::Huge);
            f.read(mx->split, mx->offset(0), w.data.data(), mx->bytes);  // expert 0's real weights
            w.t = {mx->type, mx->cols, mx->rows, w.data.data()};
            for (int64_t m : opt.ms) {
                s.m = m;
                shapes.push_back(s);
                gpu.shapes.push_back({s.label, m, s.k, s.n});
            }
        }
    }
    uint64_t steps = shapes.size() + (opt.sustain_seconds > 0 ? 1 : 0) + (opt.memory_bytes > 0 ? 1 : 0), step = 0;
    const uint64_t cpu_steps = steps;
    if (use_gpu) steps += gpu.types.size() * gpu.shapes.size() + (gpu.sustain_seconds > 0 ? 1 : 0);
    if (opt.memory_bytes > 0) {
        if (opt.progress) opt.progress("memory read", step++, steps);
        rep.memory = measure_memory_read(pool, opt.memory_bytes, 5);
    }
    rep.fma = measure_fma_peaks(pool);
    for (const GemmShape& s : shapes) {
        if (opt.progress) opt.progress(strf("%s M=%lld", type_name(s.type), (long long)s.m), step++, steps);
        Weights& w = weights[key(s)];
        if (!w.data.data()) {
            w.data.resize(row_bytes(s.type, s.k) * size_t(s.n), PageSize::Huge);
            fill_random_weights(s.type, s.k, s.n, w.data.data(), 11);
            w.t = {s.type, s.k, s.n, w.data.data()};
        }
        rep.results.push_back(time_shape(pool, s, w.t, opt.min_seconds));
    }

    GemmShape sus{"sustained", opt.sustain_type, opt.sustain_m, opt.k, opt.n};
    if (opt.sustain_seconds > 0) {
        if (opt.progress) opt.progress("sustained", step, steps);
        Weights w;
        w.data.resize(row_bytes(sus.type, sus.k) * size_t(sus.n), PageSize::Huge);
        fill_random_weights(sus.type, sus.k, sus.n, w.data.data(), 13);
        w.t = {sus.type, sus.k, sus.n, w.data.data()};
        AlignedBuffer x(size_t(sus.m * sus.k) * sizeof(float)), y(size_t(sus.m * sus.n) * sizeof(float));
        AlignedBuffer act(linear_scratch_bytes(w.t, sus.m));
        float* xf = reinterpret_cast<float*>(x.data());
        for (int64_t i = 0; i < sus.m * sus.k; ++i) xf[i] = float((i * 7919) % 1000) / 1000.0f - 0.5f;
        int64_t t0 = now_ns(), win = t0;
        double cwin = cpu_seconds();
        int iters = 0;
        for (;;) {
            linear(pool, w.t, xf, sus.m, reinterpret_cast<float*>(y.data()), act.data());
            ++iters;
            int64_t now = now_ns();
            if (double(now - win) / 1e9 >= opt.sample_seconds || double(now - t0) / 1e9 >= opt.sustain_seconds) {
                GemmSample g;
                g.t_start = double(win - t0) / 1e9;
                g.t_end = double(now - t0) / 1e9;
                g.gflops = sus.flops() * iters / (g.t_end - g.t_start) / 1e9;
                double c = cpu_seconds();
                g.cpu_share = (c - cwin) / ((g.t_end - g.t_start) * pool.size());
                cwin = c;
                rep.samples.push_back(g);
                if (opt.progress) opt.progress("sustained", step, steps);
                win = now;
                iters = 0;
                if (double(now - t0) / 1e9 >= opt.sustain_seconds) break;
            }
        }
        if (rep.samples.size() >= 2 && rep.samples.front().gflops > 0)
            rep.sag_percent = (rep.samples.front().gflops - rep.samples.back().gflops) / rep.samples.front().gflops * 100;
        ++step;
    }
    if (use_gpu) {
        if (opt.progress)
            gpu.progress = [&](const std::string& label, uint64_t done, uint64_t) {
                opt.progress(label, cpu_steps + done, steps);
            };
        rep.gpu = run_gpu_gemm_bench(gpu);
    }
    if (opt.progress) opt.progress("done", steps, steps);

    // Text and JSON.
    std::map<GgmlType, PeakEstimate> peaks;
    for (const GemmResult& r : rep.results) peaks.emplace(r.shape.type, theoretical_peak(r.shape.type, pool.size()));
    if (!rep.samples.empty()) peaks.emplace(sus.type, theoretical_peak(sus.type, pool.size()));
    std::string t = strf("bench gemm: %d threads, kernels at SIMD level %s, Y = X . W^T through ops/linear "
                         "(activation conversion included)\n\n",
                         pool.size(), simd_level_name(simd_level()));
    Table tb;
    tb.left_columns = 2;
    tb.header = {"weights", "type", "M", "K", "N", "ms/call", "GFLOP/s", "% of peak", "CPU share %"};
    for (const GemmResult& r : rep.results) {
        double peak = peaks[r.shape.type].gflops;
        tb.add({r.shape.label, type_name(r.shape.type), std::to_string(r.shape.m), std::to_string(r.shape.k),
                std::to_string(r.shape.n), strf("%.2f", r.seconds / r.iterations * 1e3), strf("%.1f", r.gflops()),
                peak > 0 ? strf("%.1f", r.gflops() / peak * 100) : "-",
                strf("%.0f", r.cpu_seconds / (r.seconds * pool.size()) * 100)});
    }
    t += tb.text();
    if (rep.memory.bytes > 0) {
        t += strf("\nmemory read: %.2f GB/s (best of %zu passes: a streaming sum over %s on %d threads; the bound "
                  "of kernels that stream weights once, as decode does; passes:", rep.memory.best(),
                  rep.memory.gb_per_s.size(), strf("%.0f MiB", double(rep.memory.bytes) / 1048576).c_str(), rep.memory.threads);
        for (double g : rep.memory.gb_per_s) t += strf(" %.2f", g);
        t += strf(")\nfirst touch: %.2f GB/s (writing the same buffer's fresh pages once: the rate a cold start fills "
                  "resident weights and cache slots at, before any compute)\n",
                  rep.memory.first_touch_gb_per_s);
    }
    if (!rep.fma.empty()) {
        t += "\nmeasured FMA peak (independent FP32 fused multiply-adds on registers, every thread, best of "
             "5 runs; the FLOP bound of FP32 kernels, turbo and the core's real FMA width included):\n";
        for (const FmaPeak& p : rep.fma)
            t += strf("  %-6s %8.1f GFLOP/s on %d threads (%.1f FLOP a cycle a thread at the nominal clock)\n",
                      simd_level_name(p.level), p.gflops, p.threads, p.per_thread_cycle);
    }
    t += "\ntheoretical peaks:\n";
    for (const auto& [type, p] : peaks) t += strf("  %-5s %8.1f GFLOP/s = %s\n", type_name(type), p.gflops, p.how.c_str());
    if (!rep.samples.empty()) {
        t += strf("\nsustained: %s M=%lld K=%lld N=%lld for %.0f s, one sample per %.0f s\n", type_name(sus.type),
                  (long long)sus.m, (long long)sus.k, (long long)sus.n, opt.sustain_seconds, opt.sample_seconds);
        Table st;
        st.left_columns = 0;
        st.header = {"from s", "to s", "GFLOP/s", "CPU share %"};
        for (const GemmSample& g : rep.samples)
            st.add({strf("%.1f", g.t_start), strf("%.1f", g.t_end), strf("%.1f", g.gflops),
                    strf("%.0f", g.cpu_share * 100)});
        t += st.text();
        t += strf("sag over the run: %.2f%% (first sample to last; negative = got faster)\n", rep.sag_percent);
    }
    t += "CPU share: this process's CPU time / (wall time x threads); well under 100% means other work "
         "shared the cores and the figures understate the machine\n";
    t += gpu_gemm_text(rep.gpu);
    rep.text = t;

    Json j = Json::object();
    j["command"] = "bench gemm";
    j["schema_version"] = 1;
    j["machine"] = machine_info();
    j["build"] = build_info();
    Json s = Json::object();
    s["threads"] = pool.size();
    s["simd_level"] = simd_level_name(simd_level());
    Json msj = Json::array(), types = Json::array();
    for (int64_t m : opt.ms) msj.push_back(m);
    for (GgmlType ty : opt.types) types.push_back(type_name(ty));
    s["m"] = msj;
    s["k"] = opt.k;
    s["n"] = opt.n;
    s["types"] = types;
    s["model"] = opt.model.empty() ? Json(nullptr) : Json(opt.model);
    s["layer"] = opt.layer;
    s["min_seconds"] = opt.min_seconds;
    s["sustain_seconds"] = opt.sustain_seconds;
    s["sample_seconds"] = opt.sample_seconds;
    s["gpu"] = opt.gpu == GpuMode::Off ? "off" : opt.gpu == GpuMode::On ? "on" : "auto";
    Json gtypes = Json::array();
    for (GpuType ty : opt.gpu_types) gtypes.push_back(gpu_type_name(ty));
    s["gpu_types"] = gtypes;
    s["gpu_sustain_type"] = gpu_type_name(opt.gpu_sustain_type);
    s["gpu_sustain_m"] = opt.gpu_sustain_m;
    j["settings"] = s;
    Json pk = Json::object();
    for (const auto& [type, p] : peaks) {
        Json o = Json::object();
        o["gflops"] = p.gflops;
        o["how"] = p.how;
        pk[type_name(type)] = o;
    }
    j["theoretical_peak"] = pk;
    Json fm = Json::array();
    for (const FmaPeak& p : rep.fma) {
        Json o = Json::object();
        o["level"] = simd_level_name(p.level);
        o["threads"] = p.threads;
        o["gflops"] = p.gflops;
        o["flop_per_cycle_per_thread"] = p.per_thread_cycle;
        Json runs = Json::array();
        for (double g : p.runs) runs.push_back(g);
        o["runs_gflops"] = runs;
        fm.push_back(o);
    }
    j["fma_peak"] = fm;
    if (rep.memory.bytes > 0) {
        Json mr = Json::object();
        mr["bytes"] = rep.memory.bytes;
        mr["threads"] = rep.memory.threads;
        mr["gb_per_s"] = rep.memory.best();
        Json passes = Json::array();
        for (double g : rep.memory.gb_per_s) passes.push_back(g);
        mr["passes_gb_per_s"] = passes;
        mr["first_touch_gb_per_s"] = rep.memory.first_touch_gb_per_s;
        j["memory_read"] = mr;
    } else {
        j["memory_read"] = nullptr;
    }
    Json res = Json::array();
    for (const GemmResult& r : rep.results) {
        Json o = Json::object();
        o["weights"] = r.shape.label;
        o["type"] = type_name(r.shape.type);
        o["m"] = r.shape.m;
        o["k"] = r.shape.k;
        o["n"] = r.shape.n;
        o["iterations"] = r.iterations;
        o["seconds"] = r.seconds;
        o["gflops"] = r.gflops();
        o["cpu_seconds"] = r.cpu_seconds;
        o["cpu_share"] = r.seconds > 0 ? r.cpu_seconds / (r.seconds * pool.size()) : 0.0;
        o["percent_of_peak"] = peaks[r.shape.type].gflops > 0 ? r.gflops() / peaks[r.shape.type].gflops * 100 : 0.0;
        res.push_back(o);
    }
    j["results"] = res;
    if (!rep.samples.empty()) {
        Json su = Json::object();
        su["type"] = type_name(sus.type);
        su["m"] = sus.m;
        su["seconds"] = opt.sustain_seconds;
        su["k"] = sus.k;
        su["n"] = sus.n;
        Json sm = Json::array();
        for (const GemmSample& g : rep.samples) {
            Json o = Json::object();
            o["t_start"] = g.t_start;
            o["t_end"] = g.t_end;
            o["gflops"] = g.gflops;
            o["cpu_share"] = g.cpu_share;
            sm.push_back(o);
        }
        su["samples"] = sm;
        su["sag_percent"] = rep.sag_percent;
        j["sustained"] = su;
    } else {
        j["sustained"] = nullptr;
    }
    j["gpu"] = gpu_gemm_json(rep.gpu);
    rep.json = j;
    return rep;
}

}  // namespace ms
