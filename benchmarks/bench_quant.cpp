// Kernel throughput of quant/: matvec in GB/s of weight bytes (cold: rotating
// over 1 GiB of weights so every byte comes from DRAM; hot: one matrix that
// stays in L2), matmul in GFLOP/s for prefill-sized token batches, per weight
// type and SIMD level, single thread. The same program measures plain DRAM
// read and copy bandwidth, the bound the cold matvec figures compare to.
//
//   build-*/bench_quant --benchmark_filter='matvec/Q4_K'
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "quant/cpu.h"
#include "quant/dot.h"
#include "quant/half.h"

namespace ms {
namespace {

constexpr size_t kColdBytes = size_t(1) << 30;

struct XorShift {
    uint64_t s = 0x9E3779B97F4A7C15ull;
    uint64_t next() { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; }
    float unit() { return float(next() >> 40) / float(1 << 24) - 0.5f; }
};

void* aligned(size_t n) {
    void* p = std::aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) std::abort();
    return p;
}

// Where each block type keeps its fp16 scales (byte offsets within a block):
// random bytes elsewhere are all legal quants; scales must be finite.
std::vector<int> scale_offsets(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS: return {0};
        case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K: return {0, 2};
        case GgmlType::Q2_K: return {80, 82};
        case GgmlType::Q3_K: return {108};
        case GgmlType::Q6_K: return {208};
        default: return {};
    }
}

// One valid random matrix of `bytes` bytes.
void fill_weights(GgmlType t, uint8_t* p, size_t bytes) {
    XorShift r;
    const TypeTraits& tr = type_traits(t);
    if (tr.block_size == 1) {
        for (size_t i = 0; i + tr.type_size <= bytes; i += tr.type_size) {
            float f = r.unit();
            if (t == GgmlType::F32) std::memcpy(p + i, &f, 4);
            uint16_t h = t == GgmlType::F16 ? fp32_to_fp16(f) : fp32_to_bf16(f);
            if (t != GgmlType::F32) std::memcpy(p + i, &h, 2);
        }
        return;
    }
    for (size_t i = 0; i < bytes; i += 8) {
        uint64_t v = r.next();
        std::memcpy(p + i, &v, std::min<size_t>(8, bytes - i));
    }
    std::vector<int> offs = scale_offsets(t);
    for (size_t b = 0; b + tr.type_size <= bytes; b += tr.type_size) {
        for (int o : offs) {
            uint16_t h = fp32_to_fp16(r.unit() * 0.01f);
            std::memcpy(p + b + size_t(o), &h, 2);
        }
        if (t == GgmlType::MXFP4) p[b] = uint8_t(120 + r.next() % 8);
    }
}

struct Acts {
    void* data = nullptr;
    explicit Acts(GgmlType t, int64_t n, int64_t n_tok) {
        std::vector<float> x(size_t(n * n_tok));
        XorShift r;
        for (auto& f : x) f = r.unit();
        data = aligned(act_bytes(t, n) * size_t(n_tok));
        quantize_acts(t, x.data(), data, n, n_tok);
    }
    ~Acts() { std::free(data); }
};

// Matvec over rows x n; cold rotates over copies filling kColdBytes.
void bm_matvec(benchmark::State& st, GgmlType t, SimdLevel level, int64_t rows, int64_t n, bool cold) {
    if (set_simd_level(level) != level) { st.SkipWithError("level not available"); return; }
    const size_t mbytes = row_bytes(t, n) * size_t(rows);
    const size_t copies = cold ? std::max<size_t>(1, kColdBytes / mbytes) : 1;
    uint8_t* W = static_cast<uint8_t*>(aligned(mbytes * copies));
    fill_weights(t, W, mbytes);
    for (size_t c = 1; c < copies; ++c) std::memcpy(W + c * mbytes, W, mbytes);
    Acts a(t, n, 1);
    std::vector<float> y(static_cast<size_t>(rows));
    size_t c = 0;
    for (auto _ : st) {
        matvec(t, W + c * mbytes, a.data, y.data(), n, 0, rows);
        benchmark::DoNotOptimize(y.data());
        c = c + 1 == copies ? 0 : c + 1;
    }
    st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(mbytes));
    st.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(rows * n) * double(st.iterations()) / 1e9,
                                                benchmark::Counter::kIsRate);
    std::free(W);
    set_simd_level(best_simd_level());
}

void bm_matmul(benchmark::State& st, GgmlType t, SimdLevel level, int64_t rows, int64_t n, int64_t n_tok) {
    if (set_simd_level(level) != level) { st.SkipWithError("level not available"); return; }
    const size_t mbytes = row_bytes(t, n) * size_t(rows);
    uint8_t* W = static_cast<uint8_t*>(aligned(mbytes));
    fill_weights(t, W, mbytes);
    Acts a(t, n, n_tok);
    std::vector<float> Y(size_t(rows * n_tok));
    for (auto _ : st) {
        matmul(t, W, rows, a.data, n_tok, Y.data(), n, 0, rows);
        benchmark::DoNotOptimize(Y.data());
    }
    st.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(rows * n * n_tok) * double(st.iterations()) / 1e9,
                                                benchmark::Counter::kIsRate);
    std::free(W);
    set_simd_level(best_simd_level());
}

void bm_quantize_act(benchmark::State& st, GgmlType t, int64_t n) {
    std::vector<float> x(static_cast<size_t>(n));
    XorShift r;
    for (auto& f : x) f = r.unit();
    void* dst = aligned(act_bytes(t, n));
    for (auto _ : st) {
        quantize_act(t, x.data(), dst, n);
        benchmark::DoNotOptimize(dst);
    }
    st.SetBytesProcessed(int64_t(st.iterations()) * n * 4);
    std::free(dst);
}

// DRAM bounds over 1 GiB: a streaming read (glibc's vectorized memchr for a
// byte that is not there) and memcpy.
void bm_mem_read(benchmark::State& st) {
    uint8_t* p = static_cast<uint8_t*>(aligned(kColdBytes));
    std::memset(p, 1, kColdBytes);
    for (auto _ : st) benchmark::DoNotOptimize(std::memchr(p, 2, kColdBytes));
    st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(kColdBytes));
    std::free(p);
}

void bm_memcpy(benchmark::State& st) {
    const size_t half = kColdBytes / 2;
    uint8_t* p = static_cast<uint8_t*>(aligned(kColdBytes));
    std::memset(p, 1, kColdBytes);
    for (auto _ : st) {
        std::memcpy(p + half, p, half);
        benchmark::ClobberMemory();
    }
    st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(half));  // bytes read (as many written)
    std::free(p);
}

void register_all() {
    const GgmlType types[] = {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::MXFP4, GgmlType::Q5_K,
                              GgmlType::Q4_0, GgmlType::IQ4_XS, GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::F16,
                              GgmlType::BF16, GgmlType::F32};
    const SimdLevel levels[] = {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512};
    benchmark::RegisterBenchmark("mem/read", bm_mem_read)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("mem/memcpy", bm_memcpy)->Unit(benchmark::kMillisecond);
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K})
        benchmark::RegisterBenchmark((std::string("quantize_act/") + act_type_name(act_type(t)) + "/2048").c_str(),
                                     bm_quantize_act, t, int64_t(2048));
    for (GgmlType t : types) {
        for (SimdLevel l : levels) {
            if (int(l) > int(best_simd_level())) continue;
            std::string base = std::string(type_name(t)) + "/" + simd_level_name(l);
            // An expert's gate/up projection (768 x 2048) and a 4096-row projection.
            benchmark::RegisterBenchmark(("matvec/" + base + "/768x2048/cold").c_str(), bm_matvec, t, l, 768, 2048, true);
            benchmark::RegisterBenchmark(("matvec/" + base + "/768x2048/hot").c_str(), bm_matvec, t, l, 768, 2048, false);
            benchmark::RegisterBenchmark(("matvec/" + base + "/4096x2048/cold").c_str(), bm_matvec, t, l, 4096, 2048, true);
            if (l == SimdLevel::Scalar) continue;  // scalar matmul is only the reference
            // Prefill: an expert's gate/up projection over the few tokens routed
            // to it (8; 13, which leaves a remainder after whole tiles) and over
            // long chunks, and its down projection (2048 x 768).
            for (int64_t nt : {8, 13, 64, 512})
                benchmark::RegisterBenchmark(("matmul/" + base + "/768x2048/tok" + std::to_string(nt)).c_str(),
                                             bm_matmul, t, l, 768, 2048, nt)->Unit(benchmark::kMillisecond);
            benchmark::RegisterBenchmark(("matmul/" + base + "/2048x768/tok32").c_str(), bm_matmul, t, l, 2048, 768,
                                         int64_t(32))->Unit(benchmark::kMillisecond);
        }
    }
}

}  // namespace
}  // namespace ms

int main(int argc, char** argv) {
    ms::register_all();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
