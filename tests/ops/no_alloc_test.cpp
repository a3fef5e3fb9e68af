// Decode's per-token operations allocate nothing: attention() at every SIMD
// level and linear() / linear_many() are called hundreds of times per token.
// This binary counts every operator new, from any thread.
// The replacements below pair malloc with free; GCC's new/delete matching
// does not see through the replaced operators and warns on every container.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "ops/attention.h"
#include "ops/buffer.h"
#include "ops/linear.h"
#include "quant/cpu.h"
#include "test_util.h"

namespace {
std::atomic<long> g_news{0};
}  // namespace

void* operator new(size_t n) {
    g_news.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace ms {
namespace {

TEST(NoAlloc, AttentionAndLinearAllocateNothingPerCall) {
    const AttentionShape s{32, 4, 128, 128, 0.088f};
    const int64_t n_ctx = 300, kw = 4 * 128;
    const std::vector<float> k = random_vector(size_t(kw), 1), q = random_vector(32 * 128, 2);
    ThreadPool pool(2);
    std::vector<float> scratch(attention_scratch_floats(s, n_ctx, 2)), out(32 * 128);

    const std::vector<float> w = random_vector(size_t(64 * 2048), 3), x = random_vector(2048, 4);
    const Tensor t{GgmlType::F32, 2048, 64, reinterpret_cast<const uint8_t*>(w.data())};
    const Tensor* ws[2] = {&t, &t};
    std::vector<float> y0(64), y1(64);
    float* ys[2] = {y0.data(), y1.data()};
    AlignedBuffer act(linear_many_scratch_bytes(ws, 2, 1));

    for (GgmlType type : {GgmlType::F16, GgmlType::F32}) {
        AlignedBuffer kc(size_t(n_ctx * kw) * 4), vc(size_t(n_ctx * kw) * 4);
        const KvLayer kv{type, kw, kw, kc.data(), vc.data()};
        for (int64_t p = 0; p < n_ctx; p++) kv_store(kv, p, k.data(), k.data());
        for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
            if (set_simd_level(l) != l) continue;
            // One call first: first-use statics (the scalar F16 table) are not per call.
            attention(pool, s, kv, q.data(), 1, n_ctx - 1, n_ctx, scratch.data(), out.data());
            const long before = g_news.load();
            for (int64_t pos = 1; pos < n_ctx; pos += 37) {
                attention(pool, s, kv, q.data(), 1, pos, n_ctx, scratch.data(), out.data());
                linear(pool, t, x.data(), 1, y0.data(), act.data());
                linear_many(pool, ws, 2, x.data(), 1, ys, act.data());
            }
            EXPECT_EQ(g_news.load() - before, 0) << simd_level_name(l) << " " << type_name(type);
        }
        set_simd_level(best_simd_level());
    }
}

}  // namespace
}  // namespace ms
