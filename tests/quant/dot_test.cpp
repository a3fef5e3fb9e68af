// Dot products and matrix kernels. References, all computed independently of
// the kernels: the golden-verified dequantizer times the activation's own
// decoded values in double (checks every block layout and integer sum), the
// float dot with the unrounded activations (bounded by the rounding the
// activation format allows), and the AVX2 level, whose float steps are the
// reference engine's (every level must give its bits, and matmul must agree
// with matvec bit for bit).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/blocks.h"
#include "quant/cpu.h"
#include "quant/dequant.h"
#include "quant/dot.h"
#include "quant/half.h"

namespace ms {

void PrintTo(GgmlType t, std::ostream* os) { *os << type_name(t); }

namespace {

const GgmlType kRunnable[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,   GgmlType::Q4_0,
                              GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,   GgmlType::Q8_0,
                              GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,   GgmlType::Q5_K,
                              GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4};

struct Rng {
    std::mt19937 g;
    explicit Rng(uint32_t seed) : g(seed) {}
    float normal() { return std::normal_distribution<float>(0.f, 1.f)(g); }
    float uniform(float a, float b) { return std::uniform_real_distribution<float>(a, b)(g); }
    uint8_t byte() { return uint8_t(g()); }
};

uint16_t rand_scale(Rng& r) { return fp32_to_fp16(r.uniform(-0.02f, 0.02f)); }

template <typename B>
void fill_random(std::vector<uint8_t>& out, size_t nblocks, Rng& r, void (*fix)(B&, Rng&)) {
    out.resize(nblocks * sizeof(B));
    for (auto& b : out) b = r.byte();
    for (size_t i = 0; i < nblocks; ++i) {
        B blk;
        std::memcpy(&blk, out.data() + i * sizeof(B), sizeof(B));
        fix(blk, r);
        std::memcpy(out.data() + i * sizeof(B), &blk, sizeof(B));
    }
}

// Random bytes everywhere (every bit pattern of the quants is legal), then
// finite, modest scales.
std::vector<uint8_t> random_rows(GgmlType t, int64_t n, int64_t rows, Rng& r) {
    std::vector<uint8_t> v;
    const int64_t count = n * rows;
    switch (t) {
        case GgmlType::F32:
            v.resize(size_t(count) * 4);
            for (int64_t i = 0; i < count; ++i) { float f = r.normal(); std::memcpy(&v[size_t(i) * 4], &f, 4); }
            break;
        case GgmlType::F16:
        case GgmlType::BF16:
            v.resize(size_t(count) * 2);
            for (int64_t i = 0; i < count; ++i) {
                uint16_t h = t == GgmlType::F16 ? fp32_to_fp16(r.normal()) : fp32_to_bf16(r.normal());
                std::memcpy(&v[size_t(i) * 2], &h, 2);
            }
            break;
        case GgmlType::Q4_0: fill_random<BlockQ4_0>(v, size_t(count / 32), r, [](BlockQ4_0& b, Rng& g) { b.d = rand_scale(g); }); break;
        case GgmlType::Q5_0: fill_random<BlockQ5_0>(v, size_t(count / 32), r, [](BlockQ5_0& b, Rng& g) { b.d = rand_scale(g); }); break;
        case GgmlType::Q8_0: fill_random<BlockQ8_0>(v, size_t(count / 32), r, [](BlockQ8_0& b, Rng& g) { b.d = rand_scale(g); }); break;
        case GgmlType::IQ4_NL: fill_random<BlockIQ4_NL>(v, size_t(count / 32), r, [](BlockIQ4_NL& b, Rng& g) { b.d = rand_scale(g); }); break;
        case GgmlType::Q4_1:
            fill_random<BlockQ4_1>(v, size_t(count / 32), r, [](BlockQ4_1& b, Rng& g) { b.d = rand_scale(g); b.m = rand_scale(g); });
            break;
        case GgmlType::Q5_1:
            fill_random<BlockQ5_1>(v, size_t(count / 32), r, [](BlockQ5_1& b, Rng& g) { b.d = rand_scale(g); b.m = rand_scale(g); });
            break;
        case GgmlType::MXFP4:
            fill_random<BlockMXFP4>(v, size_t(count / 32), r, [](BlockMXFP4& b, Rng& g) { b.e = uint8_t(118 + g.byte() % 12); });
            break;
        case GgmlType::Q2_K:
            fill_random<BlockQ2_K>(v, size_t(count / 256), r, [](BlockQ2_K& b, Rng& g) { b.d = rand_scale(g); b.dmin = rand_scale(g); });
            break;
        case GgmlType::Q3_K: fill_random<BlockQ3_K>(v, size_t(count / 256), r, [](BlockQ3_K& b, Rng& g) { b.d = rand_scale(g); }); break;
        case GgmlType::Q4_K:
            fill_random<BlockQ4_K>(v, size_t(count / 256), r, [](BlockQ4_K& b, Rng& g) { b.d = rand_scale(g); b.dmin = rand_scale(g); });
            break;
        case GgmlType::Q5_K:
            fill_random<BlockQ5_K>(v, size_t(count / 256), r, [](BlockQ5_K& b, Rng& g) { b.d = rand_scale(g); b.dmin = rand_scale(g); });
            break;
        case GgmlType::Q6_K: fill_random<BlockQ6_K>(v, size_t(count / 256), r, [](BlockQ6_K& b, Rng& g) { b.d = rand_scale(g); }); break;
        case GgmlType::IQ4_XS: fill_random<BlockIQ4_XS>(v, size_t(count / 256), r, [](BlockIQ4_XS& b, Rng& g) { b.d = rand_scale(g); }); break;
        default: ADD_FAILURE() << "no generator for " << type_name(t);
    }
    return v;
}

// Activations with a few outliers, as real hidden states have.
std::vector<float> random_acts(int64_t n, int64_t n_tok, Rng& r) {
    std::vector<float> x(size_t(n * n_tok));
    for (auto& f : x) f = r.normal() * (r.uniform(0, 1) < 0.01f ? 20.f : 1.f);
    return x;
}

// The activation row's own values (what the kernels multiply), decoded here
// from the format's definition.
std::vector<double> decode_act(GgmlType w, const uint8_t* a, int64_t n) {
    std::vector<double> v(static_cast<size_t>(n));
    switch (act_type(w)) {
        case ActType::F32: for (int64_t i = 0; i < n; ++i) { float f; std::memcpy(&f, a + 4 * i, 4); v[size_t(i)] = f; } break;
        case ActType::F16:
        case ActType::BF16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, a + 2 * i, 2);
                v[size_t(i)] = act_type(w) == ActType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
            }
            break;
        case ActType::Q8_0:
            for (int64_t b = 0; b < n / 32; ++b) {
                const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(a) + b;
                for (int j = 0; j < 32; ++j) v[size_t(b * 32 + j)] = double(fp16_to_fp32(blk->d)) * blk->qs[j];
            }
            break;
        case ActType::Q8_1:
            for (int64_t b = 0; b < n / 32; ++b) {
                const BlockQ8_1* blk = reinterpret_cast<const BlockQ8_1*>(a) + b;
                for (int j = 0; j < 32; ++j) v[size_t(b * 32 + j)] = double(fp16_to_fp32(blk->d)) * blk->qs[j];
            }
            break;
        case ActType::Q8_K:
            for (int64_t b = 0; b < n / 256; ++b) {
                const BlockQ8_K* blk = reinterpret_cast<const BlockQ8_K*>(a) + b;
                for (int j = 0; j < 256; ++j) v[size_t(b * 256 + j)] = double(blk->d) * blk->qs[j];
            }
            break;
    }
    return v;
}

struct Ref {
    double dot = 0, abs = 0;  // sum of w*a and of |w*a|
};

Ref reference_dot(GgmlType w, const uint8_t* wrow, const uint8_t* act, int64_t n) {
    std::vector<float> wf(static_cast<size_t>(n));
    EXPECT_TRUE(dequantize_row(w, wrow, wf.data(), n));
    std::vector<double> a = decode_act(w, act, n);
    Ref r;
    for (int64_t i = 0; i < n; ++i) {
        r.dot += double(wf[size_t(i)]) * a[size_t(i)];
        r.abs += std::fabs(double(wf[size_t(i)]) * a[size_t(i)]);
    }
    return r;
}

int64_t test_n(GgmlType t) { return type_traits(t).block_size == 256 ? 512 : (type_traits(t).block_size == 32 ? 160 : 100); }

class EveryType : public ::testing::TestWithParam<GgmlType> {
protected:
    void TearDown() override { set_simd_level(best_simd_level()); }
};

// The Q4_1/Q5_1 min term uses s = fp16(d * sum), rounded once more than the
// values themselves; everything else is exact integer arithmetic per block.
double layout_tolerance(GgmlType t, const Ref& r) {
    bool min_term = t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
    return (min_term ? 2e-3 : 2e-5) * r.abs + 1e-30;
}

TEST_P(EveryType, ScalarDotMatchesDequantizedDot) {
    const GgmlType t = GetParam();
    set_simd_level(SimdLevel::Scalar);
    Rng r(11 + uint32_t(t));
    const int64_t n = test_n(t), rows = 7;
    std::vector<uint8_t> W = random_rows(t, n, rows, r);
    std::vector<float> x = random_acts(n, 1, r);
    std::vector<uint8_t> act(act_bytes(t, n));
    quantize_act(t, x.data(), act.data(), n);
    const size_t rb = row_bytes(t, n);
    for (int64_t row = 0; row < rows; ++row) {
        Ref ref = reference_dot(t, W.data() + row * rb, act.data(), n);
        float got = vec_dot(t, W.data() + row * rb, act.data(), n);
        EXPECT_NEAR(got, ref.dot, layout_tolerance(t, ref)) << type_name(t) << " row " << row;
    }
}

// Against the float activations: the error is bounded by each element's
// rounding, |w_i| * (d_a / 2) for 8-bit activations (d_a = amax / 127 of its
// block), half an ulp of the 16-bit formats.
TEST_P(EveryType, DotWithinActivationRoundingOfFloatDot) {
    const GgmlType t = GetParam();
    Rng r(29 + uint32_t(t));
    const int64_t n = test_n(t);
    std::vector<uint8_t> W = random_rows(t, n, 1, r);
    std::vector<float> x = random_acts(n, 1, r), wf(static_cast<size_t>(n));
    ASSERT_TRUE(dequantize_row(t, W.data(), wf.data(), n));
    std::vector<uint8_t> act(act_bytes(t, n));
    quantize_act(t, x.data(), act.data(), n);
    const int64_t bs = act_type(t) == ActType::Q8_K ? 256 : 32;
    double exact = 0, bound = 0, abs_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        exact += double(wf[size_t(i)]) * x[size_t(i)];
        abs_sum += std::fabs(double(wf[size_t(i)]) * x[size_t(i)]);
        double amax = 0;
        for (int64_t j = i / bs * bs; j < std::min(n, i / bs * bs + bs); ++j) amax = std::max(amax, double(std::fabs(x[size_t(j)])));
        double err = 0;
        switch (act_type(t)) {
            case ActType::F32: err = 0; break;
            case ActType::F16: err = std::fabs(x[size_t(i)]) * std::ldexp(1.0, -11); break;
            case ActType::BF16: err = std::fabs(x[size_t(i)]) * std::ldexp(1.0, -8); break;
            default: err = amax / 127 * (0.5 + 2e-3); break;  // the fp16-stored scale moves a little
        }
        bound += std::fabs(wf[size_t(i)]) * err;
    }
    for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
        if (set_simd_level(l) != l) continue;
        float got = vec_dot(t, W.data(), act.data(), n);
        EXPECT_NEAR(got, exact, bound + 1e-5 * abs_sum) << type_name(t) << " " << simd_level_name(l);
    }
}

// Every SIMD level against the scalar level, over odd row counts, token
// counts that exercise both the 4-token tiles and the remainder, and a row
// sub-range; matmul equals matvec bit for bit at each level.
TEST_P(EveryType, SimdLevelsMatchScalarAndMatvec) {
    const GgmlType t = GetParam();
    Rng r(47 + uint32_t(t));
    // Ragged tails: 37 extra elements for F32/F16/BF16, an odd block count for the 32-element types.
    const uint32_t bs = type_traits(t).block_size;
    const int64_t n = test_n(t) * 2 + (bs == 1 ? 37 : (bs == 32 ? 32 : 0));
    const int64_t rows = 37, n_tok = 11;
    std::vector<uint8_t> W = random_rows(t, n, rows, r);
    std::vector<float> x = random_acts(n, n_tok, r);
    const size_t ab = act_bytes(t, n);
    std::vector<uint8_t> acts(ab * n_tok);
    quantize_acts(t, x.data(), acts.data(), n, n_tok);

    set_simd_level(SimdLevel::Scalar);
    std::vector<float> ref(size_t(rows * n_tok));
    matmul(t, W.data(), rows, acts.data(), n_tok, ref.data(), n, 0, rows);
    std::vector<double> tol(size_t(rows * n_tok));
    for (int64_t tok = 0; tok < n_tok; ++tok)
        for (int64_t row = 0; row < rows; ++row) {
            Ref rr = reference_dot(t, W.data() + row * row_bytes(t, n), acts.data() + tok * ab, n);
            tol[size_t(tok * rows + row)] = 1e-5 * rr.abs + 1e-30;
            EXPECT_NEAR(ref[size_t(tok * rows + row)], rr.dot, layout_tolerance(t, rr));
        }

    for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
        if (set_simd_level(l) != l) continue;
        SCOPED_TRACE(std::string(type_name(t)) + " " + simd_level_name(l));
        std::vector<float> Y(size_t(rows * n_tok), NAN);
        matmul(t, W.data(), rows, acts.data(), n_tok, Y.data(), n, 0, rows);
        for (size_t i = 0; i < Y.size(); ++i) ASSERT_NEAR(Y[i], ref[i], tol[i]) << "at " << i;
        for (int64_t tok = 0; tok < n_tok; ++tok) {
            std::vector<float> y(size_t(rows), NAN);
            // Two row ranges, as two threads would split them.
            matvec(t, W.data(), acts.data() + tok * ab, y.data(), n, 0, 13);
            matvec(t, W.data(), acts.data() + tok * ab, y.data(), n, 13, rows);
            for (int64_t row = 0; row < rows; ++row)
                ASSERT_EQ(float_bits(y[size_t(row)]), float_bits(Y[size_t(tok * rows + row)])) << tok << "," << row;
        }
        std::vector<float> part(size_t(rows * n_tok), -1.f);
        matmul(t, W.data(), rows, acts.data(), n_tok, part.data(), n, 5, 30);
        for (int64_t tok = 0; tok < n_tok; ++tok)
            for (int64_t row = 0; row < rows; ++row) {
                size_t i = size_t(tok * rows + row);
                if (row >= 5 && row < 30) ASSERT_EQ(float_bits(part[i]), float_bits(Y[i]));
                else ASSERT_EQ(part[i], -1.f) << "wrote outside [r0, r1)";
            }
    }
}

// matmul's contract, bit for bit: per token it gives what matvec gives,
// whatever the token count (tiles of 16, 8, 4, 2 and 1 tokens, padded tiles
// for the remainder), the row range, and where in the activations the run of
// tokens starts. Shapes: a single short row, an odd row count, rows long
// enough that the largest tiles' scratch does not fit (smaller tiles take
// over), and a row too long for any tile (dot4 / dot1 do the work).
TEST_P(EveryType, MatmulEqualsMatvecBitForBitForEveryTokenCount) {
    const GgmlType t = GetParam();
    Rng r(71 + uint32_t(t));
    const int64_t bs = type_traits(t).block_size;
    struct Shape { int64_t n, rows; };
    const Shape shapes[] = {{bs == 1 ? 40 : std::max<int64_t>(bs, 64), 1}, {test_n(t) * 2, 37}, {10240, 2}, {32768, 1}};
    constexpr int64_t kMaxTok = 40;
    for (const Shape& sh : shapes) {
        const int64_t n = sh.n, rows = sh.rows;
        std::vector<uint8_t> W = random_rows(t, n, rows, r);
        std::vector<float> x = random_acts(n, kMaxTok, r);
        const size_t ab = act_bytes(t, n);
        std::vector<uint8_t> acts(ab * kMaxTok);
        quantize_acts(t, x.data(), acts.data(), n, kMaxTok);
        for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
            if (set_simd_level(l) != l) continue;
            SCOPED_TRACE(std::string(type_name(t)) + " " + simd_level_name(l) + " n=" + std::to_string(n));
            std::vector<float> ref(size_t(kMaxTok * rows));
            for (int64_t tok = 0; tok < kMaxTok; ++tok)
                matvec(t, W.data(), acts.data() + tok * ab, ref.data() + tok * rows, n, 0, rows);
            for (int64_t nt = 1; nt <= kMaxTok; ++nt) {
                const int64_t first = (nt * 7) % (kMaxTok - nt + 1);
                const float* want = ref.data() + first * rows;
                std::vector<float> Y(size_t(nt * rows), NAN);
                matmul(t, W.data(), rows, acts.data() + first * ab, nt, Y.data(), n, 0, rows);
                ASSERT_EQ(std::memcmp(Y.data(), want, Y.size() * sizeof(float)), 0) << nt << " tokens from " << first;
                if (rows < 3) continue;
                std::vector<float> part(Y.size(), NAN);
                matmul(t, W.data(), rows, acts.data() + first * ab, nt, part.data(), n, 1, rows - 1);
                for (int64_t tok = 0; tok < nt; ++tok)
                    ASSERT_EQ(std::memcmp(&part[size_t(tok * rows + 1)], want + tok * rows + 1, size_t(rows - 2) * sizeof(float)), 0)
                        << nt << " tokens, rows [1, " << rows - 1 << "), token " << tok;
            }
        }
    }
}

// The AVX2 kernels take the reference engine's float steps (for 8-bit
// activations: 8 int32 lanes per block, one FMA each, then its horizontal
// sums), which is why the golden Q8_0 and MXFP4_MOE files agree with them to
// the last bit. Every other level must give those bits exactly, through
// every path: a rounding moved elsewhere can flip a near-tied expert choice
// and move a model's logits by percents (tracker issue 12 item 6: Q4_K
// attention projections at 2.9e-2 on AVX-512 against 1.1e-3 on AVX2). BF16
// on CPUs with AVX512-BF16 is the exception: its pair-dot instruction has its
// own rounding.
TEST_P(EveryType, EveryLevelGivesAvx2Bits) {
    const GgmlType t = GetParam();
    if (set_simd_level(SimdLevel::Avx2) != SimdLevel::Avx2) GTEST_SKIP() << "no AVX2 on this CPU";
    std::vector<SimdLevel> levels = {SimdLevel::Scalar};
    if (best_simd_level() == SimdLevel::Avx512 && !(t == GgmlType::BF16 && cpu_features().avx512bf16))
        levels.push_back(SimdLevel::Avx512);
    Rng r(83 + uint32_t(t));
    // Rows too long for the largest tiles' scratch, and for any tile; the
    // float types get ragged tails too.
    const int64_t ns[] = {test_n(t) * 2 + (type_traits(t).block_size == 1 ? 37 : 0), 10240, 32768};
    constexpr int64_t kMaxTok = 37, rows = 19;
    for (int64_t n : ns) {
        std::vector<uint8_t> W = random_rows(t, n, rows, r);
        std::vector<float> x = random_acts(n, kMaxTok, r);
        const size_t ab = act_bytes(t, n);
        std::vector<uint8_t> acts(ab * kMaxTok);
        quantize_acts(t, x.data(), acts.data(), n, kMaxTok);
        auto run = [&](SimdLevel l, int64_t nt) {
            set_simd_level(l);
            std::vector<float> Y(size_t(nt * rows), NAN);
            if (nt == 1) matvec(t, W.data(), acts.data(), Y.data(), n, 0, rows);
            else matmul(t, W.data(), rows, acts.data(), nt, Y.data(), n, 0, rows);
            return Y;
        };
        for (int64_t nt : {int64_t(1), int64_t(2), int64_t(3), int64_t(4), int64_t(7), int64_t(16), kMaxTok}) {
            const std::vector<float> want = run(SimdLevel::Avx2, nt);
            for (SimdLevel l : levels) {
                // The scalar level has one path for every token count.
                if (l == SimdLevel::Scalar && nt != 1 && nt != kMaxTok) continue;
                const std::vector<float> got = run(l, nt);
                for (size_t i = 0; i < want.size(); ++i)
                    ASSERT_EQ(float_bits(got[i]), float_bits(want[i]))
                        << type_name(t) << " " << simd_level_name(l) << " n=" << n << " tokens=" << nt << " token "
                        << i / rows << " row " << i % rows << ": " << got[i] << " vs " << want[i];
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Quant, EveryType, ::testing::ValuesIn(kRunnable),
                         [](const ::testing::TestParamInfo<GgmlType>& i) { return std::string(type_name(i.param)); });

// ---- activation formats ------------------------------------------------------

TEST(ActFormats, TypesAndSizes) {
    EXPECT_EQ(act_type(GgmlType::Q8_0), ActType::Q8_0);
    EXPECT_EQ(act_type(GgmlType::MXFP4), ActType::Q8_0);
    EXPECT_EQ(act_type(GgmlType::IQ4_NL), ActType::Q8_0);
    EXPECT_EQ(act_type(GgmlType::Q4_1), ActType::Q8_1);
    EXPECT_EQ(act_type(GgmlType::Q4_K), ActType::Q8_K);
    EXPECT_EQ(act_type(GgmlType::IQ4_XS), ActType::Q8_K);
    EXPECT_EQ(act_type(GgmlType::BF16), ActType::BF16);
    EXPECT_EQ(act_bytes(GgmlType::Q4_0, 2048), 64u * 34);
    EXPECT_EQ(act_bytes(GgmlType::Q5_1, 2048), 64u * 36);
    EXPECT_EQ(act_bytes(GgmlType::Q6_K, 2048), 8u * 292);
    EXPECT_EQ(act_bytes(GgmlType::F16, 100), 200u);
    EXPECT_EQ(act_bytes(GgmlType::F32, 100), 400u);
}

TEST(ActFormats, Q8_0RoundsHalfToEvenWithScaleFromAbsMax) {
    // amax 127 makes the multiplier exactly 1, so the ties are visible.
    float x[32];
    for (int j = 0; j < 32; ++j) x[j] = float(j) - 15.5f;  // -15.5 .. 15.5: all ties
    x[31] = 127.f;
    BlockQ8_0 b;
    quantize_act(GgmlType::Q8_0, x, &b, 32);
    EXPECT_EQ(fp16_to_fp32(b.d), 1.f);
    for (int j = 0; j < 31; ++j) {
        double v = x[j], fl = std::floor(v);
        int even = (int64_t(fl) % 2 == 0) ? int(fl) : int(fl) + 1;
        EXPECT_EQ(b.qs[j], even) << x[j];
    }
    EXPECT_EQ(b.qs[31], 127);
    float zeros[32] = {};
    quantize_act(GgmlType::Q8_0, zeros, &b, 32);
    EXPECT_EQ(b.d, 0);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(b.qs[j], 0);
}

TEST(ActFormats, Q8_1SumAndQ8_KBsums) {
    Rng r(5);
    std::vector<float> x = random_acts(256, 1, r);
    BlockQ8_1 b1[8];
    quantize_act(GgmlType::Q4_1, x.data(), b1, 256);
    for (auto& b : b1) {
        int sum = 0;
        for (int8_t q : b.qs) sum += q;
        EXPECT_NEAR(fp16_to_fp32(b.s), double(fp16_to_fp32(b.d)) * sum, std::fabs(fp16_to_fp32(b.d) * sum) * 2e-3 + 1e-6);
    }
    BlockQ8_K bk;
    quantize_act(GgmlType::Q4_K, x.data(), &bk, 256);
    int imax = 0;
    for (int j = 0; j < 256; ++j) if (std::fabs(x[j]) > std::fabs(x[imax])) imax = j;
    EXPECT_EQ(bk.qs[imax], -127);  // the reference maps the signed extreme to -127
    EXPECT_FLOAT_EQ(bk.d, x[imax] / -127.f);
    for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int l = 0; l < 16; ++l) s += bk.qs[16 * g + l];
        EXPECT_EQ(bk.bsums[g], s);
    }
    for (int j = 0; j < 256; ++j) EXPECT_NEAR(double(bk.d) * bk.qs[j], x[j], std::fabs(bk.d) * 0.5001);
}

// An x whose product with `scale`, rounded to float, is exactly k + 0.5 while
// the exact product is not: the round-half-even step then depends on the
// product having been rounded first (an FMA would not). 0 if none is near.
float tie_only_after_rounding(float scale, int k) {
    float x = float((k + 0.5) / double(scale));
    for (int step = 0; step < 8; ++step, x = std::nextafter(x, 0.f)) {
        for (float c : {x, std::nextafter(x, 1e9f)}) {
            if (c * scale == float(k) + 0.5f && double(c) * double(scale) != k + 0.5) return c;
        }
    }
    return 0.f;
}

// The SIMD converters write the scalar converter's bytes: a row with an
// all-zero block, NaN, infinity, a denormal, the largest magnitude twice with
// both signs, exact rounding ties, and a block of products that round to ties
// (block maximum 3: both formats scale by 127 / 3); then random rows. 768
// elements: 24 blocks of 32 (a batch of 16 and a partial one) and 3 of 256.
TEST(ActFormats, EveryLevelWritesTheScalarBytes) {
    Rng r(17);
    const int64_t n = 768;
    std::vector<std::vector<float>> rows(20);
    for (auto& row : rows) row = random_acts(n, 1, r);
    std::vector<float>& x = rows[0];
    std::fill(x.begin(), x.begin() + 256, 0.f);
    x[260] = NAN;
    x[270] = 5e3f;
    x[280] = -5e3f;
    x[300] = 1e-40f;
    x[700] = INFINITY;
    std::vector<float>& ties = rows[1];
    int found = 0;
    for (int j = 512; j < 768; ++j) {
        float c = j % 32 == 0 ? -3.f : tie_only_after_rounding(127.f / 3.f, 1 + j % 120);
        found += c != 0.f && j % 32 != 0;
        ties[size_t(j)] = j % 2 ? -c : c;
    }
    EXPECT_GT(found, 100);
    for (int j = 0; j < 32; ++j) ties[size_t(j)] = float(j) - 15.5f;  // ties of the exact kind
    ties[31] = 127.f;
    for (GgmlType w : {GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q4_K}) {
        for (const std::vector<float>& row : rows) {
            const size_t ab = act_bytes(w, n);
            std::vector<uint8_t> want(ab), got(ab);
            set_simd_level(SimdLevel::Scalar);
            quantize_act(w, row.data(), want.data(), n);
            for (SimdLevel l : {SimdLevel::Avx2, SimdLevel::Avx512}) {
                if (set_simd_level(l) != l) continue;
                std::fill(got.begin(), got.end(), 0xa5);
                quantize_act(w, row.data(), got.data(), n);
                ASSERT_EQ(std::memcmp(got.data(), want.data(), ab), 0) << act_type_name(act_type(w)) << " " << simd_level_name(l);
            }
        }
    }
    set_simd_level(best_simd_level());
}

TEST(Cpu, LevelsClampToWhatTheCpuHas) {
    SimdLevel best = best_simd_level();
    EXPECT_EQ(set_simd_level(SimdLevel::Avx512), best);
    EXPECT_EQ(simd_level(), best);
    EXPECT_EQ(set_simd_level(SimdLevel::Scalar), SimdLevel::Scalar);
    EXPECT_EQ(simd_level(), SimdLevel::Scalar);
    set_simd_level(best);
    const CpuFeatures& f = cpu_features();
    EXPECT_TRUE(best != SimdLevel::Avx512 || (f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni));
    EXPECT_TRUE(best == SimdLevel::Scalar || (f.avx2 && f.fma && f.f16c));
}

}  // namespace
}  // namespace ms
