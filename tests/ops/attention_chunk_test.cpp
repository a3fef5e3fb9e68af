// Chunked attention (AttentionShape.chunk, Llama 4's roped layers) against a
// direct computation of its definition: a query at position p attends
// causally to the positions s <= p with floor(s / chunk) == floor(p / chunk),
// softmax(scale q.k) over them, the values mixed by those weights. Over a
// full cache and over a ring sized for a window of `chunk` positions, batch
// after batch as a forward pass stores and attends, across chunk boundaries
// (and at Llama 4's 8192, where the golden files are too short to reach).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/attention.h"
#include "ops/buffer.h"
#include "test_util.h"

namespace ms {
namespace {

constexpr int kHeads = 4, kHeadsKv = 2, kDim = 32;
constexpr int64_t kWidth = kHeadsKv * kDim;

// The definition, in double: output of query head h at position p.
std::vector<double> direct(const std::vector<float>& k, const std::vector<float>& v, const float* q, int64_t p,
                           int64_t chunk, float scale) {
    std::vector<double> out(size_t(kHeads * kDim), 0.0);
    const int64_t first = p / chunk * chunk;
    for (int h = 0; h < kHeads; h++) {
        const int g = h / (kHeads / kHeadsKv);
        std::vector<double> w;
        double max = -INFINITY;
        for (int64_t s = first; s <= p; s++) {
            double d = 0;
            for (int i = 0; i < kDim; i++) d += double(q[h * kDim + i]) * double(k[size_t(s * kWidth + g * kDim + i)]);
            w.push_back(d * scale);
            max = std::max(max, w.back());
        }
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - max));
        for (int64_t s = first; s <= p; s++) {
            for (int i = 0; i < kDim; i++) {
                out[size_t(h * kDim + i)] += w[size_t(s - first)] / sum * double(v[size_t(s * kWidth + g * kDim + i)]);
            }
        }
    }
    return out;
}

// Stores positions [0, n_pos) batch by batch, attends each batch whose
// positions reach `from`, and checks those rows against the definition.
void check(int64_t chunk, int64_t n_pos, int64_t from, int64_t batch, bool ring) {
    SCOPED_TRACE("chunk " + std::to_string(chunk) + (ring ? ", ring" : ", full cache") + ", batches of " +
                 std::to_string(batch));
    const float scale = 1.0f / std::sqrt(float(kDim));
    AttentionShape shape{kHeads, kHeadsKv, kDim, kDim, scale};
    shape.chunk = chunk;
    const std::vector<float> k = random_vector(size_t(n_pos * kWidth), 41, 0.5f);
    const std::vector<float> v = random_vector(size_t(n_pos * kWidth), 42);
    const std::vector<float> q = random_vector(size_t(n_pos * kHeads * kDim), 43, 0.5f);
    const int64_t rows = ring ? kv_ring_rows(chunk, batch) : 0;
    const int64_t cache_rows = ring ? rows + chunk - 1 : n_pos;
    AlignedBuffer kc(size_t(cache_rows * kWidth) * 4), vc(size_t(cache_rows * kWidth) * 4);
    const KvLayer kv{GgmlType::F32, kWidth, kWidth, kc.data(), vc.data(), rows, ring ? chunk - 1 : 0};
    ThreadPool pool(2);
    std::vector<float> scratch(attention_scratch_floats(shape, n_pos, pool.size()));
    std::vector<float> got(size_t(batch * kHeads * kDim));
    int64_t checked = 0;
    for (int64_t b = 0; b < n_pos; b += batch) {
        const int64_t m = std::min(batch, n_pos - b);
        for (int64_t t = b; t < b + m; t++) kv_store(kv, t, k.data() + t * kWidth, v.data() + t * kWidth);
        if (b + m <= from) continue;
        attention(pool, shape, kv, q.data() + b * kHeads * kDim, m, b, n_pos, scratch.data(), got.data());
        for (int64_t t = 0; t < m; t++) {
            const std::vector<double> want = direct(k, v, q.data() + (b + t) * kHeads * kDim, b + t, chunk, scale);
            double num = 0, den = 0;
            const float* row = got.data() + t * kHeads * kDim;
            for (size_t i = 0; i < want.size(); i++) {
                num += (double(row[i]) - want[i]) * (double(row[i]) - want[i]);
                den += want[i] * want[i];
            }
            ASSERT_LE(std::sqrt(num / den), 1e-5) << "position " << b + t;
            checked++;
        }
    }
    EXPECT_GT(checked, 0);
}

TEST(AttentionChunk, SmallChunksMatchTheDefinition) {
    for (int64_t batch : {1, 5, 16}) {
        check(8, 45, 0, batch, false);
        check(8, 45, 0, batch, true);  // the ring wraps many times
    }
}

// Llama 4's chunk of 8192: the queries around the first and second
// boundaries (8191 | 8192, 16383 | 16384) see only their own chunk.
TEST(AttentionChunk, Llama4ChunkAtItsBoundaries) {
    check(8192, 8192 + 24, 8192 - 8, 16, false);
    check(8192, 16384 + 24, 16384 - 8, 16, true);
}

}  // namespace
}  // namespace ms
