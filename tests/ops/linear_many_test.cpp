// linear_many() against separate linear() calls: the same bytes for every
// output, for sets of matrices over weight types that want different
// activation formats (Q4_K, Q6_K: Q8_K; Q8_0: Q8_0; F16: F16; F32: F32), at
// decode and batch sizes, any thread count and every SIMD level; and it
// writes no scratch past linear_many_scratch_bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "ops/buffer.h"
#include "ops/linear.h"
#include "quant/blocks.h"
#include "quant/cpu.h"
#include "quant/half.h"
#include "test_util.h"

namespace ms {
namespace {

// rows x cols of type t: random quant bytes with finite fp16 scales, or
// random F16/F32 values.
AlignedBuffer random_weights(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
    const size_t bytes = row_bytes(t, cols) * size_t(rows);
    AlignedBuffer buf(bytes);
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 0.05f);
    uint8_t* p = buf.data();
    if (t == GgmlType::F32 || t == GgmlType::F16) {
        for (int64_t i = 0; i < rows * cols; i++) {
            const float f = nd(rng);
            if (t == GgmlType::F32) {
                std::memcpy(p + i * 4, &f, 4);
            } else {
                const uint16_t h = fp32_to_fp16(f);
                std::memcpy(p + i * 2, &h, 2);
            }
        }
        return buf;
    }
    for (size_t i = 0; i < bytes; i++) p[i] = uint8_t(rng());
    const size_t block = type_traits(t).type_size;
    auto scale = [&] { return fp32_to_fp16(std::fabs(nd(rng)) * 0.1f + 1e-3f); };
    for (size_t b = 0; b < bytes; b += block) {
        if (t == GgmlType::Q4_K) {
            BlockQ4_K* q = reinterpret_cast<BlockQ4_K*>(p + b);
            q->d = scale();
            q->dmin = scale();
        } else if (t == GgmlType::Q6_K) {
            reinterpret_cast<BlockQ6_K*>(p + b)->d = scale();
        } else if (t == GgmlType::Q8_0) {
            reinterpret_cast<BlockQ8_0*>(p + b)->d = scale();
        }
    }
    return buf;
}

struct Set {
    const char* name;
    std::vector<GgmlType> types;
    std::vector<int64_t> rows;
};

TEST(LinearMany, SameBytesAsSeparateLinearCalls) {
    const int64_t cols = 512;
    const std::vector<Set> sets = {
        {"Q4_K_M attention (q, k Q4_K; v Q6_K)", {GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K}, {256, 64, 64}},
        {"one matrix", {GgmlType::Q4_K}, {37}},
        {"five activation formats",
         {GgmlType::F32, GgmlType::Q8_0, GgmlType::Q6_K, GgmlType::F16, GgmlType::Q4_K, GgmlType::Q8_0},
         {19, 64, 33, 8, 128, 5}},
        {"Q8_0 and F16", {GgmlType::Q8_0, GgmlType::F16, GgmlType::Q8_0}, {96, 96, 1}},
    };
    for (const Set& set : sets) {
        const int n_w = int(set.types.size());
        std::vector<AlignedBuffer> data;
        std::vector<Tensor> tensors;
        for (int i = 0; i < n_w; i++) {
            data.push_back(random_weights(set.types[size_t(i)], set.rows[size_t(i)], cols, uint32_t(i + 1)));
            tensors.push_back(Tensor{set.types[size_t(i)], cols, set.rows[size_t(i)], data.back().data()});
        }
        std::vector<const Tensor*> w;
        for (const Tensor& t : tensors) w.push_back(&t);
        for (int64_t n_tok : {1, 3, 16}) {
            const std::vector<float> x = random_vector(size_t(cols * n_tok), uint32_t(n_tok));
            for (SimdLevel level : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
                if (set_simd_level(level) != level) continue;
                for (int threads : {1, 2, 3}) {
                    ThreadPool pool(threads);
                    std::vector<std::vector<float>> want(static_cast<size_t>(n_w)), got(static_cast<size_t>(n_w));
                    std::vector<float*> y;
                    size_t act_one = 0;
                    for (const Tensor& t : tensors) act_one = std::max(act_one, linear_scratch_bytes(t, n_tok));
                    AlignedBuffer act1(act_one);
                    for (int i = 0; i < n_w; i++) {
                        want[size_t(i)].resize(size_t(tensors[size_t(i)].rows * n_tok));
                        got[size_t(i)].assign(want[size_t(i)].size(), NAN);
                        linear(pool, tensors[size_t(i)], x.data(), n_tok, want[size_t(i)].data(), act1.data());
                        y.push_back(got[size_t(i)].data());
                    }
                    // Scratch of exactly the stated size (64-byte aligned start),
                    // then a guard that must come back untouched.
                    const size_t scratch = linear_many_scratch_bytes(w.data(), n_w, n_tok);
                    AlignedBuffer act(scratch + 256);
                    std::memset(act.data() + scratch, 0xA5, 256);
                    linear_many(pool, w.data(), n_w, x.data(), n_tok, y.data(), act.data());
                    for (int i = 0; i < n_w; i++) {
                        ASSERT_EQ(0, std::memcmp(got[size_t(i)].data(), want[size_t(i)].data(), want[size_t(i)].size() * 4))
                            << set.name << ": matrix " << i << " (" << type_name(set.types[size_t(i)]) << "), n_tok "
                            << n_tok << ", " << simd_level_name(level) << ", " << threads << " threads";
                    }
                    for (size_t b = 0; b < 256; b++) ASSERT_EQ(act.data()[scratch + b], 0xA5) << set.name;
                }
            }
            set_simd_level(best_simd_level());
        }
    }
}

// The scratch holds one copy of the input per distinct activation format.
TEST(LinearMany, ScratchHoldsOneCopyPerActivationFormat) {
    const int64_t cols = 256, n_tok = 5;
    const Tensor q4{GgmlType::Q4_K, cols, 8, nullptr}, q6{GgmlType::Q6_K, cols, 8, nullptr};
    const Tensor q8{GgmlType::Q8_0, cols, 8, nullptr};
    const Tensor* same[] = {&q4, &q6, &q4};
    EXPECT_EQ(linear_many_scratch_bytes(same, 3, n_tok), (linear_scratch_bytes(q4, n_tok) + 63) / 64 * 64);
    const Tensor* mixed[] = {&q4, &q8, &q6};
    EXPECT_EQ(linear_many_scratch_bytes(mixed, 3, n_tok),
              (linear_scratch_bytes(q4, n_tok) + 63) / 64 * 64 + (linear_scratch_bytes(q8, n_tok) + 63) / 64 * 64);
}

}  // namespace
}  // namespace ms
