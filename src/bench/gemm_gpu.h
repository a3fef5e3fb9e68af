// `bench gemm` on the GPU: the same Y = X . W^T products through cuBLAS
// (cublasGemmEx in f32, tf32, f16, bf16 and int8), timed with CUDA events,
// next to a peak computed from the device's SM count and clock.
// Built only with MOESTREAM_CUDA (src/bench/gpu/gemm_cublas.cpp); otherwise
// src/bench/gpu/gemm_nocuda.cpp answers "built without CUDA".
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "json/json.h"

namespace ms {

// off: never touch the GPU; auto: measure when a device is there, else say
// why in one line; on: a missing device is an error.
enum class GpuMode { Off, Auto, On };
bool parse_gpu_mode(const std::string& s, GpuMode* m);

// The arithmetic of one product: inputs in the type, accumulation and output
// in fp32 (int8: int32). tf32 is f32 data through the tensor cores' 10-bit
// mantissa.
enum class GpuType { F32, TF32, F16, BF16, I8 };
const char* gpu_type_name(GpuType t);  // "f32", "tf32", "f16", "bf16", "int8"
bool parse_gpu_type(const std::string& s, GpuType* t);

struct GpuDevice {
    std::string name;
    int sm_count = 0, cc_major = 0, cc_minor = 0;
    double clock_mhz = 0;       // the peak SM clock the driver reports
    uint64_t memory_bytes = 0;
    int driver_version = 0, runtime_version = 0;  // 13000 = 13.0
    int cublas_version = 0;                       // 130100 = 13.1.0
    double power_limit_watts = 0;                 // enforced board limit (NVML); 0: unknown
};

// Peak of `t` on `d`: SMs x clock x dense operations per clock per SM of
// the compute capability (table in gemm_gpu.cpp); 0 when the table has no
// rate for it. `how` states the formula.
double gpu_peak_gflops(const GpuDevice& d, GpuType t, std::string* how);

// True in a build with the cuBLAS implementation.
bool gpu_built();

// Loads the CUDA runtime and cuBLAS (at run time: linking them would map
// ~200 MB into every moestream process) and opens device 0. False with `why`:
// "built without CUDA", "cannot load libcublas.so.13: ...", or
// gpu::no_device_reason's "no NVIDIA driver found", "no NVIDIA GPU found".
bool gpu_probe(GpuDevice* dev, std::string* why);

// One product on device 0, for checking: Y[m x n] = X[m x k] . W^T with the
// inputs rounded to `t` (f16/bf16 to nearest even, int8 rounded and clamped
// to [-128, 127]); y gets the fp32 (int8: int32) results as floats. Throws
// std::runtime_error naming the failing CUDA or cuBLAS call.
void gpu_gemm(GpuType t, int64_t m, int64_t k, int64_t n, const float* x, const float* w, float* y);

struct GpuShape {
    std::string label;  // "synthetic", "blk.0.ffn_gate_exps"
    int64_t m = 0, k = 0, n = 0;
    double flops() const { return 2.0 * double(m) * double(k) * double(n); }
};

// What run_gpu_gemm_bench measures: every shape in every type, each after
// warm-up calls for at least min_seconds of GPU time; then, when
// sustain_seconds > 0, one shape back to back, sampled every sample_seconds.
struct GpuGemmPlan {
    std::vector<GpuShape> shapes;
    std::vector<GpuType> types;
    double min_seconds = 1;
    GpuShape sustain;
    GpuType sustain_type = GpuType::BF16;
    double sustain_seconds = 0, sample_seconds = 5;
    // Before each shape (done = shapes timed so far) and after each sample;
    // total = shapes x types, + 1 with a sustained run.
    std::function<void(const std::string&, uint64_t done, uint64_t total)> progress;
};

struct GpuGemmResult {
    GpuShape shape;
    GpuType type = GpuType::F32;
    int64_t iterations = 0;
    double seconds = 0;   // GPU time between CUDA events, warm-up excluded
    double sm_clock_mhz = 0;  // mean over the timed batches (NVML); 0: unknown
    std::string error;    // cuBLAS refused this shape in this type (then no timing)
    double gflops() const { return seconds > 0 ? shape.flops() * double(iterations) / seconds / 1e9 : 0; }
};

struct GpuSample {
    double t_start = 0, t_end = 0;  // wall seconds since the sustained run began
    double gflops = 0;              // over the GPU time of the sample's products
    // Means over the sample's batches (NVML; 0: unknown): a rate that drops
    // with the clock while power sits at the limit is power-capped.
    double sm_clock_mhz = 0, power_watts = 0, temperature_c = 0;
};

struct GpuGemmReport {
    bool measured = false;
    std::string reason;  // why not, when !measured
    GpuDevice device;
    std::vector<GpuGemmResult> results;
    GpuShape sustain;
    GpuType sustain_type = GpuType::BF16;
    std::vector<GpuSample> samples;
    double sag_percent = 0;  // (first sample - last sample) / first sample
};

// Runs the plan on device 0 (gpu_probe must have succeeded). Throws on CUDA
// errors other than a shape cuBLAS does not support.
GpuGemmReport run_gpu_gemm_bench(const GpuGemmPlan& plan);

// The report's terminal text (one line when not measured) and its JSON (the
// "gpu" object of `bench gemm --json`, docs/bench-gemm.md).
std::string gpu_gemm_text(const GpuGemmReport& r);
Json gpu_gemm_json(const GpuGemmReport& r);

}  // namespace ms
