// Sliding-window attention over a ring cache (ops/attention.h KvLayer.ring,
// AttentionShape.window): at every SIMD level and with each cache type, a
// query sees exactly its window, the same bits as plain causal attention over
// a cache that holds only the window's positions, while batches wrap the ring
// many times. The ring is kept in either layout (a plane per KV head, as the
// models keep it, or the heads side by side, as the window's copy is): the
// layout moves no bit.
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

    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0}) {
        const size_t row = size_t(kv_row_bytes(type, kw));
        for (SimdLevel level : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
            if (set_simd_level(level) != level) continue;
            for (int64_t batch : {1, 5, 16}) {
                for (bool planes : {false, true}) {
                    SCOPED_TRACE(std::string(simd_level_name(level)) + " " + type_name(type) + " batches of " +
                                 std::to_string(batch) + (planes ? ", a plane per head" : ", heads side by side"));
                    const int64_t ring = kv_ring_rows(window, batch), rows = ring + window - 1;
                    AlignedBuffer kc(size_t(rows) * row), vc(size_t(rows) * row);
                    const int64_t plane_rows = planes ? rows : 0;
                    const KvLayer kv{type, kw, kw, kc.data(), vc.data(), ring, window - 1, plane_rows, planes ? 2 : 1};
                    // As a forward pass does: a batch's keys are stored, then its queries attend.
                    for (int64_t b = 0; b < n_pos; b += batch) {
                        const int64_t m = std::min(batch, n_pos - b);
                        for (int64_t t = b; t < b + m; t++) kv_store(kv, t, k.data() + t * kw, v.data() + t * kw);
                        attention(pool, sliding, kv, q.data() + b * 4 * 32, m, b, window, scratch.data(),
                                  got.data() + b * 4 * 32);
                    }
                    for (int64_t p = 0; p < n_pos; p++) {
                        const int64_t first = std::max<int64_t>(0, p - window + 1), m = p - first + 1;
                        AlignedBuffer kw_only(size_t(m) * row), vw_only(size_t(m) * row);
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
        }
        set_simd_level(best_simd_level());
    }
}

// The models' layout itself: head h's part of row r sits at row r of plane
// h, each plane `plane_rows` rows, so a head's positions are one stretch.
TEST(AttentionWindow, PlanesKeepEachHeadsRowsTogether) {
    const int64_t rows = 10, kw = 2 * 32;
    const std::vector<float> k = random_vector(size_t(rows * kw), 41), v = random_vector(size_t(rows * kw), 42);
    std::vector<float> kc(size_t(rows * kw)), vc(size_t(rows * kw));
    const KvLayer kv{
        GgmlType::F32, kw, kw, reinterpret_cast<uint8_t*>(kc.data()), reinterpret_cast<uint8_t*>(vc.data()), 0, 0,
        rows,          2};
    for (int64_t p = 0; p < rows; p++) kv_store(kv, p, k.data() + p * kw, v.data() + p * kw);
    for (int h = 0; h < 2; h++) {
        for (int64_t r = 0; r < rows; r++) {
            for (int e = 0; e < 32; e++) {
                ASSERT_EQ(kc[size_t((h * rows + r) * 32 + e)], k[size_t(r * kw + h * 32 + e)]) << h << " " << r;
                ASSERT_EQ(vc[size_t((h * rows + r) * 32 + e)], v[size_t(r * kw + h * 32 + e)]) << h << " " << r;
            }
        }
    }
}

}  // namespace
}  // namespace ms
