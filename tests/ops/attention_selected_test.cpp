// Sparse attention over chosen positions (attention_selected) against dense
// attention() over a cache holding only those rows, bit for bit; with every
// position chosen it is dense attention itself. attention_scores against a
// double-precision dot within the float rounding bound. LayerNorm against its
// formula.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ops/attention.h"
#include "ops/buffer.h"
#include "ops/norm.h"
#include "quant/cpu.h"
#include "quant/half.h"
#include "test_util.h"

namespace ms {
namespace {

struct Cache {
    AlignedBuffer k, v;
    KvLayer kv;
    // n rows; V a view of K (MLA's compressed rows) when v_width is 0.
    Cache(GgmlType type, int64_t k_width, int64_t v_width, int64_t n, uint32_t seed) {
        const size_t elt = type == GgmlType::F32 ? 4 : 2;
        k.resize(size_t(n * k_width) * elt);
        if (v_width > 0) v.resize(size_t(n * v_width) * elt);
        kv = KvLayer{type, k_width, v_width > 0 ? v_width : k_width, k.data(), v_width > 0 ? v.data() : k.data()};
        const std::vector<float> kr = random_vector(size_t(n * k_width), seed, 0.5f);
        const std::vector<float> vr = random_vector(size_t(n * std::max<int64_t>(v_width, 1)), seed + 1);
        for (int64_t p = 0; p < n; p++) kv_store(kv, p, kr.data() + p * k_width, vr.data() + p * v_width);
    }
};

// MLA's shape (one KV head, V the front of the row) and a GQA one with its own V.
struct Shape {
    AttentionShape s;
    int64_t v_width;  // 0: V is a view of K
};
const Shape kShapes[] = {{{16, 1, 80, 64, 0.1f, 0, nullptr}, 0}, {{8, 2, 32, 48, 0.2f, 0, nullptr}, 96}};

TEST(AttentionSelected, EqualsDenseAttentionOverTheChosenRows) {
    const int top_k = 5;
    const int32_t chosen[top_k] = {0, 3, 4, 9, 17};  // query at position 17 (its own among them)
    for (const Shape& sh : kShapes) {
        const AttentionShape& s = sh.s;
        const int64_t kw = int64_t(s.n_head_kv) * s.head_dim;
        for (GgmlType type : {GgmlType::F32, GgmlType::F16}) {
            Cache full(type, kw, sh.v_width, 18, 1);
            // The chosen rows, in order, as a cache of their own.
            Cache part(type, kw, sh.v_width, top_k, 1);
            const size_t elt = type == GgmlType::F32 ? 4 : 2;
            for (int j = 0; j < top_k; j++) {
                std::memcpy(part.k.data() + size_t(j * kw) * elt, full.k.data() + size_t(chosen[j] * kw) * elt,
                            size_t(kw) * elt);
                if (sh.v_width > 0) {
                    std::memcpy(part.v.data() + size_t(j * sh.v_width) * elt,
                                full.v.data() + size_t(chosen[j] * sh.v_width) * elt, size_t(sh.v_width) * elt);
                }
            }
            const std::vector<float> q = random_vector(size_t(s.n_head * s.head_dim), 3, 0.5f);
            const size_t n_out = size_t(s.n_head * s.head_dim_v);
            for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
                if (set_simd_level(l) != l) continue;
                for (int threads : {1, 2, 5}) {  // 2 and 5 split a KV head's query heads over threads
                    ThreadPool pool(threads);
                    std::vector<float> dense_scratch(attention_scratch_floats(s, top_k, threads));
                    std::vector<float> want(n_out), got(n_out);
                    attention(pool, s, part.kv, q.data(), 1, top_k - 1, top_k, dense_scratch.data(), want.data());
                    std::vector<float> scratch(size_t(threads) * attention_selected_scratch_floats(s, full.kv, top_k));
                    const int32_t n_sel = top_k;
                    attention_selected(pool, s, full.kv, q.data(), 1, chosen, &n_sel, top_k, scratch.data(),
                                       got.data());
                    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), n_out * 4))
                        << simd_level_name(l) << " " << type_name(type) << " threads " << threads << " heads "
                        << s.n_head << "/" << s.n_head_kv;
                }
            }
            set_simd_level(best_simd_level());
        }
    }
}

// A batch where each query chooses every position up to its own is causal
// dense attention.
TEST(AttentionSelected, EveryPositionChosenIsDenseAttention) {
    const int64_t n_tok = 7;
    for (const Shape& sh : kShapes) {
        const AttentionShape& s = sh.s;
        Cache c(GgmlType::F16, int64_t(s.n_head_kv) * s.head_dim, sh.v_width, n_tok, 5);
        std::vector<int32_t> sel(size_t(n_tok * n_tok)), n_sel(static_cast<size_t>(n_tok));
        for (int64_t t = 0; t < n_tok; t++) {
            n_sel[size_t(t)] = int32_t(t + 1);
            for (int64_t p = 0; p <= t; p++) sel[size_t(t * n_tok + p)] = int32_t(p);
        }
        const std::vector<float> q = random_vector(size_t(n_tok * s.n_head * s.head_dim), 6, 0.5f);
        const size_t n_out = size_t(n_tok * s.n_head * s.head_dim_v);
        ThreadPool pool(2);
        std::vector<float> dense_scratch(attention_scratch_floats(s, n_tok, 2));
        std::vector<float> scratch(2 * attention_selected_scratch_floats(s, c.kv, int(n_tok)));
        std::vector<float> want(n_out), got(n_out);
        attention(pool, s, c.kv, q.data(), n_tok, 0, n_tok, dense_scratch.data(), want.data());
        attention_selected(pool, s, c.kv, q.data(), n_tok, sel.data(), n_sel.data(), int(n_tok), scratch.data(),
                           got.data());
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), n_out * 4)) << "heads " << s.n_head;
    }
}

// Each score within gamma(dim) * sum |q_i k_i| of the double dot product (the
// bound attention_simd_test derives), at every level, F32 and F16 keys, dims
// with and without the SIMD loops, from a position other than 0.
TEST(AttentionSelected, ScoresWithinRoundingBound) {
    const double u = 1.0 / (1 << 24);
    for (int dim : {24, 64}) {
        const int n_q = 3, n = 40, first = 5;
        for (GgmlType type : {GgmlType::F32, GgmlType::F16}) {
            Cache c(type, dim, 0, first + n, 7);
            std::vector<float> q = random_vector(size_t(n_q * dim), 8);
            if (type == GgmlType::F16) {
                for (float& x : q) x = fp16_to_fp32(fp32_to_fp16(x));
            }
            for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
                if (set_simd_level(l) != l) continue;
                std::vector<float> scores(size_t(n_q * n));
                attention_scores(c.kv, q.data(), n_q, dim, first, n, scores.data(), n);
                for (int h = 0; h < n_q; h++) {
                    for (int j = 0; j < n; j++) {
                        double dot = 0, mag = 0;
                        for (int d = 0; d < dim; d++) {
                            const int64_t at = int64_t(first + j) * dim + d;
                            const uint8_t* kd = c.k.data();
                            const double k = type == GgmlType::F32
                                                 ? double(reinterpret_cast<const float*>(kd)[at])
                                                 : double(fp16_to_fp32(reinterpret_cast<const uint16_t*>(kd)[at]));
                            dot += double(q[size_t(h * dim + d)]) * k;
                            mag += std::fabs(double(q[size_t(h * dim + d)]) * k);
                        }
                        const double bound = double(dim) * u / (1 - double(dim) * u) * mag;
                        EXPECT_LE(std::fabs(double(scores[size_t(h * n + j)]) - dot), bound)
                            << simd_level_name(l) << " dim " << dim << " head " << h << " key " << j;
                    }
                }
            }
            set_simd_level(best_simd_level());
        }
    }
}

TEST(LayerNorm, MatchesFormula) {
    const std::vector<float> x = random_vector(64, 9, 2.0f), w = random_vector(64, 10), b = random_vector(64, 11);
    double mean = 0, var = 0;
    for (float v : x) mean += v;
    mean /= 64;
    for (float v : x) var += (v - mean) * (v - mean);
    var /= 64;
    std::vector<float> out(64);
    for (float eps : {0.0f, 1e-5f}) {
        layer_norm(x.data(), w.data(), b.data(), 64, eps, out.data());
        for (size_t i = 0; i < 64; i++) {
            const double want = (x[i] - mean) / std::sqrt(var + eps) * w[i] + b[i];
            EXPECT_NEAR(out[i], want, 1e-5 * (std::fabs(want) + 1)) << i;
        }
    }
    // In place, without weight or bias: mean 0, variance 1.
    std::vector<float> y = x;
    layer_norm(y.data(), nullptr, nullptr, 64, 0.0f, y.data());
    double m = 0, s2 = 0;
    for (float v : y) m += v;
    for (float v : y) s2 += double(v) * v;
    EXPECT_NEAR(m / 64, 0.0, 1e-6);
    EXPECT_NEAR(s2 / 64, 1.0, 1e-5);
}

}  // namespace
}  // namespace ms
