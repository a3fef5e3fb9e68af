// bench/fma_peak.h: the FMA loop of each level on every pool thread, timed.
#include "bench/fma_peak.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "telemetry/system.h"

namespace ms {

namespace {

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// GFLOP/s of `iters` rounds a thread, over the whole pool: the work is cut
// into 16 chunks a thread, claimed as threads come free, so a thread that
// wakes late does not leave the others' share to one core.
double timed_run(ThreadPool& pool, const FmaKernel& k, int64_t iters) {
    constexpr int kChunks = 16;
    const int64_t per_chunk = std::max<int64_t>(1, iters / kChunks);
    std::atomic<float> sink{0};
    const double t0 = now_s();
    pool.parallel_for(int64_t(pool.size()) * kChunks, [&](int64_t b, int64_t e, int) {
        float s = 0;
        for (int64_t i = b; i < e; i++) s += k.run(per_chunk);
        sink.store(sink.load() + s);
    });
    const double dt = now_s() - t0;
    const double flop = 2.0 * double(k.lanes) * double(k.chains) * double(per_chunk) * kChunks * double(pool.size());
    return dt > 0 ? flop / dt / 1e9 : 0.0;
}

}  // namespace

std::vector<FmaPeak> measure_fma_peaks(ThreadPool& pool, int repeats, double seconds) {
    std::vector<FmaPeak> out;
    const SimdLevel best = best_simd_level();
    const double ghz = cpu_mhz() / 1000.0;
    for (SimdLevel lvl : {SimdLevel::Avx2, SimdLevel::Avx512}) {
        if (lvl > best) break;  // never an instruction the CPU lacks
        const FmaKernel& k = lvl == SimdLevel::Avx2 ? kFmaAvx2 : kFmaAvx512;
        // Size the runs: one short calibration, then iterations for `seconds`.
        int64_t iters = 1 << 16;
        double g = timed_run(pool, k, iters);
        if (g > 0) {
            const double flop_a_thread = g * 1e9 * seconds / double(pool.size());
            iters = std::max<int64_t>(iters, int64_t(flop_a_thread / (2.0 * k.lanes * k.chains)));
        }
        FmaPeak p;
        p.level = lvl;
        p.threads = pool.size();
        for (int r = 0; r < std::max(1, repeats); r++) {
            p.runs.push_back(timed_run(pool, k, iters));
            p.gflops = std::max(p.gflops, p.runs.back());
        }
        p.per_thread_cycle = ghz > 0 ? p.gflops / (double(p.threads) * ghz) : 0.0;
        out.push_back(p);
    }
    return out;
}

}  // namespace ms
