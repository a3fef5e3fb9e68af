// Sliding-window attention over a ring cache (ops/attention.h KvLayer.ring,
// AttentionShape.window): at every SIMD level and with each cache type, a
// query sees exactly its window, the same bits as plain causal attention over
// a cache that holds only the window's positions, while batches wrap the ring
// many times. The ring is kept in each layout (a plane per KV head, as the
// models keep it, with an F16 cache's K in transposed tiles, or the heads
// side by side, as the window's copy is): the layout moves no bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/attention.h"
#include "ops/buffer.h"
#include "quant/cpu.h"
#include "quant/half.h"
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
                for (int layout = 0; layout < 3; layout++) {
                    const bool planes = layout > 0, tiled = layout == 2;
                    if (tiled && !kv_tiles_k(type)) continue;
                    SCOPED_TRACE(std::string(simd_level_name(level)) + " " + type_name(type) + " batches of " +
                                 std::to_string(batch) +
                                 (tiled ? ", K in tiles" : planes ? ", a plane per head" : ", heads side by side"));
                    const int64_t ring = kv_ring_rows(window, batch);
                    const int64_t rows = tiled ? kv_plane_rows(ring + window - 1) : ring + window - 1;
                    AlignedBuffer kc(size_t(rows) * row), vc(size_t(rows) * row);
                    const int64_t plane_rows = planes ? rows : 0;
                    const KvLayer kv{type, kw, kw, kc.data(), vc.data(), ring, window - 1, plane_rows, planes ? 2 : 1,
                                     tiled};
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

// K in tiles: element e of head h's key at row r sits at h * plane_rows *
// dim + (r / kKvTile) * kKvTile * dim + e * kKvTile + r % kKvTile; V keeps its
// rows in planes.
TEST(AttentionWindow, TilesHoldEachKeyTransposed) {
    const int64_t rows = kv_plane_rows(21), kw = 2 * 32;
    ASSERT_EQ(rows % kKvTile, 0);
    const std::vector<float> k = random_vector(size_t(rows * kw), 43), v = random_vector(size_t(rows * kw), 44);
    std::vector<uint16_t> kc(size_t(rows * kw)), vc(size_t(rows * kw));
    const KvLayer kv{GgmlType::F16, kw, kw, reinterpret_cast<uint8_t*>(kc.data()), reinterpret_cast<uint8_t*>(vc.data()),
                     0, 0, rows, 2, true};
    for (int64_t p = 0; p < 21; p++) kv_store(kv, p, k.data() + p * kw, v.data() + p * kw);
    for (int h = 0; h < 2; h++) {
        for (int64_t r = 0; r < 21; r++) {
            for (int e = 0; e < 32; e++) {
                const size_t at = size_t(h * rows * 32 + r / kKvTile * kKvTile * 32 + e * kKvTile + r % kKvTile);
                ASSERT_EQ(kc[at], fp32_to_fp16(k[size_t(r * kw + h * 32 + e)])) << h << " " << r << " " << e;
                ASSERT_EQ(vc[size_t((h * rows + r) * 32 + e)], fp32_to_fp16(v[size_t(r * kw + h * 32 + e)]));
            }
        }
    }
}

// Long contexts in tiles: blocks of several hundred positions that start
// inside a tile (a window's first position, a chunk's), decoded on two
// threads and prefilled in tiles of tokens, give the bits of the same cache
// kept in rows, at every level.
TEST(AttentionWindow, TiledKeysGiveTheBitsOfRows) {
    const int n_kv = 2, dim = 64, n_head = 8;
    const int64_t kw = n_kv * dim, n_pos = 1500;
    const std::vector<float> k = random_vector(size_t(n_pos * kw), 51, 0.5f);
    const std::vector<float> v = random_vector(size_t(n_pos * kw), 52);
    const std::vector<float> q = random_vector(size_t(n_pos * n_head * dim), 53, 0.5f);
    ThreadPool pool(2);
    const int64_t rows = kv_plane_rows(n_pos);
    const size_t row = size_t(kv_row_bytes(GgmlType::F16, kw));
    AlignedBuffer kr(size_t(rows) * row), vr(size_t(rows) * row), kt(size_t(rows) * row), vt(size_t(rows) * row);
    const KvLayer in_rows{GgmlType::F16, kw, kw, kr.data(), vr.data(), 0, 0, rows, n_kv, false};
    const KvLayer in_tiles{GgmlType::F16, kw, kw, kt.data(), vt.data(), 0, 0, rows, n_kv, true};
    for (int64_t p = 0; p < n_pos; p++) {
        kv_store(in_rows, p, k.data() + p * kw, v.data() + p * kw);
        kv_store(in_tiles, p, k.data() + p * kw, v.data() + p * kw);
    }
    for (SimdLevel level : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
        if (set_simd_level(level) != level) continue;
        for (int64_t window : {int64_t(0), int64_t(333)}) {
            for (int64_t chunk : {int64_t(0), int64_t(700)}) {
                AttentionShape s{n_head, n_kv, dim, dim, 0.125f};
                s.window = window;
                s.chunk = chunk;
                SCOPED_TRACE(std::string(simd_level_name(level)) + " window " + std::to_string(window) + " chunk " +
                             std::to_string(chunk));
                std::vector<float> scratch(attention_scratch_floats(s, n_pos, pool.size()));
                const size_t out_n = size_t(n_head * dim);
                // Decode at a few positions, then a prefill of 37 tokens.
                for (int64_t p : {int64_t(0), int64_t(17), int64_t(401), int64_t(1024), int64_t(1499)}) {
                    std::vector<float> a(out_n), b(out_n);
                    attention(pool, s, in_rows, q.data() + p * int64_t(out_n), 1, p, n_pos, scratch.data(), a.data());
                    attention(pool, s, in_tiles, q.data() + p * int64_t(out_n), 1, p, n_pos, scratch.data(), b.data());
                    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), out_n * 4)) << "position " << p;
                }
                const int64_t p0 = 1203, n = 37;
                std::vector<float> a(size_t(n) * out_n), b(size_t(n) * out_n);
                attention(pool, s, in_rows, q.data() + p0 * int64_t(out_n), n, p0, n_pos, scratch.data(), a.data());
                attention(pool, s, in_tiles, q.data() + p0 * int64_t(out_n), n, p0, n_pos, scratch.data(), b.data());
                ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
            }
        }
    }
    set_simd_level(best_simd_level());
}

}  // namespace
}  // namespace ms
