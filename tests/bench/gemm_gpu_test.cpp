// bench gemm on the GPU: the peak formula against NVIDIA's published
// figures; without a usable GPU (CI, or a CUDA build on a machine without
// one) one line says why and the JSON stays valid; with one, every type's
// product matches a CPU reference and a small run times every type and
// samples the sustained run.
#include "bench/gemm_gpu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "bench/gemm.h"
#include "quant/half.h"

namespace {

using ms::GpuType;

const GpuType kAllTypes[] = {GpuType::F32, GpuType::TF32, GpuType::F16, GpuType::BF16, GpuType::I8};

bool have_gpu(std::string* why) {
    ms::GpuDevice d;
    return ms::gpu_probe(&d, why);
}

ms::GemmOptions tiny_cpu_run() {
    ms::GemmOptions o;
    o.ms = {8};
    o.k = 256;
    o.n = 64;
    o.types = {ms::GgmlType::F32};
    o.threads = 1;
    o.min_seconds = 0.01;
    o.sustain_seconds = 0;
    return o;
}

// The lines of `text` that start with `prefix`.
std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i < text.size()) {
        size_t end = text.find('\n', i);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(i, end - i);
        if (line.rfind(prefix, 0) == 0) out.push_back(line);
        i = end + 1;
    }
    return out;
}

ms::GpuDevice device(int sms, int major, int minor, double mhz) {
    ms::GpuDevice d;
    d.sm_count = sms;
    d.cc_major = major;
    d.cc_minor = minor;
    d.clock_mhz = mhz;
    return d;
}

TEST(GpuPeak, MatchesNvidiaDatasheetsAtTheirClocks) {
    // H100 SXM (the H200's chip): 132 SMs; tensor figures at 1830 MHz
    // (989.4 TFLOP/s bf16 and f16, 494.7 tf32, 1978.9 int8 TOPS, dense),
    // fp32 67 TFLOP/s at 1980 MHz.
    ms::GpuDevice h = device(132, 9, 0, 1830);
    EXPECT_NEAR(ms::gpu_peak_gflops(h, GpuType::BF16, nullptr), 989.4e3, 0.5e3);
    EXPECT_NEAR(ms::gpu_peak_gflops(h, GpuType::F16, nullptr), 989.4e3, 0.5e3);
    EXPECT_NEAR(ms::gpu_peak_gflops(h, GpuType::TF32, nullptr), 494.7e3, 0.5e3);
    EXPECT_NEAR(ms::gpu_peak_gflops(h, GpuType::I8, nullptr), 1978.9e3, 1e3);
    EXPECT_NEAR(ms::gpu_peak_gflops(device(132, 9, 0, 1980), GpuType::F32, nullptr), 66.9e3, 0.1e3);
    // A100 SXM: 108 SMs at 1410 MHz: 19.5 fp32, 156 tf32, 312 bf16, 624 int8.
    ms::GpuDevice a = device(108, 8, 0, 1410);
    EXPECT_NEAR(ms::gpu_peak_gflops(a, GpuType::F32, nullptr), 19.5e3, 0.1e3);
    EXPECT_NEAR(ms::gpu_peak_gflops(a, GpuType::TF32, nullptr), 156e3, 0.5e3);
    EXPECT_NEAR(ms::gpu_peak_gflops(a, GpuType::BF16, nullptr), 312e3, 0.5e3);
    EXPECT_NEAR(ms::gpu_peak_gflops(a, GpuType::I8, nullptr), 624e3, 1e3);
}

TEST(GpuPeak, FormulaIsStatedAndUnknownChipsHaveNone) {
    std::string how;
    ms::gpu_peak_gflops(device(132, 9, 0, 1980), GpuType::BF16, &how);
    EXPECT_NE(how.find("132 SMs x 1.980 GHz x 4096 FLOP/clock/SM"), std::string::npos) << how;
    EXPECT_EQ(ms::gpu_peak_gflops(device(40, 7, 5, 1590), GpuType::BF16, &how), 0.0);
    EXPECT_NE(how.find("no per-SM rate known for compute capability 7.5"), std::string::npos) << how;
}

TEST(GpuNames, RoundTrip) {
    for (GpuType t : kAllTypes) {
        GpuType back;
        ASSERT_TRUE(ms::parse_gpu_type(ms::gpu_type_name(t), &back));
        EXPECT_EQ(back, t);
    }
    GpuType t;
    EXPECT_FALSE(ms::parse_gpu_type("q8_0", &t));
    ms::GpuMode m;
    EXPECT_TRUE(ms::parse_gpu_mode("auto", &m) && m == ms::GpuMode::Auto);
    EXPECT_TRUE(ms::parse_gpu_mode("on", &m) && m == ms::GpuMode::On);
    EXPECT_TRUE(ms::parse_gpu_mode("off", &m) && m == ms::GpuMode::Off);
    EXPECT_FALSE(ms::parse_gpu_mode("yes", &m));
}

TEST(GpuBench, OffLeavesTheGpuAlone) {
    ms::GemmOptions o = tiny_cpu_run();
    o.gpu = ms::GpuMode::Off;
    ms::GemmReport r = ms::run_gemm_bench(o);
    EXPECT_FALSE(r.gpu.measured);
    EXPECT_EQ(lines_starting(r.text, "GPU"), std::vector<std::string>{"GPU (cuBLAS): not measured: --gpu off"});
    ms::Json j = ms::Json::parse(r.json.dump());
    EXPECT_FALSE(j.at("gpu").at("available").as_bool());
    EXPECT_EQ(j.at("gpu").at("reason").as_string(), "--gpu off");
    EXPECT_EQ(j.at("settings").at("gpu").as_string(), "off");
}

TEST(GpuBench, WithoutAGpuOneLineSaysWhyAndTheCpuResultsStand) {
    std::string why;
    if (have_gpu(&why)) GTEST_SKIP() << "a CUDA device is present: the no-GPU path cannot be reached here";
    if (!ms::gpu_built()) {
        EXPECT_EQ(why, "built without CUDA");
    } else {
        // A CUDA build here: the libraries load and no driver or device
        // answers (in gpu::no_device_reason's words, never CUDA's "driver
        // version is insufficient"), or they are missing.
        EXPECT_TRUE(why == "no NVIDIA driver found" || why == "no NVIDIA GPU found" ||
                    why.rfind("the NVIDIA driver supports CUDA ", 0) == 0 || why.rfind("cannot load lib", 0) == 0)
            << why;
    }
    ms::GemmOptions o = tiny_cpu_run();
    ms::GemmReport r = ms::run_gemm_bench(o);
    ASSERT_EQ(r.results.size(), 1u);
    EXPECT_GT(r.results[0].gflops(), 0.0);
    EXPECT_EQ(lines_starting(r.text, "GPU"), std::vector<std::string>{"GPU (cuBLAS): not measured: " + why});
    ms::Json j = ms::Json::parse(r.json.dump());
    const ms::Json& g = j.at("gpu");
    EXPECT_FALSE(g.at("available").as_bool());
    EXPECT_EQ(g.at("reason").as_string(), why);
    EXPECT_FALSE(g.contains("results"));
    EXPECT_EQ(j.at("results").size(), 1u);

    o.gpu = ms::GpuMode::On;
    try {
        ms::run_gemm_bench(o);
        ADD_FAILURE() << "--gpu on without a GPU did not throw";
    } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()), "bench gemm --gpu on: " + why);
    }
    std::vector<float> x(4 * 8, 1.0f), w(4 * 8, 1.0f), y(16);
    EXPECT_THROW(ms::gpu_gemm(GpuType::F32, 4, 8, 4, x.data(), w.data(), y.data()), std::runtime_error);
}

// Reference product in double of inputs already in their type's values.
std::vector<double> reference(int64_t m, int64_t k, int64_t n, const std::vector<float>& x, const std::vector<float>& w) {
    std::vector<double> y(size_t(m * n));
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (int64_t p = 0; p < k; ++p) s += double(x[size_t(i * k + p)]) * double(w[size_t(j * k + p)]);
            y[size_t(i * n + j)] = s;
        }
    return y;
}

TEST(GpuGemm, SmallIntegerProductsAreExactInEveryType) {
    std::string why;
    if (!have_gpu(&why)) GTEST_SKIP() << "no usable GPU: " << why;
    // Quarters in [-2, 2] (exact in f16, bf16 and tf32) or int8 values:
    // every partial sum is exact in fp32, so any summation order gives the
    // reference exactly. M, K, N all different to catch a transposed layout.
    const int64_t m = 13, k = 96, n = 20;
    std::mt19937 rng(3);
    for (GpuType t : kAllTypes) {
        std::uniform_int_distribution<int> d(t == GpuType::I8 ? -127 : -8, t == GpuType::I8 ? 127 : 8);
        float scale = t == GpuType::I8 ? 1.0f : 0.25f;
        std::vector<float> x(size_t(m * k)), w(size_t(n * k)), y(size_t(m * n));
        for (float& v : x) v = float(d(rng)) * scale;
        for (float& v : w) v = float(d(rng)) * scale;
        ms::gpu_gemm(t, m, k, n, x.data(), w.data(), y.data());
        std::vector<double> ref = reference(m, k, n, x, w);
        for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(double(y[i]), ref[i]) << ms::gpu_type_name(t) << " at " << i;
    }
}

TEST(GpuGemm, RandomInputsMatchAReferenceRoundedAsTheType) {
    std::string why;
    if (!have_gpu(&why)) GTEST_SKIP() << "no usable GPU: " << why;
    // N(0, 1) inputs, K = 512: outputs ~ 22. fp32 accumulation errs by
    // ~1e-5 here; tf32 inputs (10-bit mantissa) by ~1e-2, so the f32 bound
    // also shows that f32 did not quietly run as tf32.
    const int64_t m = 16, k = 512, n = 24;
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(m * k)), w(size_t(n * k)), y(size_t(m * n));
    for (float& v : x) v = nd(rng);
    for (float& v : w) v = nd(rng);
    for (GpuType t : {GpuType::F32, GpuType::TF32, GpuType::F16, GpuType::BF16}) {
        std::vector<float> xr = x, wr = w;
        for (std::vector<float>* v : {&xr, &wr})
            for (float& f : *v) {
                if (t == GpuType::F16) f = ms::fp16_to_fp32(ms::fp32_to_fp16(f));
                if (t == GpuType::BF16) f = ms::bf16_to_fp32(ms::fp32_to_bf16(f));
            }
        ms::gpu_gemm(t, m, k, n, x.data(), w.data(), y.data());
        std::vector<double> ref = reference(m, k, n, xr, wr);
        double max_err = 0;
        for (size_t i = 0; i < y.size(); ++i) max_err = std::max(max_err, std::fabs(double(y[i]) - ref[i]));
        EXPECT_LT(max_err, t == GpuType::TF32 ? 0.2 : 1e-3) << ms::gpu_type_name(t);
    }
}

TEST(GpuBench, SmallRunTimesEveryTypeAndSamples) {
    std::string why;
    if (!have_gpu(&why)) GTEST_SKIP() << "no usable GPU: " << why;
    ms::GemmOptions o = tiny_cpu_run();
    o.gpu = ms::GpuMode::On;
    o.ms = {64, 128};
    o.gpu_sustain_m = 256;
    o.sustain_seconds = 0.3;
    o.sample_seconds = 0.1;
    ms::GemmReport r = ms::run_gemm_bench(o);
    ASSERT_TRUE(r.gpu.measured);
    ASSERT_EQ(r.gpu.results.size(), 2u * std::size(kAllTypes));
    for (const ms::GpuGemmResult& x : r.gpu.results) {
        EXPECT_TRUE(x.error.empty()) << x.error;
        EXPECT_GE(x.iterations, 1);
        EXPECT_GE(x.seconds, 0.01);
        EXPECT_DOUBLE_EQ(x.shape.flops(), 2.0 * double(x.shape.m) * 256 * 64);
        double peak = ms::gpu_peak_gflops(r.gpu.device, x.type, nullptr);
        EXPECT_GT(x.gflops(), 0.0);
        if (peak > 0) {
            EXPECT_LT(x.gflops(), peak) << ms::gpu_type_name(x.type);
        }
    }
    EXPECT_EQ(r.gpu.results[0].type, GpuType::F32);
    EXPECT_EQ(r.gpu.results[1].shape.m, 128);
    ASSERT_GE(r.gpu.samples.size(), 2u);
    for (size_t i = 1; i < r.gpu.samples.size(); ++i)
        EXPECT_DOUBLE_EQ(r.gpu.samples[i].t_start, r.gpu.samples[i - 1].t_end);
    // NVML readings, where the driver's library answers: a clock no higher
    // than the peak the driver reports, some power drawn.
    if (r.gpu.device.power_limit_watts > 0) {
        for (const ms::GpuSample& smp : r.gpu.samples) {
            EXPECT_GT(smp.sm_clock_mhz, 0.0);
            EXPECT_LE(smp.sm_clock_mhz, r.gpu.device.clock_mhz + 1);
            EXPECT_GT(smp.power_watts, 0.0);
            EXPECT_LT(smp.power_watts, r.gpu.device.power_limit_watts * 1.2);
        }
    }
    double first = r.gpu.samples.front().gflops, last = r.gpu.samples.back().gflops;
    EXPECT_NEAR(r.gpu.sag_percent, (first - last) / first * 100, 1e-9);
    EXPECT_EQ(lines_starting(r.text, "GPU (cuBLAS): " + r.gpu.device.name).size(), 1u) << r.text;
    ms::Json j = ms::Json::parse(r.json.dump());
    const ms::Json& g = j.at("gpu");
    EXPECT_TRUE(g.at("available").as_bool());
    EXPECT_TRUE(g.at("reason").is_null());
    EXPECT_GT(g.at("device").at("sm_count").as_int(), 0);
    EXPECT_EQ(g.at("results").size(), 10u);
    EXPECT_EQ(g.at("sustained").at("m").as_int(), 256);
    EXPECT_TRUE(g.at("theoretical_peak").contains("int8"));
}

}  // namespace
