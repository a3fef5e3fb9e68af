// The CUDA-free half of `bench gemm` on the GPU: names, the peak table, and
// the report's text and JSON. The measuring is in gpu/gemm_cublas.cpp.
#include "bench/gemm_gpu.h"

#include "bench/table.h"

namespace ms {

namespace {

const char* kTypeNames[] = {"f32", "tf32", "f16", "bf16", "int8"};
const GpuType kTypes[] = {GpuType::F32, GpuType::TF32, GpuType::F16, GpuType::BF16, GpuType::I8};

// Dense operations per clock per SM (no 2:4 sparsity), from NVIDIA's A100
// and H100 architecture papers: f32 on the CUDA cores (2 per FMA), the rest
// on the tensor cores. Check: H100 SXM 989 TFLOP/s bf16 = 132 SMs x 1.83 GHz
// x 4096; A100 312 = 108 x 1.41 x 2048.
struct SmRates {
    int major, minor;
    double per_clock[5];  // in kTypes order
    const char* basis;
};
const SmRates kSmRates[] = {
    {8, 0, {128, 1024, 2048, 2048, 4096},
     "A100: 64 fp32 FMA/clock; 4 tensor cores x 256 fp16 FMA/clock, tf32 half that, int8 twice"},
    {9, 0, {256, 2048, 4096, 4096, 8192},
     "H100/H200: 128 fp32 FMA/clock; 4 tensor cores x 512 fp16/bf16 FMA/clock, tf32 half that, int8 twice"},
};

Json device_json(const GpuDevice& d) {
    Json o = Json::object();
    o["name"] = d.name;
    o["sm_count"] = d.sm_count;
    o["compute_capability"] = strf("%d.%d", d.cc_major, d.cc_minor);
    o["clock_mhz"] = d.clock_mhz;
    o["memory_bytes"] = d.memory_bytes;
    o["driver_version"] = d.driver_version;
    o["runtime_version"] = d.runtime_version;
    o["cublas_version"] = d.cublas_version;
    o["power_limit_watts"] = d.power_limit_watts > 0 ? Json(d.power_limit_watts) : Json(nullptr);
    return o;
}

std::string version_label(int v) { return strf("%d.%d", v / 1000, v % 1000 / 10); }

// NVML readings are optional: "-" and null when unknown.
std::string reading(double v, const char* fmt) { return v > 0 ? strf(fmt, v) : "-"; }
Json reading(double v) { return v > 0 ? Json(v) : Json(nullptr); }

}  // namespace

bool parse_gpu_mode(const std::string& s, GpuMode* m) {
    if (s == "off") *m = GpuMode::Off;
    else if (s == "auto") *m = GpuMode::Auto;
    else if (s == "on") *m = GpuMode::On;
    else return false;
    return true;
}

const char* gpu_type_name(GpuType t) { return kTypeNames[int(t)]; }

bool parse_gpu_type(const std::string& s, GpuType* t) {
    for (GpuType x : kTypes)
        if (s == kTypeNames[int(x)]) {
            *t = x;
            return true;
        }
    return false;
}

double gpu_peak_gflops(const GpuDevice& d, GpuType t, std::string* how) {
    for (const SmRates& r : kSmRates) {
        if (r.major != d.cc_major || r.minor != d.cc_minor) continue;
        double per_clock = r.per_clock[int(t)];
        if (how)
            *how = strf("%d SMs x %.3f GHz x %.0f %s/clock/SM (cc %d.%d, %s); clock = the peak SM clock the "
                        "driver reports, which sustained load may not hold",
                        d.sm_count, d.clock_mhz / 1000, per_clock, t == GpuType::I8 ? "int8 ops" : "FLOP",
                        d.cc_major, d.cc_minor, r.basis);
        return d.sm_count * d.clock_mhz / 1000 * per_clock;
    }
    if (how) *how = strf("no per-SM rate known for compute capability %d.%d", d.cc_major, d.cc_minor);
    return 0;
}

std::string gpu_gemm_text(const GpuGemmReport& r) {
    if (!r.measured) return "GPU (cuBLAS): not measured: " + r.reason + "\n";
    const GpuDevice& d = r.device;
    std::string t = strf("\nGPU (cuBLAS): %s, %d SMs, compute capability %d.%d, %.0f MHz, %s, power limit %s W; "
                         "driver %s, runtime %s, cuBLAS %d.%d.%d\n",
                         d.name.c_str(), d.sm_count, d.cc_major, d.cc_minor, d.clock_mhz,
                         size_label(d.memory_bytes).c_str(), reading(d.power_limit_watts, "%.0f").c_str(),
                         version_label(d.driver_version).c_str(),
                         version_label(d.runtime_version).c_str(), d.cublas_version / 10000,
                         d.cublas_version / 100 % 100, d.cublas_version % 100);
    t += "Y = X . W^T through cublasGemmEx: inputs in the type, fp32 accumulation and output (int8: int32), "
         "device-resident data, GPU time between CUDA events after warm-up; SM MHz: mean clock meanwhile (NVML)\n\n";
    Table tb;
    tb.left_columns = 2;
    tb.header = {"weights", "type", "M", "K", "N", "ms/call", "GFLOP/s", "% of peak", "SM MHz"};
    std::string errors;
    for (const GpuGemmResult& x : r.results) {
        double peak = gpu_peak_gflops(d, x.type, nullptr);
        bool ok = x.error.empty();
        tb.add({x.shape.label, gpu_type_name(x.type), std::to_string(x.shape.m), std::to_string(x.shape.k),
                std::to_string(x.shape.n), ok ? strf("%.4f", x.seconds / double(x.iterations) * 1e3) : "-",
                ok ? strf("%.1f", x.gflops()) : "-", ok && peak > 0 ? strf("%.1f", x.gflops() / peak * 100) : "-",
                reading(x.sm_clock_mhz, "%.0f")});
        if (!ok)
            errors += strf("  %s %s M=%lld: %s\n", x.shape.label.c_str(), gpu_type_name(x.type), (long long)x.shape.m,
                           x.error.c_str());
    }
    t += tb.text();
    if (!errors.empty()) t += "not measured:\n" + errors;
    t += "\nGPU theoretical peaks:\n";
    for (GpuType ty : kTypes) {
        std::string how;
        double g = gpu_peak_gflops(d, ty, &how);
        t += strf("  %-5s %10.1f GFLOP/s = %s\n", gpu_type_name(ty), g, how.c_str());
    }
    if (!r.samples.empty()) {
        const GpuShape& s = r.sustain;
        t += strf("\nGPU sustained: %s M=%lld K=%lld N=%lld, %.0f s to %.0f s, one sample per %.0f s\n",
                  gpu_type_name(r.sustain_type), (long long)s.m, (long long)s.k, (long long)s.n,
                  r.samples.front().t_start, r.samples.back().t_end, r.samples.front().t_end - r.samples.front().t_start);
        Table st;
        st.left_columns = 0;
        st.header = {"from s", "to s", "GFLOP/s", "% of peak", "SM MHz", "W", "C"};
        double peak = gpu_peak_gflops(d, r.sustain_type, nullptr);
        for (const GpuSample& g : r.samples)
            st.add({strf("%.1f", g.t_start), strf("%.1f", g.t_end), strf("%.1f", g.gflops),
                    peak > 0 ? strf("%.1f", g.gflops / peak * 100) : "-", reading(g.sm_clock_mhz, "%.0f"),
                    reading(g.power_watts, "%.0f"), reading(g.temperature_c, "%.0f")});
        t += st.text();
        t += strf("GPU sag over the run: %.2f%% (first sample to last; negative = got faster)\n", r.sag_percent);
    }
    return t;
}

Json gpu_gemm_json(const GpuGemmReport& r) {
    Json g = Json::object();
    g["available"] = r.measured;
    g["reason"] = r.measured ? Json(nullptr) : Json(r.reason);
    if (!r.measured) return g;
    const GpuDevice& d = r.device;
    g["device"] = device_json(d);
    Json pk = Json::object();
    for (GpuType ty : kTypes) {
        Json o = Json::object();
        std::string how;
        o["gflops"] = gpu_peak_gflops(d, ty, &how);
        o["how"] = how;
        pk[gpu_type_name(ty)] = o;
    }
    g["theoretical_peak"] = pk;
    Json res = Json::array();
    for (const GpuGemmResult& x : r.results) {
        Json o = Json::object();
        o["weights"] = x.shape.label;
        o["type"] = gpu_type_name(x.type);
        o["m"] = x.shape.m;
        o["k"] = x.shape.k;
        o["n"] = x.shape.n;
        o["iterations"] = x.iterations;
        o["seconds"] = x.seconds;
        o["gflops"] = x.gflops();
        double peak = gpu_peak_gflops(d, x.type, nullptr);
        o["percent_of_peak"] = peak > 0 && x.error.empty() ? Json(x.gflops() / peak * 100) : Json(nullptr);
        o["sm_clock_mhz"] = reading(x.sm_clock_mhz);
        o["error"] = x.error.empty() ? Json(nullptr) : Json(x.error);
        res.push_back(o);
    }
    g["results"] = res;
    if (r.samples.empty()) {
        g["sustained"] = nullptr;
        return g;
    }
    Json su = Json::object();
    su["type"] = gpu_type_name(r.sustain_type);
    su["m"] = r.sustain.m;
    su["k"] = r.sustain.k;
    su["n"] = r.sustain.n;
    su["seconds"] = r.samples.back().t_end;
    Json sm = Json::array();
    for (const GpuSample& s : r.samples) {
        Json o = Json::object();
        o["t_start"] = s.t_start;
        o["t_end"] = s.t_end;
        o["gflops"] = s.gflops;
        o["sm_clock_mhz"] = reading(s.sm_clock_mhz);
        o["power_watts"] = reading(s.power_watts);
        o["temperature_c"] = reading(s.temperature_c);
        sm.push_back(o);
    }
    su["samples"] = sm;
    su["sag_percent"] = r.sag_percent;
    g["sustained"] = su;
    return g;
}

}  // namespace ms
