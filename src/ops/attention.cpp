#include "ops/attention.h"

#include <cstring>

#include "ops/activation.h"
#include "quant/half.h"

namespace ms {

void kv_store(const KvLayer& kv, int64_t pos, const float* k, const float* v) {
    if (kv.type == GgmlType::F32) {
        std::memcpy(kv.k + size_t(pos * kv.k_width) * 4, k, size_t(kv.k_width) * 4);
        std::memcpy(kv.v + size_t(pos * kv.v_width) * 4, v, size_t(kv.v_width) * 4);
        return;
    }
    uint16_t* kd = reinterpret_cast<uint16_t*>(kv.k) + pos * kv.k_width;
    uint16_t* vd = reinterpret_cast<uint16_t*>(kv.v) + pos * kv.v_width;
    for (int64_t i = 0; i < kv.k_width; i++) kd[i] = fp32_to_fp16(k[i]);
    for (int64_t i = 0; i < kv.v_width; i++) vd[i] = fp32_to_fp16(v[i]);
}

size_t attention_scratch_floats(const AttentionShape& s, int64_t n_ctx) {
    return size_t(n_ctx) + size_t(s.head_dim);
}

namespace {

// Every fp16 value widened once: the cache is read element by element, and a
// table lookup is far cheaper than decoding the bits each time.
struct Fp16Table {
    float v[65536];
    Fp16Table() {
        for (uint32_t h = 0; h < 65536; h++) v[h] = fp16_to_fp32(uint16_t(h));
    }
};

const float* fp16_table() {
    static const Fp16Table table;  // static storage: no allocation, built on first use
    return table.v;
}

// Scores of a query against kBlock keys at once: each is summed in element
// order like a plain loop (the order that agrees best with the reference),
// but the kBlock independent sums keep the CPU busy instead of waiting on one
// chain of additions.
constexpr int kBlock = 8;

template <class KeyAt>
void scores_for(const float* q, int head_dim, int64_t n_pos, KeyAt key, float* scores) {
    int64_t j = 0;
    for (; j + kBlock <= n_pos; j += kBlock) {
        float acc[kBlock] = {};
        for (int d = 0; d < head_dim; d++) {
            for (int l = 0; l < kBlock; l++) acc[l] += q[d] * key(j + l, d);
        }
        for (int l = 0; l < kBlock; l++) scores[j + l] = acc[l];
    }
    for (; j < n_pos; j++) {
        float acc = 0;
        for (int d = 0; d < head_dim; d++) acc += q[d] * key(j, d);
        scores[j] = acc;
    }
}

// One query head against positions [0, n_pos) of one KV head.
void attend_head(const AttentionShape& s, const KvLayer& kv, int kv_head, const float* q, int64_t n_pos,
                 float* scores, float* qh, float* out) {
    const int64_t k_off = int64_t(kv_head) * s.head_dim;
    const int64_t v_off = int64_t(kv_head) * s.head_dim_v;
    const float* table = kv.type == GgmlType::F16 ? fp16_table() : nullptr;
    if (kv.type == GgmlType::F32) {
        const float* K = reinterpret_cast<const float*>(kv.k) + k_off;
        const int64_t w = kv.k_width;
        scores_for(q, s.head_dim, n_pos, [&](int64_t j, int d) { return K[j * w + d]; }, scores);
    } else {
        for (int d = 0; d < s.head_dim; d++) qh[d] = fp16_to_fp32(fp32_to_fp16(q[d]));
        const uint16_t* K = reinterpret_cast<const uint16_t*>(kv.k) + k_off;
        const int64_t w = kv.k_width;
        scores_for(qh, s.head_dim, n_pos, [&](int64_t j, int d) { return table[K[j * w + d]]; }, scores);
    }
    softmax(scores, n_pos, s.scale);

    for (int d = 0; d < s.head_dim_v; d++) out[d] = 0;
    if (kv.type == GgmlType::F32) {
        const float* V = reinterpret_cast<const float*>(kv.v);
        for (int64_t j = 0; j < n_pos; j++) {
            const float* vr = V + j * kv.v_width + v_off;
            const float p = scores[j];
            for (int d = 0; d < s.head_dim_v; d++) out[d] += p * vr[d];
        }
    } else {
        const uint16_t* V = reinterpret_cast<const uint16_t*>(kv.v);
        for (int64_t j = 0; j < n_pos; j++) {
            const uint16_t* vr = V + j * kv.v_width + v_off;
            const float p = scores[j];
            for (int d = 0; d < s.head_dim_v; d++) out[d] += p * table[vr[d]];
        }
    }
}

}  // namespace

void attention(ThreadPool& pool, const AttentionShape& s, const KvLayer& kv, const float* q, int64_t n_tok,
               int64_t pos0, int64_t n_ctx, float* scratch, float* out) {
    const int group = s.n_head / s.n_head_kv;
    const size_t per_thread = attention_scratch_floats(s, n_ctx);
    pool.parallel_for(n_tok * s.n_head, [&](int64_t b, int64_t e, int thread) {
        float* scores = scratch + size_t(thread) * per_thread;
        float* qh = scores + n_ctx;
        for (int64_t i = b; i < e; i++) {
            const int64_t t = i / s.n_head;
            const int h = int(i % s.n_head);
            attend_head(s, kv, h / group, q + (t * s.n_head + h) * s.head_dim, pos0 + t + 1, scores, qh,
                        out + (t * s.n_head + h) * s.head_dim_v);
        }
    });
}

}  // namespace ms
