// attention() over a Q8_0 KV cache at every SIMD level this CPU runs
// (scalar included), against double-precision attention twice: over the
// values the cache's blocks hold (the rounding of the loops alone), and over
// the float keys and values that were stored (the rounding plus the
// quantization, bounded from the quantization error itself).
//
// With u = 2^-24 and gamma(n) = n u / (1 - n u), a float sum of n terms is
// within gamma(n) of the sum of their magnitudes (Higham 3.1), so a score is
// within gamma(head_dim) * head_dim * max|q| * max|k| * scale; a weight
// e^(s_j - max) / sum is then off by at most a factor e^(2e) (+16 ulp for the
// exponential, the subtraction and the division), and an output element by
// that times max|v| plus the mix's gamma(n_pos) * max|v|.
//
// Quantization: key j's score moves by scale * sum_d |q_d| |k_jd - k'_jd|
// <= e_q, so every weight moves by at most a factor e^(2 e_q), and the output
// by at most expm1(2 e_q) * max|v'| + max|v - v'| (the weights sum to 1).
// The quantizer's own guarantee, |x - x'| <= d/2 plus the F16 rounding of
// d = max|x| / 127 (at most 127 * 2^-11 d), is checked on the way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "ops/attention.h"
#include "ops/buffer.h"
#include "quant/blocks.h"
#include "quant/cpu.h"
#include "quant/dequant.h"
#include "quant/half.h"
#include "test_util.h"

namespace ms {
namespace {

constexpr double kU = 1.0 / (1 << 24);
double gamma(int64_t n) { return double(n) * kU / (1.0 - double(n) * kU); }

// Double-precision attention of token p's heads over rows K, V (n_head_kv
// heads of head_dim / head_dim_v side by side), the AttentionShape's rules.
std::vector<double> attention_double(const AttentionShape& s, const std::vector<float>& q, const std::vector<float>& K,
                                     const std::vector<float>& V, int64_t p) {
    const int group = s.n_head / s.n_head_kv;
    const int64_t kw = int64_t(s.n_head_kv) * s.head_dim, vw = int64_t(s.n_head_kv) * s.head_dim_v;
    int64_t first = s.window > 0 ? std::max<int64_t>(0, p - s.window + 1) : 0;
    if (s.chunk > 0) first = std::max(first, p - p % s.chunk);
    std::vector<double> out(size_t(s.n_head) * size_t(s.head_dim_v));
    for (int h = 0; h < s.n_head; h++) {
        const int g = h / group;
        std::vector<double> w;
        double m = s.sinks ? double(s.sinks[h]) : -INFINITY;
        for (int64_t j = first; j <= p; j++) {
            double dot = 0;
            for (int d = 0; d < s.head_dim; d++) dot += double(q[size_t(h * s.head_dim + d)]) * K[size_t(j * kw + g * s.head_dim + d)];
            w.push_back(dot * s.scale);
            m = std::max(m, w.back());
        }
        double total = s.sinks ? std::exp(double(s.sinks[h]) - m) : 0.0;
        for (double& x : w) total += (x = std::exp(x - m));
        for (int d = 0; d < s.head_dim_v; d++) {
            double acc = 0;
            for (int64_t j = first; j <= p; j++) acc += w[size_t(j - first)] * V[size_t(j * vw + g * s.head_dim_v + d)];
            out[size_t(h * s.head_dim_v + d)] = acc / total;
        }
    }
    return out;
}

struct Case {
    AttentionShape shape;
    int64_t n_tok, pos0;
};

TEST(AttentionQ8, EveryLevelWithinBoundsOfDequantizedAndFloatCache) {
    const float sinks[8] = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, -3.0f, 0.25f, 4.0f};
    std::vector<Case> cases;
    const AttentionShape qwen30b{32, 4, 128, 128, 1.0f / std::sqrt(128.0f)};
    const AttentionShape gqa2{4, 2, 64, 64, 0.125f};
    const AttentionShape no_gqa{3, 3, 32, 32, 0.2f};
    const AttentionShape wide_v{8, 2, 32, 96, 0.25f};
    const AttentionShape windowed_sinks{8, 1, 64, 64, 0.125f, 300, sinks};
    AttentionShape chunked{4, 2, 32, 32, 0.25f};
    chunked.chunk = 200;
    for (const AttentionShape& s : {qwen30b, gqa2, no_gqa, wide_v, windowed_sinks, chunked}) {
        cases.push_back({s, 1, 0});
        cases.push_back({s, 1, 777});  // odd length, several blocks
        // A batch: tiles (64 query rows: 2 to 21 tokens here), blocks shared by a tile.
        cases.push_back({s, s.n_head >= 32 ? 3 : 13, 560});
    }
    ThreadPool pool(2);
    for (const Case& c : cases) {
        const AttentionShape& s = c.shape;
        const int64_t n_ctx = c.pos0 + c.n_tok, kw = int64_t(s.n_head_kv) * s.head_dim, vw = int64_t(s.n_head_kv) * s.head_dim_v;
        AlignedBuffer kc(size_t(n_ctx * kv_row_bytes(GgmlType::Q8_0, kw))), vc(size_t(n_ctx * kv_row_bytes(GgmlType::Q8_0, vw)));
        const KvLayer kv{GgmlType::Q8_0, kw, vw, kc.data(), vc.data()};
        const std::vector<float> k = random_vector(size_t(n_ctx * kw), 41, 0.5f), v = random_vector(size_t(n_ctx * vw), 42);
        for (int64_t t = 0; t < n_ctx; t++) kv_store(kv, t, k.data() + t * kw, v.data() + t * vw);
        std::vector<float> kq(k.size()), vq(v.size());  // what the cache holds
        ASSERT_TRUE(dequantize_row(GgmlType::Q8_0, kc.data(), kq.data(), int64_t(k.size())));
        ASSERT_TRUE(dequantize_row(GgmlType::Q8_0, vc.data(), vq.data(), int64_t(v.size())));
        const std::vector<float> q = random_vector(size_t(c.n_tok * s.n_head * s.head_dim), 43, 0.5f);

        double q_max = 0, k_max = 0, v_max = 0, dv_max = 0;
        for (float x : q) q_max = std::max(q_max, double(std::fabs(x)));
        for (float x : kq) k_max = std::max(k_max, double(std::fabs(x)));
        for (float x : vq) v_max = std::max(v_max, double(std::fabs(x)));
        for (size_t i = 0; i < v.size(); i++) dv_max = std::max(dv_max, double(std::fabs(v[i] - vq[i])));
        // The quantizer's guarantee, block by block.
        for (const std::vector<float>* x : {&k, &v}) {
            const std::vector<float>& xq = x == &k ? kq : vq;
            for (size_t b = 0; b < x->size(); b += QK) {
                double amax = 0, worst = 0;
                for (size_t i = b; i < b + QK; i++) {
                    amax = std::max(amax, double(std::fabs((*x)[i])));
                    worst = std::max(worst, double(std::fabs((*x)[i] - xq[i])));
                }
                ASSERT_LE(worst, amax / 127 * (0.5 + 127.0 / 2048) * (1 + 1e-6));
            }
        }
        // e_q: the largest move of a scaled score the quantization of K causes.
        const int group = s.n_head / s.n_head_kv;
        double e_q = 0;
        for (int64_t t = 0; t < c.n_tok; t++) {
            for (int h = 0; h < s.n_head; h++) {
                for (int64_t j = 0; j <= c.pos0 + t; j++) {
                    double e = 0;
                    for (int d = 0; d < s.head_dim; d++) {
                        const size_t ki = size_t(j * kw + (h / group) * s.head_dim + d);
                        e += std::fabs(double(q[size_t((t * s.n_head + h) * s.head_dim + d)])) * std::fabs(k[ki] - kq[ki]);
                    }
                    e_q = std::max(e_q, e * s.scale);
                }
            }
        }
        const double err = gamma(s.head_dim) * s.head_dim * q_max * k_max * 1.01 * s.scale;
        const double rounding = (std::expm1(2 * err) + 16 * kU + gamma(n_ctx)) * v_max;
        const double quantized = rounding + std::expm1(2 * e_q) * v_max + dv_max;

        const size_t row = size_t(s.n_head * s.head_dim_v);
        std::vector<std::vector<double>> want_q, want_f;
        for (int64_t t = 0; t < c.n_tok; t++) {
            const std::vector<float> qt(q.begin() + t * s.n_head * s.head_dim, q.begin() + (t + 1) * s.n_head * s.head_dim);
            want_q.push_back(attention_double(s, qt, kq, vq, c.pos0 + t));
            want_f.push_back(attention_double(s, qt, k, v, c.pos0 + t));
        }
        std::vector<float> scratch(attention_scratch_floats(s, n_ctx, pool.size())), got(size_t(c.n_tok) * row);
        for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
            if (set_simd_level(l) != l) continue;
            attention(pool, s, kv, q.data(), c.n_tok, c.pos0, n_ctx, scratch.data(), got.data());
            double worst_q = 0, worst_f = 0, l2 = 0, l2_ref = 0;
            for (int64_t t = 0; t < c.n_tok; t++) {
                for (size_t i = 0; i < row; i++) {
                    const double g = got[size_t(t) * row + i];
                    worst_q = std::max(worst_q, std::fabs(g - want_q[size_t(t)][i]));
                    worst_f = std::max(worst_f, std::fabs(g - want_f[size_t(t)][i]));
                    l2 += (g - want_f[size_t(t)][i]) * (g - want_f[size_t(t)][i]);
                    l2_ref += want_f[size_t(t)][i] * want_f[size_t(t)][i];
                }
            }
            const std::string what = std::string(simd_level_name(l)) + " heads " + std::to_string(s.n_head) + "/" +
                                     std::to_string(s.n_head_kv) + " dim " + std::to_string(s.head_dim) + " pos0 " +
                                     std::to_string(c.pos0) + " n_tok " + std::to_string(c.n_tok);
            EXPECT_LE(worst_q, rounding) << what;
            EXPECT_LE(worst_f, quantized) << what;
            if (c.pos0 == 777 && l == best_simd_level())
                printf("%s: vs float K/V relative L2 %.2e, worst %.2e (bound %.2e)\n", what.c_str(),
                       std::sqrt(l2 / l2_ref), worst_f, quantized);
        }
        set_simd_level(best_simd_level());
    }
}

// A head dimension that is not a multiple of 32 cannot start each head on a
// block: refused with a message, never run.
TEST(AttentionQ8, HeadsNotMultipleOf32AreRefused) {
    EXPECT_NO_THROW(check_kv_type(GgmlType::Q8_0, 64, 128));
    EXPECT_THROW(check_kv_type(GgmlType::Q8_0, 48, 48), std::runtime_error);
    EXPECT_THROW(check_kv_type(GgmlType::Q8_0, 64, 80), std::runtime_error);
    EXPECT_NO_THROW(check_kv_type(GgmlType::F16, 48, 48));
    EXPECT_EQ(kv_row_bytes(GgmlType::Q8_0, 256), 8 * 34);
    EXPECT_EQ(kv_row_bytes(GgmlType::F16, 256), 512);
}

}  // namespace
}  // namespace ms
