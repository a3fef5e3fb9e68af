#include "model/dsa_indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/linear.h"
#include "ops/norm.h"
#include "quant/half.h"

namespace ms {

namespace {

size_t elt_bytes(GgmlType t) { return t == GgmlType::F16 ? 2 : 4; }

// Positions a thread scores at a time: every head's dot products with them
// fit in its scratch.
constexpr int64_t kChunk = 256;

}  // namespace

uint64_t IndexerLayer::weight_bytes() const {
    uint64_t b = 0;
    for (const Tensor* t : {&wq_b, &wk, &proj}) b += t->bytes();
    return b;
}

KvLayer indexer_key_layer(const IndexerShape& s, GgmlType type, uint8_t* rows) {
    return KvLayer{type, s.head_dim, s.head_dim, rows, rows, 0, 0};
}

int64_t indexer_key_bytes(const IndexerShape& s, GgmlType type) {
    return int64_t(s.head_dim) * int64_t(elt_bytes(type));
}

void IndexerScratch::init(const IndexerShape& s, int max_batch, int64_t n_ctx, int n_threads) {
    const size_t B = size_t(max_batch), H = size_t(s.n_head), D = size_t(s.head_dim);
    iq.resize(B * H * D * 4);
    ik.resize(B * D * 4);
    w.resize(B * H * 4);
    scores.resize(size_t(n_ctx) * 4);
    order.resize(size_t(n_ctx) * 4);
    dots.resize(size_t(n_threads) * H * size_t(kChunk) * 4);
}

uint64_t IndexerScratch::bytes() const {
    uint64_t b = 0;
    for (const AlignedBuffer* p : {&iq, &ik, &w, &scores, &order, &dots}) b += p->size();
    return b;
}

size_t IndexerScratch::acts_per_token(const std::vector<IndexerLayer>& layers) {
    size_t act = 0;
    for (const IndexerLayer& l : layers) {
        if (l.wk.empty()) continue;
        const Tensor* in[2] = {&l.wk, &l.proj};
        act = std::max({act, linear_many_scratch_bytes(in, 2, 1), linear_scratch_bytes(l.wq_b, 1)});
    }
    return act;
}

void indexer_select(ThreadPool& pool, const IndexerShape& s, const Rope& rope, const IndexerLayer& l,
                    const float* x, const float* qr, int n, int64_t pos0, const float* cos_sin, const KvLayer& keys,
                    IndexerScratch& sc, int32_t* sel, int32_t* n_sel) {
    const int H = s.n_head, D = s.head_dim;
    float* iq = sc.iq.f32();
    float* ik = sc.ik.f32();
    float* w = sc.w.f32();
    const Tensor* in[2] = {&l.wk, &l.proj};
    float* const out[2] = {ik, w};
    linear_many(pool, in, 2, x, n, out, sc.acts);
    linear(pool, l.wq_b, qr, n, iq, sc.acts);

    // Keys LayerNormed (the reference reads no eps for them: 0) and roped on
    // their first dims, queries roped the same way; the head weights carry
    // the 1/sqrt(head_dim * n_head) scale (positive: the order is the same
    // wherever it goes). With an F16 cache the queries are rounded to F16,
    // as attention does.
    const float w_scale = 1.0f / std::sqrt(float(D) * float(H));
    const bool f16 = keys.type == GgmlType::F16;
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; t++) {
            float* k = ik + t * D;
            layer_norm(k, l.k_norm.f32(), l.k_norm_bias.f32(), D, 0.0f, k);
            rope_apply(rope, cos_sin + t * rope.n_rot, k, 1, D);
            kv_store(keys, pos0 + t, k, nullptr);
            float* q = iq + t * H * D;
            rope_apply(rope, cos_sin + t * rope.n_rot, q, H, D);
            if (f16) {
                for (int i = 0; i < H * D; i++) q[i] = fp16_to_fp32(fp32_to_fp16(q[i]));
            }
            for (int h = 0; h < H; h++) w[t * H + h] *= w_scale;
        }
    });

    float* scores = sc.scores.f32();
    int32_t* order = reinterpret_cast<int32_t*>(sc.order.data());
    const int K = s.top_k;
    for (int t = 0; t < n; t++) {
        const int64_t n_pos = pos0 + t + 1;
        int32_t* out_sel = sel + int64_t(t) * K;
        if (n_pos <= K) {
            std::iota(out_sel, out_sel + n_pos, 0);
            n_sel[t] = int32_t(n_pos);
            continue;
        }
        const float* q = iq + int64_t(t) * H * D;
        const float* wt = w + int64_t(t) * H;
        // Each thread's chunk of positions: every head's dot products with
        // them, then the heads' weighted sum (in head order) per position.
        pool.parallel_for((n_pos + kChunk - 1) / kChunk, [&](int64_t b, int64_t e, int thread) {
            float* dots = sc.dots.f32() + size_t(thread) * size_t(H) * size_t(kChunk);
            for (int64_t c = b; c < e; c++) {
                const int64_t p0 = c * kChunk, np = std::min(kChunk, n_pos - p0);
                attention_scores(keys, q, H, D, p0, np, dots, kChunk);
                for (int64_t j = 0; j < np; j++) {
                    float score = 0;
                    for (int h = 0; h < H; h++) score += wt[h] * std::max(dots[h * kChunk + j], 0.0f);
                    scores[p0 + j] = score;
                }
            }
        });
        // The best K, ties to the earlier position so the choice is one
        // whatever the partial order nth_element leaves; then in position
        // order, the order the attention sums in.
        std::iota(order, order + n_pos, 0);
        std::nth_element(order, order + K - 1, order + n_pos, [&](int32_t a, int32_t b) {
            return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
        });
        std::sort(order, order + K);
        std::copy_n(order, K, out_sel);
        n_sel[t] = K;
    }
}

}  // namespace ms
