// bench gemm: synthetic weights are valid for the kernels (finite when
// dequantized, the float types faithful to their source), and a small run
// times every shape, samples the sustained run and reports consistently.
#include "bench/gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "ops/buffer.h"
#include "quant/cpu.h"
#include "quant/dequant.h"
#include "quant/types.h"

namespace {

using ms::GgmlType;

TEST(GemmWeights, EverySyntheticTypeDequantizesToFiniteValues) {
    const int64_t k = 512, rows = 3;
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                       GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K,
                       GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS}) {
        ASSERT_TRUE(ms::gemm_synthetic_type_ok(t)) << ms::type_name(t);
        std::vector<uint8_t> w(ms::row_bytes(t, k) * rows);
        ms::fill_random_weights(t, k, rows, w.data(), 5);
        std::vector<float> x(static_cast<size_t>(k));
        double max_abs = 0;
        for (int64_t r = 0; r < rows; ++r) {
            ASSERT_TRUE(ms::dequantize_row(t, w.data() + size_t(r) * ms::row_bytes(t, k), x.data(), k))
                << ms::type_name(t);
            for (float v : x) {
                ASSERT_TRUE(std::isfinite(v)) << ms::type_name(t);
                max_abs = std::max(max_abs, double(std::fabs(v)));
            }
        }
        // Scales near 0.01 times quantized levels and sub-scales (at most
        // 63 x 127 for IQ4_XS),
        // or N(0, 0.02) floats: nothing near overflow, not all zero.
        EXPECT_GT(max_abs, 0.0) << ms::type_name(t);
        EXPECT_LT(max_abs, 100.0) << ms::type_name(t);
    }
    EXPECT_FALSE(ms::gemm_synthetic_type_ok(GgmlType::Q8_K));
}

TEST(GemmWeights, SameSeedSameWeights) {
    std::vector<uint8_t> a(ms::row_bytes(GgmlType::Q4_K, 256) * 4), b(a.size()), c(a.size());
    ms::fill_random_weights(GgmlType::Q4_K, 256, 4, a.data(), 1);
    ms::fill_random_weights(GgmlType::Q4_K, 256, 4, b.data(), 1);
    ms::fill_random_weights(GgmlType::Q4_K, 256, 4, c.data(), 2);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
}

TEST(GemmBench, SmallRunTimesShapesAndSamples) {
    ms::GemmOptions o;
    o.ms = {1, 8};
    o.k = 256;
    o.n = 64;
    o.types = {GgmlType::F32, GgmlType::Q4_K};
    o.threads = 2;
    o.min_seconds = 0.01;
    o.sustain_seconds = 0.3;
    o.sample_seconds = 0.1;
    o.sustain_type = GgmlType::Q8_0;
    o.sustain_m = 4;
    o.gpu = ms::GpuMode::Off;  // the GPU part has its own tests (gemm_gpu_test.cpp)
    o.memory_bytes = 8 << 20;
    ms::GemmReport r = ms::run_gemm_bench(o);
    EXPECT_EQ(r.memory.bytes, 8u << 20);
    ASSERT_EQ(r.memory.gb_per_s.size(), 5u);
    for (double g : r.memory.gb_per_s) EXPECT_GT(g, 0.0);
    ASSERT_EQ(r.results.size(), 4u);
    EXPECT_EQ(r.results[3].shape.type, GgmlType::Q4_K);
    EXPECT_EQ(r.results[3].shape.m, 8);
    for (const ms::GemmResult& x : r.results) {
        EXPECT_GE(x.iterations, 1);
        EXPECT_GE(x.seconds, 0.01);
        EXPECT_DOUBLE_EQ(x.shape.flops(), 2.0 * double(x.shape.m) * 256 * 64);
        EXPECT_GT(x.gflops(), 0.0);
    }
    ASSERT_GE(r.samples.size(), 2u);
    EXPECT_NEAR(r.samples.back().t_end, 0.3, 0.25);
    for (size_t i = 1; i < r.samples.size(); ++i) EXPECT_DOUBLE_EQ(r.samples[i].t_start, r.samples[i - 1].t_end);
    double sag = (r.samples.front().gflops - r.samples.back().gflops) / r.samples.front().gflops * 100;
    EXPECT_NEAR(r.sag_percent, sag, 1e-9);
    ms::Json j = ms::Json::parse(r.json.dump());
    EXPECT_EQ(j.at("results").size(), 4u);
    EXPECT_TRUE(j.at("theoretical_peak").contains("Q4_K"));
    EXPECT_FALSE(j.at("gpu").at("available").as_bool());
    EXPECT_EQ(j.at("gpu").at("reason").as_string(), "--gpu off");
    EXPECT_DOUBLE_EQ(j.at("memory_read").at("gb_per_s").as_number(), r.memory.best());
    EXPECT_GT(r.memory.first_touch_gb_per_s, 0);
    EXPECT_DOUBLE_EQ(j.at("memory_read").at("first_touch_gb_per_s").as_number(), r.memory.first_touch_gb_per_s);
}

// The memory read figure is only as good as the sum behind it: every word
// is read exactly once whatever the thread count and the split.
TEST(GemmBench, StreamSumReadsEveryWordOnce) {
    const uint64_t bytes = (uint64_t(3) << 20) + 8 * 37;  // not a multiple of the chunking
    ms::AlignedBuffer buf(bytes);
    uint64_t* w = reinterpret_cast<uint64_t*>(buf.data());
    uint64_t expect = 0;
    for (uint64_t i = 0; i < bytes / 8; i++) {
        w[i] = i * 2654435761u;
        expect += w[i];
    }
    for (int threads : {1, 2, 3}) {
        ms::ThreadPool pool(threads);
        EXPECT_EQ(ms::stream_sum(pool, buf.data(), bytes), expect) << threads;
    }
}

TEST(GemmBench, PeakFormulaIsStated) {
    ms::PeakEstimate p = ms::theoretical_peak(GgmlType::F32, 1);
    EXPECT_GT(p.gflops, 0.0);
    EXPECT_NE(p.how.find("1 cores"), std::string::npos) << p.how;
    EXPECT_NE(p.how.find("GHz"), std::string::npos);
    // Integer dot products are never rated below float FMAs on the same core.
    EXPECT_GE(ms::theoretical_peak(GgmlType::Q8_0, 1).gflops, p.gflops);
}

TEST(GemmBench, RejectsUnusableShapes) {
    ms::GemmOptions o;
    o.ms = {1};
    o.k = 100;  // not a multiple of Q8_0's 32
    o.n = 8;
    o.types = {GgmlType::Q8_0};
    o.sustain_seconds = 0;
    EXPECT_THROW(ms::run_gemm_bench(o), std::runtime_error);
    o.types = {GgmlType::Q8_K};
    o.k = 256;
    EXPECT_THROW(ms::run_gemm_bench(o), std::runtime_error);
}

// The FMA loops do the arithmetic they are counted for: `chains` chains of
// `lanes` floats, each v = fma(v, 0.999999, 1e-7) from 1 + 0.01 i, summed
// chain by chain and then lane by lane; std::fma rounds once, as the
// instruction does, so the bits agree. Dropping or merging a chain fails.
float fma_reference(int lanes, int chains, int64_t iters) {
    float lane_sum = 0;
    for (int i = 0; i < chains; i++) {
        float v = 1.0f + 0.01f * float(i);
        for (int64_t it = 0; it < iters; it++) v = std::fma(v, 0.999999f, 1e-7f);
        lane_sum = i == 0 ? v : lane_sum + v;
    }
    float r = 0;
    for (int l = 0; l < lanes; l++) r += lane_sum;
    return r;
}

TEST(FmaPeak, LoopsComputeWhatTheyCount) {
    const ms::SimdLevel best = ms::best_simd_level();
    if (best < ms::SimdLevel::Avx2) GTEST_SKIP() << "no AVX2 on this CPU";
    for (const ms::FmaKernel* k : {&ms::kFmaAvx2, &ms::kFmaAvx512}) {
        if (k == &ms::kFmaAvx512 && best < ms::SimdLevel::Avx512) continue;
        EXPECT_EQ(k->chains, 12);
        for (int64_t iters : {int64_t(1), int64_t(777)})
            EXPECT_EQ(k->run(iters), fma_reference(k->lanes, k->chains, iters)) << k->lanes << " lanes, " << iters;
    }
}

TEST(FmaPeak, OneResultPerLevelTheCpuRuns) {
    ms::ThreadPool pool(2);
    const std::vector<ms::FmaPeak> peaks = ms::measure_fma_peaks(pool, 3, 0.01);
    const ms::SimdLevel best = ms::best_simd_level();
    const size_t levels = best == ms::SimdLevel::Avx512 ? 2 : best == ms::SimdLevel::Avx2 ? 1 : 0;
    ASSERT_EQ(peaks.size(), levels);
    for (const ms::FmaPeak& p : peaks) {
        EXPECT_EQ(p.threads, 2);
        ASSERT_EQ(p.runs.size(), 3u);
        EXPECT_GT(p.gflops, 0.0);
        EXPECT_DOUBLE_EQ(p.gflops, *std::max_element(p.runs.begin(), p.runs.end()));
    }
    if (levels >= 1) {
        EXPECT_EQ(peaks[0].level, ms::SimdLevel::Avx2);
    }
    if (levels == 2) {
        EXPECT_EQ(peaks[1].level, ms::SimdLevel::Avx512);
    }
}

}  // namespace
