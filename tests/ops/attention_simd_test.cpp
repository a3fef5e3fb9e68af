// The SIMD attention loops (ops/attention_kernels.h) at every level this CPU
// runs, against double-precision sums of the same float inputs, and
// attention() at each SIMD level against the scalar reference within
// rounding bounds (bit-identity across levels is not the contract: products
// are fused and exponentials are a polynomial), and bit-identical across
// thread counts, batches and the flash-decoding split at a given level.
//
// Tolerances against double are rounding-error bounds, not fitted constants.
// With u = 2^-24 and gamma(n) = n u / (1 - n u), any float sum of n terms is
// within gamma(n) * sum |term| of the exact sum (Higham, Accuracy and
// Stability of Numerical Algorithms, 3.1). So a score of head_dim products is
// within gamma(head_dim) * sum |q_i k_i|, an output element within
// gamma(n_pos) * sum_j p_j |v_jd|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "ops/attention.h"
#include "ops/attention_kernels.h"
#include "ops/buffer.h"
#include "quant/cpu.h"
#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/half.h"
#include "quant/quantize.h"
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

// A cache of n_pos rows of `stride` elements as F32, as F16 and (stride a
// multiple of 32) as Q8_0, and the values the F16 and Q8_0 rows hold, widened.
struct Rows {
    std::vector<float> f32, f16_values, q8_values;
    std::vector<uint16_t> f16;
    std::vector<BlockQ8_0> q8;
    Rows(int64_t n_pos, int64_t stride, uint32_t seed) : f32(random_vector(size_t(n_pos * stride), seed)) {
        for (float x : f32) {
            f16.push_back(fp32_to_fp16(x));
            f16_values.push_back(fp16_to_fp32(f16.back()));
        }
        if (stride % QK != 0) return;
        q8.resize(f32.size() / QK);
        quantize_row(GgmlType::Q8_0, f32.data(), q8.data(), int64_t(f32.size()));
        q8_values.resize(f32.size());
        dequantize_row(GgmlType::Q8_0, q8.data(), q8_values.data(), int64_t(f32.size()));
    }
    // The values a cache of type t holds.
    const float* values(GgmlType t) const {
        return t == GgmlType::F32 ? f32.data() : t == GgmlType::F16 ? f16_values.data() : q8_values.data();
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

// One flash-decoding block against double: the maximum is the largest
// scaled score (within the scores' rounding bound), and out / sum, the
// block's attention output, within the weights' and the mix's bounds. With
// e the scores' largest error after scaling, each weight e^(s_j - max) /
// sum is off by at most a factor e^(2e) from the scores, plus 16 ulp for the
// polynomial exponential, the max's subtraction and the division; the mix
// adds gamma(n_pos) of sum_j p_j |v_jd|. A Q8_0 cache is held to the values
// its blocks hold (each exact in float), against the query in float.
TEST(AttentionSimd, BlockWithinRoundingBoundOfDouble) {
    if (simd_levels().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
    for (const Level& lv : simd_levels()) {
        for (int dim : {16, 64, 128}) {
            for (int n_q : {1, 3, 8}) {
                for (int64_t n_pos : {1, 15, 17, 100, 257}) {
                    const int64_t stride = 2 * dim;
                    const Rows k(n_pos, stride, uint32_t(dim + n_q * 7 + n_pos * 3)), v(n_pos, stride, uint32_t(n_pos + 5));
                    const std::vector<float> q_f32 = random_vector(size_t(n_q * dim), uint32_t(n_pos * 11), 2.0f);
                    std::vector<float> q_f16 = q_f32;
                    for (float& x : q_f16) x = fp16_to_fp32(fp32_to_fp16(x));
                    const float scale = 0.3f;
                    const int64_t s_stride = (n_pos + 15) / 16 * 16;
                    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0}) {
                        if (t == GgmlType::Q8_0 && dim % QK != 0) continue;
                        const std::vector<float>& q = t == GgmlType::F16 ? q_f16 : q_f32;
                        std::vector<float> scores(static_cast<size_t>(n_q * s_stride)), max(static_cast<size_t>(n_q)), sum(static_cast<size_t>(n_q)),
                            out(size_t(n_q * dim), NAN);
                        const float* kk = k.values(t);
                        const float* vv = v.values(t);
                        if (t == GgmlType::F16) {
                            lv.kernels->block_f16(q.data(), n_q, k.f16.data() + dim, stride, dim, v.f16.data() + dim, stride,
                                                  dim, n_pos, scale, scores.data(), s_stride, max.data(), sum.data(), out.data());
                        } else if (t == GgmlType::Q8_0) {
                            lv.kernels->block_q8(q.data(), n_q, k.q8.data() + dim / QK, stride / QK, dim, v.q8.data() + dim / QK,
                                                 stride / QK, dim, n_pos, scale, scores.data(), s_stride, max.data(), sum.data(),
                                                 out.data());
                        } else {
                            lv.kernels->block_f32(q.data(), n_q, k.f32.data() + dim, stride, dim, v.f32.data() + dim, stride,
                                                  dim, n_pos, scale, scores.data(), s_stride, max.data(), sum.data(), out.data());
                        }
                        for (int h = 0; h < n_q; h++) {
                            std::vector<double> sc(static_cast<size_t>(n_pos));
                            double want_max = -INFINITY, err = 0;
                            for (int64_t j = 0; j < n_pos; j++) {
                                double dot = 0, mag = 0;
                                for (int d = 0; d < dim; d++) {
                                    const double x = double(q[size_t(h * dim + d)]) * kk[size_t(j * stride + dim + d)];
                                    dot += x;
                                    mag += std::fabs(x);
                                }
                                sc[size_t(j)] = dot * scale;
                                want_max = std::max(want_max, sc[size_t(j)]);
                                err = std::max(err, (gamma(dim) * mag + kU * std::fabs(dot)) * scale);
                            }
                            ASSERT_LE(std::fabs(max[size_t(h)] - want_max), err) << simd_level_name(lv.level);
                            double total = 0;
                            for (double& x : sc) total += (x = std::exp(x - want_max));
                            const double w_rel = std::expm1(2 * err) + 16 * kU;
                            for (int d = 0; d < dim; d++) {
                                double want = 0, mag = 0;
                                for (int64_t j = 0; j < n_pos; j++) {
                                    const double x = sc[size_t(j)] / total * vv[size_t(j * stride + dim + d)];
                                    want += x;
                                    mag += std::fabs(x);
                                }
                                const double got = double(out[size_t(h * dim + d)]) / double(sum[size_t(h)]);
                                ASSERT_LE(std::fabs(got - want), (w_rel + gamma(n_pos)) * mag + 1e-30)
                                    << simd_level_name(lv.level) << " " << type_name(t) << " dim " << dim << " n_q " << n_q
                                    << " n_pos " << n_pos << " h " << h << " d " << d;
                            }
                        }
                    }
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

// attention() at each SIMD level within rounding of the scalar reference,
// across shapes (GQA groups of 8, 4, 2 and 1, head_dim_v != head_dim, odd
// lengths, windows, chunks, sinks), cache types, positions (one block, many,
// more than 32 blocks' worth) and batches. Both are within rounding of the
// exact result: with e the scores' error bound after scaling (gamma(head_dim)
// of the products' magnitudes, both ways), each weight is off by a factor
// e^(2e) plus 16 ulp, and each output element by that times sum_j p_j
// |v_jd| <= max |v| plus the mix's gamma(n_pos) of the same; twice that
// covers the two results.
TEST(AttentionSimd, MatchesScalarReferenceWithinRounding) {
    if (simd_levels().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
    const AttentionShape qwen30b{32, 4, 128, 128, 1.0f / std::sqrt(128.0f)};
    const AttentionShape small{4, 2, 64, 64, 0.125f};
    const AttentionShape no_gqa{6, 6, 32, 32, 0.2f};
    const AttentionShape wide_v{12, 4, 16, 48, 0.25f};
    const AttentionShape gqa3{6, 2, 16, 16, 0.25f};
    const float sinks[8] = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, -3.0f, 0.25f, 4.0f};
    const AttentionShape windowed_sinks{4, 2, 64, 64, 0.125f, 8, sinks};  // gpt-oss's sliding layers
    const AttentionShape long_window{8, 1, 32, 32, 0.2f, 700, sinks};
    AttentionShape chunked{4, 1, 16, 16, 0.25f};
    chunked.chunk = 300;
    std::vector<Case> cases;
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0}) {
        for (const AttentionShape& s : {qwen30b, small, no_gqa, wide_v, gqa3, windowed_sinks, long_window, chunked}) {
            if (t == GgmlType::Q8_0 && (s.head_dim % QK != 0 || s.head_dim_v % QK != 0)) continue;
            for (int64_t pos0 : {0, 6, 100, 1000}) cases.push_back({s, t, 1, pos0});
            cases.push_back({s, t, 9, 3});
            cases.push_back({s, t, 5, 517});
        }
        cases.push_back({small, t, 1, 9000});  // more blocks than kMaxBlocks' minimum length allows
        cases.push_back({long_window, t, 3, 9000});
    }
    ThreadPool pool(2);
    for (const Case& c : cases) {
        const AttentionShape& s = c.shape;
        const int64_t n_ctx = c.pos0 + c.n_tok, kw = int64_t(s.n_head_kv) * s.head_dim, vw = int64_t(s.n_head_kv) * s.head_dim_v;
        AlignedBuffer kc(size_t(n_ctx * kv_row_bytes(c.kv_type, kw))), vc(size_t(n_ctx * kv_row_bytes(c.kv_type, vw)));
        const KvLayer kv{c.kv_type, kw, vw, kc.data(), vc.data()};
        const std::vector<float> k = random_vector(size_t(n_ctx * kw), 11, 0.5f), v = random_vector(size_t(n_ctx * vw), 12);
        for (int64_t t = 0; t < n_ctx; t++) kv_store(kv, t, k.data() + t * kw, v.data() + t * vw);
        const std::vector<float> q = random_vector(size_t(c.n_tok * s.n_head * s.head_dim), 13, 0.5f);
        double q_max = 0, k_max = 0, v_max = 0;
        for (float x : q) q_max = std::max(q_max, double(std::fabs(x)));
        for (float x : k) k_max = std::max(k_max, double(std::fabs(x)));
        for (float x : v) v_max = std::max(v_max, double(std::fabs(x)));
        // |q| and |k| bound the products; F16 and Q8_0 rounding grow neither by much.
        const double err = gamma(s.head_dim) * s.head_dim * q_max * k_max * 1.01 * s.scale;
        const double bound = 2 * (std::expm1(2 * err) + 16 * kU + gamma(n_ctx)) * v_max;
        std::vector<float> scratch(attention_scratch_floats(s, n_ctx, pool.size()));
        const size_t n_out = size_t(c.n_tok * s.n_head * s.head_dim_v);
        std::vector<float> want(n_out), got(n_out);
        set_simd_level(SimdLevel::Scalar);
        attention(pool, s, kv, q.data(), c.n_tok, c.pos0, n_ctx, scratch.data(), want.data());

        for (const Level& lv : simd_levels()) {
            set_simd_level(lv.level);
            attention(pool, s, kv, q.data(), c.n_tok, c.pos0, n_ctx, scratch.data(), got.data());
            double worst = 0;
            for (size_t i = 0; i < n_out; i++) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
            EXPECT_LE(worst, bound) << simd_level_name(lv.level) << " " << type_name(c.kv_type) << " heads " << s.n_head
                                    << "/" << s.n_head_kv << " dim " << s.head_dim << " pos0 " << c.pos0 << " n_tok "
                                    << c.n_tok;
        }
        set_simd_level(best_simd_level());
    }
}

// Random shapes (GQA ratios 1..8, odd lengths, windows, chunks, sinks,
// F32, F16 and Q8_0 caches) at every level: the output's bits do not depend
// on the thread count, nor on a token being decoded alone (its blocks split
// over the threads) or in a batch (its blocks on one thread, in a tile of
// tokens that share the blocks they all see whole).
TEST(AttentionSimd, BitsIndependentOfThreadsAndBatch) {
    std::mt19937 rng(5);
    const float sinks[64] = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, -3.0f, 0.25f, 4.0f};
    ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3), ThreadPool(5)};
    for (int trial = 0; trial < 24; trial++) {
        const int n_head_kv = 1 + int(rng() % 3), ratio = 1 + int(rng() % 8);
        const int head_dim = 16 * (1 + int(rng() % 4));
        AttentionShape s{n_head_kv * ratio, n_head_kv, head_dim, head_dim, 0.3f};
        const int kind = int(rng() % 4);  // plain, window, chunk, sinks
        if (kind == 1) s.window = 1 + int64_t(rng() % 700);
        if (kind == 2) s.chunk = 1 + int64_t(rng() % 700);
        if (kind == 3 && s.n_head <= 8) s.sinks = sinks;
        // Every sixth trial a batch of up to 40 tokens, several tiles of
        // 64 query rows over the group's heads (8 to 64 tokens a tile).
        const int64_t n_ctx = 1 + int64_t(rng() % 1500);
        const int64_t n_tok = std::min(n_ctx, 1 + int64_t(rng() % (trial % 6 == 0 ? 40 : 4)));
        const int64_t pos0 = n_ctx - n_tok;
        const GgmlType types[3] = {GgmlType::F16, GgmlType::F32, GgmlType::Q8_0};
        const GgmlType type = types[rng() % (head_dim % QK == 0 ? 3 : 2)];
        const int64_t kw = int64_t(n_head_kv) * head_dim;
        AlignedBuffer kc(size_t(n_ctx * kv_row_bytes(type, kw))), vc(size_t(n_ctx * kv_row_bytes(type, kw)));
        const KvLayer kv{type, kw, kw, kc.data(), vc.data()};
        const std::vector<float> k = random_vector(size_t(n_ctx * kw), 31 + trial), v = random_vector(size_t(n_ctx * kw), 32);
        for (int64_t t = 0; t < n_ctx; t++) kv_store(kv, t, k.data() + t * kw, v.data() + t * kw);
        const std::vector<float> q = random_vector(size_t(n_tok * s.n_head * head_dim), 33 + trial);
        const size_t row = size_t(s.n_head * head_dim);
        for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
            if (set_simd_level(l) != l) continue;
            std::vector<float> first;
            for (ThreadPool& pool : pools) {
                std::vector<float> scratch(attention_scratch_floats(s, n_ctx, pool.size()));
                std::vector<float> batch(size_t(n_tok) * row), one(row);
                attention(pool, s, kv, q.data(), n_tok, pos0, n_ctx, scratch.data(), batch.data());
                if (first.empty()) first = batch;
                ASSERT_EQ(0, std::memcmp(first.data(), batch.data(), batch.size() * 4))
                    << simd_level_name(l) << " threads " << pool.size() << " trial " << trial;
                // Each token of a short batch; of a long one, its ends and
                // middle (a tile's tokens all take the same path).
                for (int64_t t = 0; t < n_tok; t++) {
                    if (n_tok > 4 && t >= 2 && t != n_tok / 2 && t < n_tok - 2) continue;
                    attention(pool, s, kv, q.data() + size_t(t) * row, 1, pos0 + t, n_ctx, scratch.data(), one.data());
                    ASSERT_EQ(0, std::memcmp(one.data(), first.data() + size_t(t) * row, row * 4))
                        << simd_level_name(l) << " threads " << pool.size() << " trial " << trial << " token " << t;
                }
            }
        }
        set_simd_level(best_simd_level());
    }
}

// The models' layout (a plane per KV head, F16 K in tiles) at gemma4-26b-a4b's
// full-layer width (heads of 512: V rows of 1 KiB, which the value loop takes
// in runs of 16 rows, fewer than narrower heads' 64) and at qwen3's 128,
// decoded over several flash-decoding blocks: at each level within the bound
// of MatchesScalarReferenceWithinRounding of the scalar reference (the levels
// are not held to each other's bits), and bit-identical on 1, 2 and 3
// threads, in a batch and with K in rows (no tiles). At 128 wide the AVX-512
// tiled loop asks each block's value rows (256 of 256 bytes) into L2 while it
// scores and takes them as one run, where the rows loop takes runs of 64:
// each output sums its rows in the same order either way.
TEST(AttentionSimd, HeadsInTilesWithinBoundAndIndependentOfThreads) {
    for (const int dim : {512, 128}) {
        const AttentionShape s{8, 1, dim, dim, 1.0f / std::sqrt(float(dim))};
        const int64_t n_ctx = 1100, kw = dim, rows = kv_plane_rows(n_ctx);
        const std::vector<float> k = random_vector(size_t(n_ctx * kw), 61, 0.5f),
                                 v = random_vector(size_t(n_ctx * kw), 62);
        const std::vector<float> q = random_vector(size_t(3 * 8 * dim), 63, 0.5f);
        AlignedBuffer kc(size_t(rows * kv_row_bytes(GgmlType::F16, kw))),
            vc(size_t(rows * kv_row_bytes(GgmlType::F16, kw)));
        const KvLayer kv{GgmlType::F16, kw, kw, kc.data(), vc.data(), 0, 0, rows, 1, true};
        AlignedBuffer kr(kc.size()), vr(vc.size());
        const KvLayer kv_rows{GgmlType::F16, kw, kw, kr.data(), vr.data(), 0, 0, rows, 1, false};
        for (int64_t t = 0; t < n_ctx; t++) {
            kv_store(kv, t, k.data() + t * kw, v.data() + t * kw);
            kv_store(kv_rows, t, k.data() + t * kw, v.data() + t * kw);
        }
        double v_max = 0;
        for (float x : v) v_max = std::max(v_max, double(std::fabs(x)));
        const double err = gamma(s.head_dim) * s.head_dim * 0.25 * 1.01 * s.scale;
        const double bound = 2 * (std::expm1(2 * err) + 16 * kU + gamma(n_ctx)) * v_max;
        ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
        std::vector<float> scratch(attention_scratch_floats(s, n_ctx, 3));
        const size_t row = size_t(8 * dim);
        std::vector<float> want(3 * row), batch(3 * row), one(row), in_rows(3 * row);
        set_simd_level(SimdLevel::Scalar);
        attention(pools[1], s, kv, q.data(), 3, n_ctx - 3, n_ctx, scratch.data(), want.data());
        for (const Level& lv : simd_levels()) {
            set_simd_level(lv.level);
            attention(pools[1], s, kv, q.data(), 3, n_ctx - 3, n_ctx, scratch.data(), batch.data());
            double worst = 0;
            for (size_t i = 0; i < batch.size(); i++) worst = std::max(worst, std::fabs(double(batch[i]) - want[i]));
            printf("%s, heads of %d: worst |level - scalar| %.3e, bound %.3e\n", simd_level_name(lv.level), dim, worst,
                   bound);
            EXPECT_LE(worst, bound) << simd_level_name(lv.level) << " dim " << dim;
            attention(pools[1], s, kv_rows, q.data(), 3, n_ctx - 3, n_ctx, scratch.data(), in_rows.data());
            ASSERT_EQ(0, std::memcmp(in_rows.data(), batch.data(), batch.size() * 4))
                << simd_level_name(lv.level) << " dim " << dim;
            for (ThreadPool& pool : pools) {
                for (int64_t t = 0; t < 3; t++) {
                    attention(pool, s, kv, q.data() + t * int64_t(row), 1, n_ctx - 3 + t, n_ctx, scratch.data(),
                              one.data());
                    ASSERT_EQ(0, std::memcmp(one.data(), batch.data() + t * int64_t(row), row * 4))
                        << simd_level_name(lv.level) << " dim " << dim << " threads " << pool.size() << " token " << t;
                }
            }
        }
    }
    set_simd_level(best_simd_level());
}

// A decoded token over K in tiles at qwen3-30b-a3b's shape (4 KV heads of 8
// query heads, 128 wide), its 36 blocks of 256 positions shared out over 2,
// 3 and 5 threads in chunks of several blocks each, so that on AVX-512 each
// block's value loop runs interleaved with the next block's score loop
// (AttentionKernels::tiled_pipe): bit for bit the result of the token on one
// thread and in a batch, where every block runs whole, and of K in rows. Also
// tiled_pipe's two halves called alone, against block_f16_tiled, at the
// shapes it interleaves (blocks starting inside a tile among them) and those
// it runs one after the other (4 heads, a block of 513 positions whose
// values are not asked into L2, heads of 48).
TEST(AttentionSimd, PipelinedBlocksGiveBlockByBlockBits) {
    const AttentionShape s{32, 4, 128, 128, 1.0f / std::sqrt(128.0f)};
    const int64_t n_ctx = 9000, kw = 4 * 128, rows = kv_plane_rows(n_ctx);
    const std::vector<float> k = random_vector(size_t(n_ctx * kw), 71, 0.5f), v = random_vector(size_t(n_ctx * kw), 72);
    const std::vector<float> q = random_vector(size_t(2 * 32 * 128), 73, 0.5f);
    AlignedBuffer kc(size_t(rows * kv_row_bytes(GgmlType::F16, kw))), vc(size_t(rows * kv_row_bytes(GgmlType::F16, kw)));
    AlignedBuffer kr(kc.size()), vr(vc.size());
    const KvLayer kv{GgmlType::F16, kw, kw, kc.data(), vc.data(), 0, 0, rows, 4, true};
    const KvLayer kv_rows{GgmlType::F16, kw, kw, kr.data(), vr.data(), 0, 0, rows, 4, false};
    for (int64_t t = 0; t < n_ctx; t++) {
        kv_store(kv, t, k.data() + t * kw, v.data() + t * kw);
        kv_store(kv_rows, t, k.data() + t * kw, v.data() + t * kw);
    }
    ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3), ThreadPool(5)};
    std::vector<float> scratch(attention_scratch_floats(s, n_ctx, 5));
    const size_t row = size_t(32 * 128);
    for (const Level& lv : simd_levels()) {
        set_simd_level(lv.level);
        std::vector<float> batch(2 * row), one(row), in_rows(row);
        attention(pools[1], s, kv, q.data(), 2, n_ctx - 2, n_ctx, scratch.data(), batch.data());
        for (ThreadPool& pool : pools) {
            attention(pool, s, kv, q.data() + row, 1, n_ctx - 1, n_ctx, scratch.data(), one.data());
            ASSERT_EQ(0, std::memcmp(one.data(), batch.data() + row, row * 4))
                << simd_level_name(lv.level) << " threads " << pool.size();
            attention(pool, s, kv_rows, q.data() + row, 1, n_ctx - 1, n_ctx, scratch.data(), in_rows.data());
            ASSERT_EQ(0, std::memcmp(one.data(), in_rows.data(), row * 4))
                << simd_level_name(lv.level) << " threads " << pool.size();
        }
        if (!lv.kernels->tiled_pipe) continue;
        // The halves alone: block a's scores with block b's values (whose
        // scores an earlier call computed), against each block whole.
        struct Case {
            int n_q, dim;
            int64_t n_pos, first;  // block 0's first key
        };
        for (const Case c : {Case{8, 128, 256, 0}, Case{8, 128, 128, 9}, Case{8, 128, 200, 0}, Case{4, 128, 256, 0},
                             Case{8, 128, 513, 0}, Case{8, 48, 256, 0}, Case{8, 512, 64, 0}}) {
            const int64_t stride = (c.n_pos + kAttentionSimdWidth - 1) / kAttentionSimdWidth * kAttentionSimdWidth;
            std::vector<float> sc[2], want_out[2], want_ms[2], got_out[2], got_ms[2];
            std::vector<float> qs = random_vector(size_t(c.n_q * c.dim), 74, 0.5f);
            for (float& x : qs) x = fp16_to_fp32(fp32_to_fp16(x));
            const int64_t n_rows = c.first + 2 * c.n_pos + 16;
            const Rows kr2(n_rows, c.dim, 75), vr2(n_rows, c.dim, 76);
            // K in whole tiles of kKvTile keys, a plane of one head.
            std::vector<uint16_t> kt(size_t(kv_plane_rows(n_rows) * c.dim));
            for (int64_t j = 0; j < n_rows; j++) {
                for (int d = 0; d < c.dim; d++) {
                    kt[size_t(j / kKvTile * kKvTile * c.dim + d * kKvTile + j % kKvTile)] = kr2.f16[size_t(j * c.dim + d)];
                }
            }
            auto block = [&](int i, std::vector<float>& scores, std::vector<float>& out, std::vector<float>& ms) {
                scores.assign(size_t(c.n_q * stride), 0.0f);
                out.assign(size_t(c.n_q * c.dim), 0.0f);
                ms.assign(size_t(2 * c.n_q), 0.0f);
                TiledBlock b;
                b.q = qs.data();
                b.n_q = c.n_q;
                const int64_t j0 = c.first + i * c.n_pos;
                b.k = kt.data() + j0 / kKvTile * kKvTile * c.dim;
                b.k_skip = int(j0 % kKvTile);
                b.dim = b.dim_v = c.dim;
                b.v = vr2.f16.data() + j0 * c.dim;
                b.v_stride = c.dim;
                b.n_pos = c.n_pos;
                b.scale = 0.1f;
                b.scores = scores.data();
                b.s_stride = stride;
                b.max = ms.data();
                b.sum = ms.data() + c.n_q;
                b.out = out.data();
                return b;
            };
            for (int i = 0; i < 2; i++) {
                const TiledBlock b = block(i, sc[i], want_out[i], want_ms[i]);
                lv.kernels->block_f16_tiled(b.q, b.n_q, b.k, b.k_skip, b.dim, b.v, b.v_stride, b.dim_v, b.n_pos,
                                            b.scale, b.scores, b.s_stride, b.max, b.sum, b.out);
            }
            std::vector<float> sc2[2];
            const TiledBlock b0 = block(0, sc2[0], got_out[0], got_ms[0]);
            const TiledBlock b1 = block(1, sc2[1], got_out[1], got_ms[1]);
            lv.kernels->tiled_pipe(&b0, nullptr);
            lv.kernels->tiled_pipe(&b1, &b0);
            lv.kernels->tiled_pipe(nullptr, &b1);
            for (int i = 0; i < 2; i++) {
                EXPECT_EQ(0, std::memcmp(want_out[i].data(), got_out[i].data(), want_out[i].size() * 4))
                    << c.n_q << " heads of " << c.dim << ", " << c.n_pos << " positions, block " << i;
                EXPECT_EQ(0, std::memcmp(want_ms[i].data(), got_ms[i].data(), want_ms[i].size() * 4))
                    << c.n_q << " heads of " << c.dim << ", " << c.n_pos << " positions, block " << i;
            }
        }
    }
    set_simd_level(best_simd_level());
}

// Decode and a batch give the same bits at every level, for any thread count:
// the store's bit-exactness rests on it.
TEST(AttentionSimd, TokenAloneEqualsTokenInBatch) {
    const AttentionShape s{8, 2, 64, 64, 0.125f};
    const int64_t n_tok = 21, kw = 2 * 64;
    const std::vector<float> k = random_vector(size_t(n_tok * kw), 21), v = random_vector(size_t(n_tok * kw), 22);
    const std::vector<float> q = random_vector(size_t(n_tok * 8 * 64), 23);
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0}) {
        AlignedBuffer kc(size_t(n_tok * kv_row_bytes(type, kw))), vc(size_t(n_tok * kv_row_bytes(type, kw)));
        const KvLayer kv{type, kw, kw, kc.data(), vc.data()};
        for (int64_t t = 0; t < n_tok; t++) kv_store(kv, t, k.data() + t * kw, v.data() + t * kw);
        for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
            if (set_simd_level(l) != l) continue;
            ThreadPool pool2(2), pool3(3);
            std::vector<float> scratch(attention_scratch_floats(s, n_tok, 3));
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
