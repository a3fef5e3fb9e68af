// The measured float ceiling of the cores: independent chains of fused
// multiply-adds on registers alone (no memory), at each SIMD level this CPU
// has, on every thread of the pool, best of a few short runs. It is the
// FLOP bound of kernels whose arithmetic is FP32 FMAs (decode attention's
// score and value loops), measured rather than assumed: the theoretical
// peak `bench gemm` prints takes the nominal clock and two full-width FMA
// units, which neither turbo nor a CPU that splits 512-bit operations in
// two (some AMD cores) obeys.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ops/thread_pool.h"
#include "quant/cpu.h"

namespace ms {

// Internal to bench/: one ISA unit's loop. Runs `iters` rounds of `chains`
// independent FMA chains of `lanes` floats; returns a value that depends on
// all of them (so the work is not optimized away).
struct FmaKernel {
    float (*run)(int64_t iters);
    int lanes = 0;   // floats a vector
    int chains = 0;  // independent accumulators
};
extern const FmaKernel kFmaAvx2;
extern const FmaKernel kFmaAvx512;

struct FmaPeak {
    SimdLevel level = SimdLevel::Scalar;
    int threads = 0;
    double gflops = 0;          // best run: 2 FLOP an FMA lane
    double per_thread_cycle = 0;  // gflops / (threads x nominal GHz): FLOP a cycle a thread
    std::vector<double> runs;   // every run's GFLOP/s
};

// One result per SIMD level above scalar that this CPU runs (never an
// instruction it lacks), each the best of `repeats` runs of about
// `seconds` on every pool thread.
std::vector<FmaPeak> measure_fma_peaks(ThreadPool& pool, int repeats = 5, double seconds = 0.1);

}  // namespace ms
