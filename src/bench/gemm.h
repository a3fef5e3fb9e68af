// `bench gemm`: the compute ceiling of this machine through moestream's own
// kernels (ops/linear over quant/dot: activations converted the way each
// weight type wants, rows split over the thread pool), at fixed shapes and at
// a model's expert shapes, next to a theoretical peak; then a sustained run
// sampled every few seconds to show thermal or power sag. With a GPU, the
// same on it through cuBLAS (gemm_gpu.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/fma_peak.h"
#include "bench/gemm_gpu.h"
#include "json/json.h"
#include "ops/thread_pool.h"
#include "quant/types.h"

namespace ms {

// Y[m x n] = X[m x k] . W^T, W being n rows of k elements of `type`.
struct GemmShape {
    std::string label;   // "synthetic", "blk.0.ffn_gate_exps"
    GgmlType type = GgmlType::F32;
    int64_t m = 0, k = 0, n = 0;
    double flops() const { return 2.0 * double(m) * double(k) * double(n); }
};

// Weight types the synthetic shapes can be made in (random values, valid
// scales): F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K,
// IQ4_XS.
bool gemm_synthetic_type_ok(GgmlType t);

// Fills n_rows rows of k elements of type t with random but valid weights
// (finite scales near 0.01); dst holds n_rows * row_bytes(t, k) bytes.
void fill_random_weights(GgmlType t, int64_t k, int64_t n_rows, uint8_t* dst, uint64_t seed);

struct GemmOptions {
    std::vector<int64_t> ms = {512, 1024, 4096};
    int64_t k = 2560, n = 2560;
    std::vector<GgmlType> types = {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0};
    std::string model;     // add this model's expert shapes (its real weights, layer `layer`)
    int layer = 0;
    int threads = 0;       // 0: every CPU
    double min_seconds = 1.0;        // per shape, after one untimed call
    double sustain_seconds = 60;     // 0: no sustained run
    double sample_seconds = 5;
    GgmlType sustain_type = GgmlType::Q8_0;
    int64_t sustain_m = 512;         // small enough that one call is well under a sample
    // The GPU part: the synthetic and model shapes in every gpu_types type,
    // then its own sustained run (same duration and sample length).
    GpuMode gpu = GpuMode::Auto;
    std::vector<GpuType> gpu_types = {GpuType::F32, GpuType::TF32, GpuType::F16, GpuType::BF16, GpuType::I8};
    GpuType gpu_sustain_type = GpuType::BF16;
    int64_t gpu_sustain_m = 4096;    // large enough to keep every SM busy
    uint64_t memory_bytes = uint64_t(1) << 30;  // memory read bound: buffer size (0: skip)
    std::function<void(const std::string&, uint64_t, uint64_t)> progress;
};

// The other bound: how fast the cores can stream memory. A sum of 64-bit
// words over `bytes` (sized far past the caches) split over the pool, the
// way decode streams weights; best of `passes` timed passes after one
// untimed pass, in GB/s.
struct MemoryRead {
    uint64_t bytes = 0;
    int threads = 0;
    std::vector<double> gb_per_s;  // per pass
    // Writing the buffer's fresh pages the first time: what a cold start's
    // resident load and first cache fills pay per byte before any compute
    // (about 0.2 GB/s on a VM whose host hands pages back lazily).
    double first_touch_gb_per_s = 0;
    double best() const;
};
MemoryRead measure_memory_read(ThreadPool& pool, uint64_t bytes, int passes);
// The sum itself, for benchmarks that time it their own way.
uint64_t stream_sum(ThreadPool& pool, const uint8_t* p, uint64_t bytes);

struct GemmResult {
    GemmShape shape;
    int iterations = 0;
    double seconds = 0;
    double cpu_seconds = 0;  // process CPU time meanwhile: shows when other work shared the cores
    double gflops() const { return seconds > 0 ? shape.flops() * iterations / seconds / 1e9 : 0; }
};

struct GemmSample {
    double t_start = 0, t_end = 0;  // seconds since the sustained run began
    double gflops = 0;
    double cpu_share = 0;           // process CPU time / (wall time x threads)
};

// Theoretical peak of this CPU for one arithmetic kind, with the formula.
struct PeakEstimate {
    double gflops = 0;
    std::string how;
};
PeakEstimate theoretical_peak(GgmlType t, int threads);

struct GemmReport {
    std::vector<GemmResult> results;
    std::vector<GemmSample> samples;
    double sag_percent = 0;   // (first sample - last sample) / first sample
    MemoryRead memory;        // bytes == 0: not measured
    std::vector<FmaPeak> fma;  // the measured float ceiling, a level each (fma_peak.h)
    GpuGemmReport gpu;        // gpu.measured false: gpu.reason says why
    std::string text;
    Json json;
};

// Throws with --gpu on (GpuMode::On) when no GPU can be used, before any
// measuring.
GemmReport run_gemm_bench(const GemmOptions& opt);

}  // namespace ms
