// fp16 / bf16 conversions against independent references: exact arithmetic in
// double for every fp16 value and every rounding midpoint, and the CPU's own
// conversion instructions (F16C, AVX512-BF16) where present.
#include <gtest/gtest.h>

#include <immintrin.h>

#include <cmath>
#include <limits>
#include <random>

#include "quant/cpu.h"
#include "quant/half.h"

namespace ms {
namespace {

// Value of fp16 bits computed from the definition.
double fp16_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

TEST(Half, Fp16ToFp32EveryValue) {
    for (uint32_t h = 0; h < 65536; ++h) {
        float f = fp16_to_fp32(uint16_t(h));
        int e = (h >> 10) & 31;
        if (e == 31) {
            if (h & 1023) {
                EXPECT_TRUE(std::isnan(f)) << h;
            } else {
                EXPECT_EQ(f, (h & 0x8000) ? -INFINITY : INFINITY) << h;
            }
            continue;
        }
        EXPECT_EQ(double(f), fp16_value(uint16_t(h))) << h;
        EXPECT_EQ(std::signbit(f), bool(h & 0x8000)) << h;
        EXPECT_EQ(fp32_to_fp16(f), h) << "round trip " << h;
    }
}

// Midpoints between neighbouring fp16 values must go to the even one; a hair
// above or below must go to the nearer one.
TEST(Half, Fp32ToFp16TiesAndNeighbours) {
    for (uint32_t h = 0; h < 0x7bff; ++h) {  // positive finite, h and h + 1
        double lo = fp16_value(uint16_t(h)), hi = fp16_value(uint16_t(h + 1));
        float mid = float((lo + hi) / 2);  // exact: fp16 midpoints need at most 12 significant bits
        ASSERT_EQ(double(mid), (lo + hi) / 2);
        uint16_t even = (h & 1) ? uint16_t(h + 1) : uint16_t(h);
        EXPECT_EQ(fp32_to_fp16(mid), even) << h;
        EXPECT_EQ(fp32_to_fp16(-mid), even | 0x8000) << h;
        EXPECT_EQ(fp32_to_fp16(std::nextafter(mid, 0.f)), h) << h;
        EXPECT_EQ(fp32_to_fp16(std::nextafter(mid, INFINITY)), h + 1) << h;
    }
    EXPECT_EQ(fp32_to_fp16(65504.f), 0x7bff);
    EXPECT_EQ(fp32_to_fp16(65519.99f), 0x7bff);
    EXPECT_EQ(fp32_to_fp16(65520.f), 0x7c00);  // the tie above the largest finite rounds to inf
    EXPECT_EQ(fp32_to_fp16(1e30f), 0x7c00);
    EXPECT_EQ(fp32_to_fp16(-INFINITY), 0xfc00);
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.f, -25)), 0);  // half the smallest subnormal: tie to 0
    EXPECT_EQ(fp32_to_fp16(std::nextafter(std::ldexp(1.f, -25), 1.f)), 1);
    EXPECT_EQ(fp32_to_fp16(1e-30f), 0);
    uint16_t nan = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
    EXPECT_EQ(nan & 0x7c00, 0x7c00);
    EXPECT_NE(nan & 0x3ff, 0);
}

__attribute__((target("f16c"))) uint16_t hw_fp16(float f) {
    return uint16_t(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}

TEST(Half, Fp32ToFp16MatchesF16C) {
    if (!cpu_features().f16c) GTEST_SKIP() << "no F16C";
    std::mt19937 rng(1);
    for (int i = 0; i < 2000000; ++i) {
        float f = bits_float(rng());
        if (std::isnan(f)) continue;
        ASSERT_EQ(fp32_to_fp16(f), hw_fp16(f)) << f;
    }
}

TEST(Half, Bf16) {
    for (uint32_t h = 0; h < 65536; ++h) {
        float f = bf16_to_fp32(uint16_t(h));
        EXPECT_EQ(float_bits(f), h << 16);
        if (!std::isnan(f)) {
            EXPECT_EQ(fp32_to_bf16(f), h);
        }
    }
    // Ties: low 16 bits exactly 0x8000 round to the even neighbour.
    EXPECT_EQ(fp32_to_bf16(bits_float(0x3f808000)), 0x3f80);
    EXPECT_EQ(fp32_to_bf16(bits_float(0x3f818000)), 0x3f82);
    EXPECT_EQ(fp32_to_bf16(bits_float(0x3f808001)), 0x3f81);
    EXPECT_EQ(fp32_to_bf16(bits_float(0x3f807fff)), 0x3f80);
    EXPECT_EQ(fp32_to_bf16(bits_float(0x7f7fffff)), 0x7f80);  // rounds up to inf
    uint16_t nan = fp32_to_bf16(bits_float(0x7f800001));      // signalling NaN stays NaN
    EXPECT_TRUE(std::isnan(bf16_to_fp32(nan)));
}

__attribute__((target("avx512bf16,avx512vl,avx512f"))) uint16_t hw_bf16(float f) {
    __m128bh v = _mm_cvtneps_pbh(_mm_set1_ps(f));
    uint16_t out[8];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), reinterpret_cast<__m128i&>(v));
    return out[0];
}

TEST(Half, Fp32ToBf16MatchesAvx512Bf16) {
    if (!cpu_features().avx512bf16) GTEST_SKIP() << "no AVX512-BF16";
    std::mt19937 rng(2);
    for (int i = 0; i < 2000000; ++i) {
        float f = bits_float(rng());
        // The instruction flushes subnormal inputs; our conversion keeps them.
        if (std::isnan(f) || (std::fpclassify(f) == FP_SUBNORMAL)) continue;
        ASSERT_EQ(fp32_to_bf16(f), hw_bf16(f)) << f;
    }
}

}  // namespace
}  // namespace ms
