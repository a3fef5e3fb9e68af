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

void IndexerScratch::init(const IndexerShape& s, int max_batch, int64_t positions, int n_threads) {
    n_ctx = positions;
    const size_t B = size_t(max_batch), H = size_t(s.n_head), D = size_t(s.head_dim);
    iq.resize(B * H * D * 4);
    ik.resize(B * D * 4);
    w.resize(B * H * 4);
    scores.resize(size_t(n_threads) * size_t(n_ctx) * 4);
    order.resize(size_t(n_threads) * size_t(n_ctx) * 4);
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

    // Token t's score of each position up to its own, chunk by chunk: every
    // head's dot products with the chunk, then the heads' weighted sum (in
    // head order) per position.
    const int K = s.top_k;
    auto score_chunks = [&](int t, int64_t c0, int64_t c1, float* dots, float* scores) {
        const int64_t n_pos = pos0 + t + 1;
        const float* q = iq + int64_t(t) * H * D;
        const float* wt = w + int64_t(t) * H;
        for (int64_t c = c0; c < c1; c++) {
            const int64_t p0 = c * kChunk, np = std::min(kChunk, n_pos - p0);
            attention_scores(keys, q, H, D, p0, np, dots, kChunk);
            for (int64_t j = 0; j < np; j++) {
                float score = 0;
                for (int h = 0; h < H; h++) score += wt[h] * std::max(dots[h * kChunk + j], 0.0f);
                scores[p0 + j] = score;
            }
        }
    };
    // The best K, ties to the earlier position so the choice is one whatever
    // the partial order nth_element leaves; then in position order, the
    // order the attention sums in.
    auto choose = [&](int t, const float* scores, int32_t* order) {
        const int64_t n_pos = pos0 + t + 1;
        std::iota(order, order + n_pos, 0);
        std::nth_element(order, order + K - 1, order + n_pos, [&](int32_t a, int32_t b) {
            return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
        });
        std::sort(order, order + K);
        std::copy_n(order, K, sel + int64_t(t) * K);
        n_sel[t] = K;
    };
    struct Rows {
        float* dots;
        float* scores;
        int32_t* order;
    };
    auto rows_of = [&](int thread) {
        const size_t at = size_t(thread) * size_t(sc.n_ctx);
        return Rows{sc.dots.f32() + size_t(thread) * size_t(H) * size_t(kChunk), sc.scores.f32() + at,
                    reinterpret_cast<int32_t*>(sc.order.data()) + at};
    };

    // While a token has at most K positions it attends to all of them.
    int first = 0;
    for (; first < n && pos0 + first + 1 <= K; first++) {
        std::iota(sel + int64_t(first) * K, sel + int64_t(first) * K + pos0 + first + 1, 0);
        n_sel[first] = int32_t(pos0 + first + 1);
    }
    if (n - first >= pool.size()) {
        // A prompt: a token per thread at a time, the longest first (the
        // pool hands chunks out in order, so the short ones even it out).
        pool.parallel_for(n - first, [&](int64_t b, int64_t e, int thread) {
            const Rows r = rows_of(thread);
            for (int64_t i = b; i < e; i++) {
                const int t = n - 1 - int(i);
                score_chunks(t, 0, (pos0 + t + kChunk) / kChunk, r.dots, r.scores);
                choose(t, r.scores, r.order);
            }
        });
        return;
    }
    // Decode: the threads share each token's positions.
    const Rows mine = rows_of(0);
    for (int t = first; t < n; t++) {
        pool.parallel_for((pos0 + t + kChunk) / kChunk, [&](int64_t b, int64_t e, int thread) {
            score_chunks(t, b, e, rows_of(thread).dots, mine.scores);
        });
        choose(t, mine.scores, mine.order);
    }
}

}  // namespace ms
