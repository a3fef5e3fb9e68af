// Sliding-window attention over a ring cache (ops/attention.h KvLayer.ring,
// AttentionShape.window): at every SIMD level and with either cache type, a
// query sees exactly its window, the same bits as plain causal attention over
// a cache that holds only the window's positions, while batches wrap the ring
// many times.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/attention.h"
#include "ops/buffer.h"
#include "quant/cpu.h"
#include "test_util.h"

namespace ms {
namespace {

TEST(AttentionWindow, RingEqualsTheWindowsKeysAlone) {
    const int64_t window = 8, n_pos = 45, kw = 2 * 32;
    const AttentionShape plain{4, 2, 32, 32, 1.0f};
    AttentionShape sliding = plain;
    sliding.window = window;
    const std::vector<float> k = random_vector(size_t(n_pos * kw), 31, 0.5f);
    const std::vector<float> v = random_vector(size_t(n_pos * kw), 32);
    const std::vector<float> q = random_vector(size_t(n_pos * 4 * 32), 33, 0.5f);
    ThreadPool pool(2);
    std::vector<float> scratch(attention_scratch_floats(plain, window, pool.size()));
    std::vector<float> got(size_t(n_pos * 4 * 32)), want(4 * 32);

    for (GgmlType type : {GgmlType::F32, GgmlType::F16}) {
        const size_t elt = type == GgmlType::F32 ? 4 : 2;
        for (SimdLevel level : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
            if (set_simd_level(level) != level) continue;
            for (int64_t batch : {1, 5, 16}) {
                SCOPED_TRACE(std::string(simd_level_name(level)) + " " + type_name(type) + " batches of " +
                             std::to_string(batch));
                const int64_t ring = kv_ring_rows(window, batch);
                AlignedBuffer kc(size_t((ring + window - 1) * kw) * elt), vc(size_t((ring + window - 1) * kw) * elt);
                const KvLayer kv{type, kw, kw, kc.data(), vc.data(), ring, window - 1};
                // As a forward pass does: a batch's keys are stored, then its queries attend.
                for (int64_t b = 0; b < n_pos; b += batch) {
                    const int64_t m = std::min(batch, n_pos - b);
                    for (int64_t t = b; t < b + m; t++) kv_store(kv, t, k.data() + t * kw, v.data() + t * kw);
                    attention(pool, sliding, kv, q.data() + b * 4 * 32, m, b, window, scratch.data(),
                              got.data() + b * 4 * 32);
                }
                for (int64_t p = 0; p < n_pos; p++) {
                    const int64_t first = std::max<int64_t>(0, p - window + 1), m = p - first + 1;
                    AlignedBuffer kw_only(size_t(m * kw) * elt), vw_only(size_t(m * kw) * elt);
                    const KvLayer alone{type, kw, kw, kw_only.data(), vw_only.data()};
                    for (int64_t j = 0; j < m; j++) {
                        kv_store(alone, j, k.data() + (first + j) * kw, v.data() + (first + j) * kw);
                    }
                    attention(pool, plain, alone, q.data() + p * 4 * 32, 1, m - 1, window, scratch.data(),
                              want.data());
                    ASSERT_EQ(0, std::memcmp(want.data(), got.data() + p * 4 * 32, want.size() * 4))
                        << "position " << p;
                }
            }
        }
        set_simd_level(best_simd_level());
    }
}

}  // namespace
}  // namespace ms
