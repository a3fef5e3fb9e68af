#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/activation.h"
#include "ops/attention_kernels.h"
#include "quant/cpu.h"
#include "quant/half.h"

namespace ms {

int64_t kv_ring_rows(int64_t window, int64_t max_batch) {
    // The batch's first query still needs window - 1 positions before the
    // batch once all max_batch of its keys are written.
    return window - 1 + max_batch;
}

void kv_store(const KvLayer& kv, int64_t pos, const float* k, const float* v) {
    const bool v_in_k = kv.v == kv.k;
    auto put = [&](int64_t row) {
        if (kv.type == GgmlType::F32) {
            std::memcpy(kv.k + size_t(row * kv.k_width) * 4, k, size_t(kv.k_width) * 4);
            if (!v_in_k) std::memcpy(kv.v + size_t(row * kv.v_width) * 4, v, size_t(kv.v_width) * 4);
            return;
        }
        uint16_t* kd = reinterpret_cast<uint16_t*>(kv.k) + row * kv.k_width;
        uint16_t* vd = reinterpret_cast<uint16_t*>(kv.v) + row * kv.v_width;
        for (int64_t i = 0; i < kv.k_width; i++) kd[i] = fp32_to_fp16(k[i]);
        if (!v_in_k) {
            for (int64_t i = 0; i < kv.v_width; i++) vd[i] = fp32_to_fp16(v[i]);
        }
    };
    const int64_t row = kv.ring > 0 ? pos % kv.ring : pos;
    put(row);
    if (kv.ring > 0 && row < kv.tail) put(row + kv.ring);
}

namespace {

// Scores rows are padded to whole vectors for the SIMD softmax.
int64_t scores_stride(int64_t n_ctx) {
    return (n_ctx + kAttentionSimdWidth - 1) / kAttentionSimdWidth * kAttentionSimdWidth;
}

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

// The scalar reference: one query head against positions [0, n_pos) of one
// KV head.
void attend_head(const AttentionShape& s, const KvLayer& kv, int kv_head, const float* q, int64_t n_pos, float sink,
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
    softmax(scores, n_pos, s.scale, sink);

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

// The SIMD loops for the active level, or null for the scalar reference.
const AttentionKernels* simd_kernels(const AttentionShape& s) {
    if (s.head_dim % kAttentionSimdWidth != 0 || s.head_dim_v % kAttentionSimdWidth != 0) return nullptr;
    switch (simd_level()) {
        case SimdLevel::Avx512: return &kAttentionAvx512;
        case SimdLevel::Avx2: return &kAttentionAvx2;
        case SimdLevel::Scalar: break;
    }
    return nullptr;
}

// The `group` query heads of KV head kv_head (q: their rows, side by side)
// against positions [0, n_pos), through the SIMD loops: each cache row is read
// once for the whole group. scores holds group rows, s_stride floats apart.
void attend_group(const AttentionShape& s, const AttentionKernels& simd, const KvLayer& kv, int kv_head, int group,
                  const float* q, int64_t n_pos, const float* sinks, int64_t s_stride, float* scores, float* qh,
                  float* out) {
    const int64_t k_off = int64_t(kv_head) * s.head_dim;
    const int64_t v_off = int64_t(kv_head) * s.head_dim_v;
    if (kv.type == GgmlType::F32) {
        const float* K = reinterpret_cast<const float*>(kv.k) + k_off;
        simd.scores_f32(q, group, K, kv.k_width, s.head_dim, n_pos, scores, s_stride);
    } else {
        for (int d = 0; d < group * s.head_dim; d++) qh[d] = fp16_to_fp32(fp32_to_fp16(q[d]));
        const uint16_t* K = reinterpret_cast<const uint16_t*>(kv.k) + k_off;
        simd.scores_f16(qh, group, K, kv.k_width, s.head_dim, n_pos, scores, s_stride);
    }
    for (int h = 0; h < group; h++) simd.softmax(scores + h * s_stride, n_pos, s.scale, sinks ? sinks[h] : -INFINITY);
    if (kv.type == GgmlType::F32) {
        const float* V = reinterpret_cast<const float*>(kv.v) + v_off;
        simd.mix_f32(scores, s_stride, group, V, kv.v_width, s.head_dim_v, n_pos, out);
    } else {
        const uint16_t* V = reinterpret_cast<const uint16_t*>(kv.v) + v_off;
        simd.mix_f16(scores, s_stride, group, V, kv.v_width, s.head_dim_v, n_pos, out);
    }
}

// Query heads [h0, h0 + n_h) of KV head g's group (their rows at qg, outputs
// at og) against positions [0, n_pos) of `kv`, through the SIMD loops or the
// scalar ones. A head's result does not depend on the heads beside it.
void attend_kv_head(const AttentionShape& s, const AttentionKernels* simd, const KvLayer& kv, int g, int h0, int n_h,
                    const float* qg, int64_t n_pos, int64_t s_stride, float* scores, float* qh, float* og) {
    const int group = s.n_head / s.n_head_kv;
    const float* sinks = s.sinks ? s.sinks + g * group + h0 : nullptr;
    if (simd) {
        attend_group(s, *simd, kv, g, n_h, qg, n_pos, sinks, s_stride, scores, qh, og);
        return;
    }
    for (int h = 0; h < n_h; h++) {
        attend_head(s, kv, g, qg + h * s.head_dim, n_pos, sinks ? sinks[h] : -INFINITY, scores, qh,
                    og + h * s.head_dim_v);
    }
}

// The cache seen from row `row` on: its positions in order, one run of rows.
KvLayer from_row(const KvLayer& kv, int64_t row) {
    const size_t elt = kv.type == GgmlType::F16 ? 2 : 4;
    KvLayer at = kv;
    at.k += size_t(row * kv.k_width) * elt;
    at.v += size_t(row * kv.v_width) * elt;
    return at;
}

}  // namespace

size_t attention_scratch_floats(const AttentionShape& s, int64_t n_ctx) {
    // Scores and the F16-rounded query for each head of one KV head's group.
    return size_t(s.n_head / s.n_head_kv) * size_t(scores_stride(n_ctx) + s.head_dim);
}

void attention(ThreadPool& pool, const AttentionShape& s, const KvLayer& kv, const float* q, int64_t n_tok,
               int64_t pos0, int64_t n_ctx, float* scratch, float* out) {
    const int group = s.n_head / s.n_head_kv;
    const size_t per_thread = attention_scratch_floats(s, n_ctx);
    const AttentionKernels* simd = simd_kernels(s);
    const int64_t s_stride = scores_stride(n_ctx);
    // One work item per (token, KV head): its query heads share every cache
    // row read. Decode has n_head_kv items for the threads to share.
    pool.parallel_for(n_tok * s.n_head_kv, [&](int64_t b, int64_t e, int thread) {
        float* scores = scratch + size_t(thread) * per_thread;
        float* qh = scores + size_t(group) * size_t(s_stride);
        for (int64_t i = b; i < e; i++) {
            const int64_t t = i / s.n_head_kv;
            const int g = int(i % s.n_head_kv);
            const int64_t h0 = t * s.n_head + int64_t(g) * group;  // the group's first query head, all tokens counted
            const float* qg = q + h0 * s.head_dim;
            float* og = out + h0 * s.head_dim_v;
            const int64_t p = pos0 + t;
            int64_t first = s.window > 0 ? std::max<int64_t>(0, p - s.window + 1) : 0;
            if (s.chunk > 0) first = std::max(first, p - p % s.chunk);
            const int64_t n_pos = p - first + 1;
            const KvLayer at = from_row(kv, kv.ring > 0 ? first % kv.ring : first);
            attend_kv_head(s, simd, at, g, 0, group, qg, n_pos, s_stride, scores, qh, og);
        }
    });
}

void attention_scores(const KvLayer& kv, const float* q, int n_q, int dim, int64_t first, int64_t n_pos,
                      float* scores, int64_t s_stride) {
    const AttentionShape shape{n_q, 1, dim, dim, 1.0f, 0, nullptr};
    const AttentionKernels* simd = simd_kernels(shape);
    if (kv.type == GgmlType::F32) {
        const float* K = reinterpret_cast<const float*>(kv.k) + first * kv.k_width;
        if (simd) {
            simd->scores_f32(q, n_q, K, kv.k_width, dim, n_pos, scores, s_stride);
            return;
        }
        for (int h = 0; h < n_q; h++) {
            scores_for(q + h * dim, dim, n_pos, [&](int64_t j, int d) { return K[j * kv.k_width + d]; },
                       scores + h * s_stride);
        }
        return;
    }
    const uint16_t* K = reinterpret_cast<const uint16_t*>(kv.k) + first * kv.k_width;
    if (simd) {
        simd->scores_f16(q, n_q, K, kv.k_width, dim, n_pos, scores, s_stride);
        return;
    }
    const float* table = fp16_table();
    for (int h = 0; h < n_q; h++) {
        scores_for(q + h * dim, dim, n_pos, [&](int64_t j, int d) { return table[K[j * kv.k_width + d]]; },
                   scores + h * s_stride);
    }
}

size_t attention_selected_scratch_floats(const AttentionShape& s, const KvLayer& kv, int top_k) {
    // The loops' scratch for top_k positions, then the gathered K (and V
    // unless it is a view of K) rows: floats hold F16 rows too.
    const int64_t width = kv.k_width + (kv.v == kv.k ? 0 : kv.v_width);
    return attention_scratch_floats(s, top_k) + size_t(top_k) * size_t(width);
}

void attention_selected(ThreadPool& pool, const AttentionShape& s, const KvLayer& kv, const float* q, int64_t n_tok,
                        const int32_t* sel, const int32_t* n_sel, int top_k, float* scratch, float* out) {
    const int group = s.n_head / s.n_head_kv;
    const size_t per_thread = attention_selected_scratch_floats(s, kv, top_k);
    const size_t loop_floats = attention_scratch_floats(s, top_k);
    const AttentionKernels* simd = simd_kernels(s);
    const int64_t s_stride = scores_stride(top_k);
    const size_t elt = kv.type == GgmlType::F16 ? 2 : 4;
    const bool v_in_k = kv.v == kv.k;
    const size_t k_row = size_t(kv.k_width) * elt, v_row = size_t(kv.v_width) * elt;
    // MLA has one KV head: a decoded token would be one work item, so a
    // group's query heads are split over the threads too (each part gathers
    // the rows for itself).
    const int64_t n_kv = n_tok * s.n_head_kv;
    int split = 1;
    while (group % (split * 2) == 0 && n_kv * split < pool.size()) split *= 2;
    const int part_heads = group / split;
    pool.parallel_for(n_kv * split, [&](int64_t b, int64_t e, int thread) {
        float* scores = scratch + size_t(thread) * per_thread;
        float* qh = scores + size_t(group) * size_t(s_stride);
        uint8_t* rows = reinterpret_cast<uint8_t*>(scores + loop_floats);
        for (int64_t i = b; i < e; i++) {
            const int64_t t = i / (s.n_head_kv * split);
            const int g = int(i / split % s.n_head_kv);
            const int h_part = int(i % split) * part_heads;
            const int64_t h0 = t * s.n_head + int64_t(g) * group + h_part;
            const int64_t n_pos = n_sel[t];
            const int32_t* pos = sel + t * top_k;
            KvLayer at = kv;
            at.ring = at.tail = 0;
            at.k = rows;
            at.v = v_in_k ? rows : rows + size_t(n_pos) * k_row;
            for (int64_t j = 0; j < n_pos; j++) {
                std::memcpy(at.k + size_t(j) * k_row, kv.k + size_t(pos[j]) * k_row, k_row);
                if (!v_in_k) std::memcpy(at.v + size_t(j) * v_row, kv.v + size_t(pos[j]) * v_row, v_row);
            }
            attend_kv_head(s, simd, at, g, h_part, part_heads, q + h0 * s.head_dim, n_pos, s_stride, scores, qh,
                           out + h0 * s.head_dim_v);
        }
    });
}

}  // namespace ms
