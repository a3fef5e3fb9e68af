// The SIMD attention loops (ops/attention_kernels.h) at every level this CPU
// runs, against double-precision sums of the same float inputs, and
// attention() at each SIMD level against the scalar reference, which it must
// equal bit for bit (same operations, same order; the reference's order is
// what keeps the golden models' routing decisions).
//
// Tolerances against double are rounding-error bounds, not fitted constants.
// With u = 2^-24 and gamma(n) = n u / (1 - n u), any float sum of n terms is
// within gamma(n) * sum |term| of the exact sum (Higham, Accuracy and
// Stability of Numerical Algorithms, 3.1). So a score of head_dim products is
// within gamma(head_dim) * sum |q_i k_i|, an output element within
// gamma(n_pos) * sum_j p_j |v_jd|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ops/attention.h"
#include "ops/attention_kernels.h"
#include "ops/buffer.h"
#include "quant/cpu.h"
#include "quant/half.h"
#include "test_util.h"

namespace ms {
namespace {

constexpr double kU = 1.0 / (1 << 24);
double gamma(int64_t n) { return double(n) * kU / (1.0 - double(n) * kU); }

struct Level {
    SimdLevel level;
    const AttentionKernels* kernels;
};

std::vector<Level> simd_levels() {
    std::vector<Level> out;
    if (best_simd_level() >= SimdLevel::Avx2) out.push_back({SimdLevel::Avx2, &kAttentionAvx2});
    if (best_simd_level() >= SimdLevel::Avx512) out.push_back({SimdLevel::Avx512, &kAttentionAvx512});
    return out;
}

// A cache of n_pos rows of `stride` elements as F32 and as F16, and the
// values the F16 rows hold, widened.
struct Rows {
    std::vector<float> f32, f16_values;
    std::vector<uint16_t> f16;
    Rows(int64_t n_pos, int64_t stride, uint32_t seed) : f32(random_vector(size_t(n_pos * stride), seed)) {
        for (float x : f32) {
            f16.push_back(fp32_to_fp16(x));
            f16_values.push_back(fp16_to_fp32(f16.back()));
        }
    }
};

TEST(AttentionSimd, ScoresWithinRoundingBoundAndIndependentOfBlocking) {
    if (simd_levels().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
    for (const Level& lv : simd_levels()) {
        for (int dim : {16, 64, 128, 256}) {
            for (int n_q : {1, 2, 3, 7, 8, 13}) {
                for (int64_t n_pos : {1, 5, 16, 17, 33, 130}) {
                    const int64_t stride = 3 * dim + 16;  // rows of several heads, this one at +dim
                    const Rows k(n_pos, stride, uint32_t(dim * 7 + n_q * 131 + n_pos));
                    std::vector<float> q = random_vector(size_t(n_q * dim), uint32_t(n_pos + 99));
                    std::vector<float> qh = q;  // F16 values, as attention rounds q for an F16 cache
                    for (float& x : qh) x = fp16_to_fp32(fp32_to_fp16(x));
                    const int64_t s_stride = n_pos + 3;
                    for (bool f16 : {false, true}) {
                        std::vector<float> s(size_t(n_q * s_stride), NAN);
                        const float* qq = f16 ? qh.data() : q.data();
                        const float* kv = f16 ? k.f16_values.data() : k.f32.data();
                        if (f16) {
                            lv.kernels->scores_f16(qq, n_q, k.f16.data() + dim, stride, dim, n_pos, s.data(), s_stride);
                        } else {
                            lv.kernels->scores_f32(qq, n_q, k.f32.data() + dim, stride, dim, n_pos, s.data(), s_stride);
                        }
                        for (int h = 0; h < n_q; h++) {
                            for (int64_t j = 0; j < n_pos; j++) {
                                double exact = 0, mag = 0;
                                for (int d = 0; d < dim; d++) {
                                    const double p = double(qq[h * dim + d]) * kv[size_t(j * stride + dim + d)];
                                    exact += p;
                                    mag += std::fabs(p);
                                }
                                ASSERT_LE(std::fabs(s[size_t(h * s_stride + j)] - exact), gamma(dim) * mag)
                                    << simd_level_name(lv.level) << " f16 " << f16 << " dim " << dim << " n_q " << n_q
                                    << " j " << j << "/" << n_pos;
                            }
                        }
                        // A head alone, and keys in a shorter run, give the same bits.
                        std::vector<float> one(static_cast<size_t>(s_stride));
                        const int h = n_q - 1;
                        const int64_t n_short = (n_pos + 1) / 2;
                        if (f16) {
                            lv.kernels->scores_f16(qq + h * dim, 1, k.f16.data() + dim, stride, dim, n_short, one.data(), 0);
                        } else {
                            lv.kernels->scores_f32(qq + h * dim, 1, k.f32.data() + dim, stride, dim, n_short, one.data(), 0);
                        }
                        ASSERT_EQ(0, std::memcmp(one.data(), s.data() + h * s_stride, size_t(n_short) * 4));
                    }
                }
            }
        }
    }
}

TEST(AttentionSimd, MixWithinRoundingBoundAndIndependentOfBlocking) {
    if (simd_levels().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
    for (const Level& lv : simd_levels()) {
        for (int dim : {16, 48, 128, 256}) {
            for (int n_q : {1, 2, 3, 8, 9}) {
                for (int64_t n_pos : {1, 7, 40, 300}) {
                    const int64_t stride = 2 * dim;
                    const Rows v(n_pos, stride, uint32_t(dim * 3 + n_q * 17 + n_pos));
                    const int64_t p_stride = n_pos + 5;
                    std::vector<float> p = random_vector(size_t(n_q * p_stride), uint32_t(n_pos * 5 + 1));
                    for (float& x : p) x = std::fabs(x) / float(n_pos);
                    for (bool f16 : {false, true}) {
                        std::vector<float> out(size_t(n_q * dim), NAN);
                        const float* vv = f16 ? v.f16_values.data() : v.f32.data();
                        if (f16) {
                            lv.kernels->mix_f16(p.data(), p_stride, n_q, v.f16.data() + dim, stride, dim, n_pos, out.data());
                        } else {
                            lv.kernels->mix_f32(p.data(), p_stride, n_q, v.f32.data() + dim, stride, dim, n_pos, out.data());
                        }
                        for (int h = 0; h < n_q; h++) {
                            for (int d = 0; d < dim; d++) {
                                double exact = 0, mag = 0;
                                for (int64_t j = 0; j < n_pos; j++) {
                                    const double t = double(p[size_t(h * p_stride + j)]) * vv[size_t(j * stride + dim + d)];
                                    exact += t;
                                    mag += std::fabs(t);
                                }
                                ASSERT_LE(std::fabs(out[size_t(h * dim + d)] - exact), gamma(n_pos) * mag)
                                    << simd_level_name(lv.level) << " f16 " << f16 << " dim " << dim << " h " << h;
                            }
                        }
                        std::vector<float> one(static_cast<size_t>(dim));
                        const int h = n_q - 1;
                        if (f16) {
                            lv.kernels->mix_f16(p.data() + h * p_stride, 0, 1, v.f16.data() + dim, stride, dim, n_pos, one.data());
                        } else {
                            lv.kernels->mix_f32(p.data() + h * p_stride, 0, 1, v.f32.data() + dim, stride, dim, n_pos, one.data());
                        }
                        ASSERT_EQ(0, std::memcmp(one.data(), out.data() + h * dim, size_t(dim) * 4));
                    }
                }
            }
        }
    }
}

// Each probability within a few ulp of softmax computed in double from the
// same scaled floats: std::exp (half an ulp), the normalizing reciprocal and
// product (half an ulp each), with room to spare.
TEST(AttentionSimd, SoftmaxWithinFewUlpOfDouble) {
    if (simd_levels().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
    for (const Level& lv : simd_levels()) {
        for (int64_t n : {1, 2, 15, 16, 17, 100, 4096}) {
            for (float spread : {0.1f, 5.0f, 40.0f}) {
                std::vector<float> x = random_vector(size_t(n), uint32_t(n + 7), spread);
                if (n > 2) x[1] = -1e30f;  // far below the rest: exactly 0
                const float scale = 0.37f;
                std::vector<float> buf(size_t((n + 15) / 16 * 16), NAN);
                std::memcpy(buf.data(), x.data(), size_t(n) * 4);
                lv.kernels->softmax(buf.data(), n, scale, -INFINITY);
                // As both compute it: x * scale and its difference from the
                // max rounded to float, the rest exact.
                float max = -INFINITY;
                for (float v : x) max = std::max(max, v * scale);
                double sum = 0;
                for (float v : x) sum += std::exp(double(v * scale - max));
                for (int64_t i = 0; i < n; i++) {
                    const double want = std::exp(double(x[size_t(i)] * scale - max)) / sum;
                    ASSERT_NEAR(buf[size_t(i)], want, 8 * kU * want + 1.2e-38 / sum)
                        << simd_level_name(lv.level) << " n " << n << " spread " << spread << " i " << i;
                }
            }
        }
    }
}

struct Case {
    AttentionShape shape;
    GgmlType kv_type;
    int64_t n_tok, pos0;
};

// attention() at each SIMD level equals the scalar reference bit for bit,
// across shapes (GQA groups of 8, 2 and 1, head_dim_v != head_dim), cache
// types, positions (tails shorter than a vector) and batches.
TEST(AttentionSimd, MatchesScalarReferenceBitForBit) {
    if (simd_levels().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
    const AttentionShape qwen30b{32, 4, 128, 128, 1.0f / std::sqrt(128.0f)};
    const AttentionShape small{4, 2, 64, 64, 0.125f};
    const AttentionShape no_gqa{6, 6, 32, 32, 0.2f};
    const AttentionShape wide_v{12, 4, 16, 48, 0.25f};
    const float sinks[4] = {0.5f, -1.0f, 2.0f, 0.0f};
    const AttentionShape windowed_sinks{4, 2, 64, 64, 0.125f, 8, sinks};  // gpt-oss's sliding layers
    std::vector<Case> cases;
    for (GgmlType t : {GgmlType::F32, GgmlType::F16}) {
        for (const AttentionShape& s : {qwen30b, small, no_gqa, wide_v, windowed_sinks}) {
            for (int64_t pos0 : {0, 6, 100, 1000}) cases.push_back({s, t, 1, pos0});
            cases.push_back({s, t, 9, 3});
        }
    }
    ThreadPool pool(2);
    for (const Case& c : cases) {
        const AttentionShape& s = c.shape;
        const int64_t n_ctx = c.pos0 + c.n_tok, kw = int64_t(s.n_head_kv) * s.head_dim, vw = int64_t(s.n_head_kv) * s.head_dim_v;
        const size_t elt = c.kv_type == GgmlType::F32 ? 4 : 2;
        AlignedBuffer kc(size_t(n_ctx * kw) * elt), vc(size_t(n_ctx * vw) * elt);
        const KvLayer kv{c.kv_type, kw, vw, kc.data(), vc.data()};
        const std::vector<float> k = random_vector(size_t(n_ctx * kw), 11, 0.5f), v = random_vector(size_t(n_ctx * vw), 12);
        for (int64_t t = 0; t < n_ctx; t++) kv_store(kv, t, k.data() + t * kw, v.data() + t * vw);
        const std::vector<float> q = random_vector(size_t(c.n_tok * s.n_head * s.head_dim), 13, 0.5f);
        std::vector<float> scratch(size_t(pool.size()) * attention_scratch_floats(s, n_ctx));
        const size_t n_out = size_t(c.n_tok * s.n_head * s.head_dim_v);
        std::vector<float> want(n_out), got(n_out);
        set_simd_level(SimdLevel::Scalar);
        attention(pool, s, kv, q.data(), c.n_tok, c.pos0, n_ctx, scratch.data(), want.data());

        for (const Level& lv : simd_levels()) {
            set_simd_level(lv.level);
            attention(pool, s, kv, q.data(), c.n_tok, c.pos0, n_ctx, scratch.data(), got.data());
            EXPECT_EQ(std::memcmp(got.data(), want.data(), n_out * sizeof(float)), 0)
                << simd_level_name(lv.level) << " " << type_name(c.kv_type) << " heads " << s.n_head << "/"
                << s.n_head_kv << " dim " << s.head_dim << " pos0 " << c.pos0 << " n_tok " << c.n_tok;
        }
        set_simd_level(best_simd_level());
    }
}

// Decode and a batch give the same bits at every level, for any thread count:
// the store's bit-exactness rests on it.
TEST(AttentionSimd, TokenAloneEqualsTokenInBatch) {
    const AttentionShape s{8, 2, 64, 64, 0.125f};
    const int64_t n_tok = 21, kw = 2 * 64;
    const std::vector<float> k = random_vector(size_t(n_tok * kw), 21), v = random_vector(size_t(n_tok * kw), 22);
    const std::vector<float> q = random_vector(size_t(n_tok * 8 * 64), 23);
    for (GgmlType type : {GgmlType::F32, GgmlType::F16}) {
        const size_t elt = type == GgmlType::F32 ? 4 : 2;
        AlignedBuffer kc(size_t(n_tok * kw) * elt), vc(size_t(n_tok * kw) * elt);
        const KvLayer kv{type, kw, kw, kc.data(), vc.data()};
        for (int64_t t = 0; t < n_tok; t++) kv_store(kv, t, k.data() + t * kw, v.data() + t * kw);
        for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
            if (set_simd_level(l) != l) continue;
            ThreadPool pool2(2), pool3(3);
            std::vector<float> scratch(3 * attention_scratch_floats(s, n_tok));
            std::vector<float> all(size_t(n_tok * 8 * 64)), one(8 * 64);
            attention(pool2, s, kv, q.data(), n_tok, 0, n_tok, scratch.data(), all.data());
            for (int64_t t : {int64_t(0), int64_t(8), n_tok - 1}) {
                attention(pool3, s, kv, q.data() + t * 8 * 64, 1, t, n_tok, scratch.data(), one.data());
                ASSERT_EQ(0, std::memcmp(one.data(), all.data() + t * 8 * 64, one.size() * 4))
                    << simd_level_name(l) << " " << type_name(type) << " token " << t;
            }
        }
        set_simd_level(best_simd_level());
    }
}

}  // namespace
}  // namespace ms
