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

// The cache seen from row `row` on: its positions in order, one run of rows.
KvLayer from_row(const KvLayer& kv, int64_t row) {
    const size_t elt = kv.type == GgmlType::F16 ? 2 : 4;
    KvLayer at = kv;
    at.k += size_t(row * kv.k_width) * elt;
    at.v += size_t(row * kv.v_width) * elt;
    return at;
}

// Flash-decoding: a query's positions are cut into blocks, each reduced on
// its own to a partial result (AttentionKernels::block_*), and the partials
// are folded in block order. The cut depends on the number of positions
// only, never on the thread count or on whether the blocks of one query run
// on one thread or on many, so every way of computing a token gives the same
// bits. At least kMinBlock positions a block (a block's scores, keys and
// values stay in L2), at most kMaxBlocks blocks (the partials of a decoded
// token stay small).
constexpr int64_t kMinBlock = 256;
constexpr int64_t kMaxBlocks = 32;

int64_t block_len(int64_t n_pos) {
    const int64_t even = (n_pos + kMaxBlocks - 1) / kMaxBlocks;
    return std::max(kMinBlock, (even + 63) / 64 * 64);
}

int64_t block_count(int64_t n_pos) {
    const int64_t len = block_len(n_pos);
    return (n_pos + len - 1) / len;
}

// A partial result for n_q heads: their unnormalized outputs (n_q rows of
// head_dim_v), then n_q maxima, then n_q sums (attention_kernels.h).
size_t partial_floats(const AttentionShape& s, int n_q) { return size_t(n_q) * size_t(s.head_dim_v + 2); }

// A thread's scratch for one group on the SIMD path: the F16-rounded query,
// one block's scores, a block's partial and the running one.
size_t simd_group_floats(const AttentionShape& s, int64_t n_ctx) {
    const size_t group = size_t(s.n_head / s.n_head_kv);
    return group * size_t(s.head_dim + scores_stride(block_len(n_ctx))) + 2 * partial_floats(s, int(group));
}

// The scalar reference's: the group's scores and rounded query.
size_t scalar_group_floats(const AttentionShape& s, int64_t n_ctx) {
    return size_t(s.n_head / s.n_head_kv) * size_t(scores_stride(n_ctx) + s.head_dim);
}

// The level can change between sizing and use (tests set it): room for both.
size_t group_floats(const AttentionShape& s, int64_t n_ctx) {
    return std::max(simd_group_floats(s, n_ctx), scalar_group_floats(s, n_ctx));
}

// q (n_q rows of head_dim) as the block loops take it: rounded to F16 for an
// F16 cache (into qh), as is for an F32 one.
const float* block_query(const KvLayer& kv, const float* q, int n_q, int head_dim, float* qh) {
    if (kv.type == GgmlType::F32) return q;
    for (int i = 0; i < n_q * head_dim; i++) qh[i] = fp16_to_fp32(fp32_to_fp16(q[i]));
    return qh;
}

// Positions [j0, j0 + n) of `at` (consecutive rows) for n_q heads of KV head
// g, reduced to a partial result.
void block_partial(const AttentionShape& s, const AttentionKernels& simd, const KvLayer& at, int g, int n_q,
                   const float* qb, int64_t j0, int64_t n, float* scores, float* part) {
    const int64_t s_stride = scores_stride(n);
    float* max = part + size_t(n_q) * size_t(s.head_dim_v);
    float* sum = max + n_q;
    const int64_t k_at = j0 * at.k_width + int64_t(g) * s.head_dim;
    const int64_t v_at = j0 * at.v_width + int64_t(g) * s.head_dim_v;
    if (at.type == GgmlType::F32) {
        const float* K = reinterpret_cast<const float*>(at.k) + k_at;
        const float* V = reinterpret_cast<const float*>(at.v) + v_at;
        simd.block_f32(qb, n_q, K, at.k_width, s.head_dim, V, at.v_width, s.head_dim_v, n, s.scale, scores, s_stride,
                       max, sum, part);
    } else {
        const uint16_t* K = reinterpret_cast<const uint16_t*>(at.k) + k_at;
        const uint16_t* V = reinterpret_cast<const uint16_t*>(at.v) + v_at;
        simd.block_f16(qb, n_q, K, at.k_width, s.head_dim, V, at.v_width, s.head_dim_v, n, s.scale, scores, s_stride,
                       max, sum, part);
    }
}

void partial_clear(const AttentionShape& s, int n_q, float* acc) {
    std::fill_n(acc, size_t(n_q) * size_t(s.head_dim_v), 0.0f);
    std::fill_n(acc + size_t(n_q) * size_t(s.head_dim_v), n_q, -INFINITY);
    std::fill_n(acc + size_t(n_q) * size_t(s.head_dim_v + 1), n_q, 0.0f);
}

// acc = acc combined with part: both rescaled to the larger maximum. Plain
// float code in a unit without FMA, so the one fold gives the same bits
// wherever it is called from.
void partial_fold(const AttentionShape& s, int n_q, const float* part, float* acc) {
    const int dv = s.head_dim_v;
    const float* pmax = part + size_t(n_q) * size_t(dv);
    float* amax = acc + size_t(n_q) * size_t(dv);
    for (int h = 0; h < n_q; h++) {
        const float m = std::max(amax[h], pmax[h]);
        const float a = amax[h] == -INFINITY ? 0.0f : std::exp(amax[h] - m);
        const float b = pmax[h] == -INFINITY ? 0.0f : std::exp(pmax[h] - m);
        amax[h] = m;
        amax[n_q + h] = amax[n_q + h] * a + pmax[n_q + h] * b;
        float* o = acc + size_t(h) * size_t(dv);
        const float* po = part + size_t(h) * size_t(dv);
        for (int d = 0; d < dv; d++) o[d] = o[d] * a + po[d] * b;
    }
}

// The heads' outputs from their folded partial, the sinks (or null) joining
// each softmax as one more logit without a value.
void partial_finish(const AttentionShape& s, int n_q, const float* acc, const float* sinks, float* out) {
    const int dv = s.head_dim_v;
    const float* amax = acc + size_t(n_q) * size_t(dv);
    for (int h = 0; h < n_q; h++) {
        float sum = amax[n_q + h], a = 1.0f;
        if (sinks && sinks[h] > -INFINITY) {
            const float m = std::max(amax[h], sinks[h]);
            a = std::exp(amax[h] - m);
            sum = sum * a + std::exp(sinks[h] - m);
        }
        const float f = a / sum;
        for (int d = 0; d < dv; d++) out[size_t(h) * size_t(dv) + d] = acc[size_t(h) * size_t(dv) + d] * f;
    }
}

// n_q heads of KV head g (q: their rows, out: theirs) against the n_pos
// positions of `at`, block after block on this thread.
void attend_blocks(const AttentionShape& s, const AttentionKernels& simd, const KvLayer& at, int g, int n_q,
                   const float* q, int64_t n_pos, const float* sinks, float* scratch, float* out) {
    const int64_t len = block_len(n_pos);
    float* part = scratch;
    float* acc = part + partial_floats(s, n_q);
    float* qh = acc + partial_floats(s, n_q);
    float* scores = qh + size_t(n_q) * size_t(s.head_dim);
    const float* qb = block_query(at, q, n_q, s.head_dim, qh);
    partial_clear(s, n_q, acc);
    for (int64_t j0 = 0; j0 < n_pos; j0 += len) {
        block_partial(s, simd, at, g, n_q, qb, j0, std::min(len, n_pos - j0), scores, part);
        partial_fold(s, n_q, part, acc);
    }
    partial_finish(s, n_q, acc, sinks, out);
}

// Query heads [h0, h0 + n_h) of KV head g's group (their rows at qg, outputs
// at og) against positions [0, n_pos) of `at`, through the SIMD loops or the
// scalar ones. A head's result does not depend on the heads beside it.
void attend_kv_head(const AttentionShape& s, const AttentionKernels* simd, const KvLayer& at, int g, int h0, int n_h,
                    const float* qg, int64_t n_pos, float* scratch, float* og) {
    const int group = s.n_head / s.n_head_kv;
    const float* sinks = s.sinks ? s.sinks + g * group + h0 : nullptr;
    if (simd) {
        attend_blocks(s, *simd, at, g, n_h, qg, n_pos, sinks, scratch, og);
        return;
    }
    float* qh = scratch;
    float* scores = qh + s.head_dim;
    for (int h = 0; h < n_h; h++) {
        attend_head(s, at, g, qg + h * s.head_dim, n_pos, sinks ? sinks[h] : -INFINITY, scores, qh,
                    og + h * s.head_dim_v);
    }
}

// The positions query p sees: [first, p].
int64_t first_visible(const AttentionShape& s, int64_t p) {
    int64_t first = s.window > 0 ? std::max<int64_t>(0, p - s.window + 1) : 0;
    if (s.chunk > 0) first = std::max(first, p - p % s.chunk);
    return first;
}

// One decoded token through the SIMD loops, its blocks shared out over the
// threads (KV heads alone are too few work items for many threads, and one
// for MLA), then each KV head's partials folded in block order.
void attention_decode_split(ThreadPool& pool, const AttentionShape& s, const AttentionKernels& simd,
                            const KvLayer& at, const float* q, int64_t n_pos, int64_t n_ctx, float* scratch,
                            float* out) {
    const int group = s.n_head / s.n_head_kv;
    const size_t per_thread = group_floats(s, n_ctx);
    const size_t part_size = partial_floats(s, group);
    const int64_t nb = block_count(n_pos), len = block_len(n_pos);
    float* qh = scratch + size_t(pool.size()) * per_thread;  // the query rounded once, not once a block
    float* parts = qh + size_t(s.n_head) * size_t(s.head_dim);
    const float* qb = block_query(at, q, s.n_head, s.head_dim, qh);
    pool.parallel_for(s.n_head_kv * nb, [&](int64_t b, int64_t e, int thread) {
        float* scores = scratch + size_t(thread) * per_thread;
        for (int64_t i = b; i < e; i++) {
            const int g = int(i / nb);
            const int64_t j0 = i % nb * len;
            block_partial(s, simd, at, g, group, qb + int64_t(g) * group * s.head_dim, j0, std::min(len, n_pos - j0),
                          scores, parts + size_t(i) * part_size);
        }
    });
    auto fold = [&](int64_t b, int64_t e, int thread) {
        float* acc = scratch + size_t(thread) * per_thread;
        for (int64_t g = b; g < e; g++) {
            partial_clear(s, group, acc);
            for (int64_t i = 0; i < nb; i++) partial_fold(s, group, parts + size_t(g * nb + i) * part_size, acc);
            const float* sinks = s.sinks ? s.sinks + g * group : nullptr;
            partial_finish(s, group, acc, sinks, out + g * group * s.head_dim_v);
        }
    };
    // The fold is small next to the blocks (a few hundred KB of partials
    // for GQA models): on the calling thread it saves a second wake-up of
    // the pool, which on a loaded machine costs more than the fold. MLA's
    // 128 heads of 512 fold in parallel. Either way the same bits.
    if (size_t(s.n_head_kv) * size_t(nb) * part_size < (size_t(1) << 18)) {
        fold(0, s.n_head_kv, 0);
    } else {
        pool.parallel_for(s.n_head_kv, fold);
    }
}

}  // namespace

size_t attention_scratch_floats(const AttentionShape& s, int64_t n_ctx, int n_threads) {
    // Each thread's group scratch, then a decoded token's rounded query and
    // block partials.
    // block_count() is not monotonic, but never above either bound.
    const int64_t max_blocks = std::min(kMaxBlocks, (n_ctx + kMinBlock - 1) / kMinBlock);
    const size_t split = size_t(s.n_head) * size_t(s.head_dim) +
                         size_t(s.n_head_kv) * size_t(max_blocks) * partial_floats(s, s.n_head / s.n_head_kv);
    return size_t(n_threads) * group_floats(s, n_ctx) + split;
}

void attention(ThreadPool& pool, const AttentionShape& s, const KvLayer& kv, const float* q, int64_t n_tok,
               int64_t pos0, int64_t n_ctx, float* scratch, float* out) {
    const int group = s.n_head / s.n_head_kv;
    const size_t per_thread = group_floats(s, n_ctx);
    const AttentionKernels* simd = simd_kernels(s);
    if (simd && n_tok == 1 && pool.size() > 1) {
        const int64_t first = first_visible(s, pos0);
        const KvLayer at = from_row(kv, kv.ring > 0 ? first % kv.ring : first);
        attention_decode_split(pool, s, *simd, at, q, pos0 - first + 1, n_ctx, scratch, out);
        return;
    }
    // One work item per (token, KV head): its query heads share every cache
    // row read.
    pool.parallel_for(n_tok * s.n_head_kv, [&](int64_t b, int64_t e, int thread) {
        float* ts = scratch + size_t(thread) * per_thread;
        for (int64_t i = b; i < e; i++) {
            const int64_t t = i / s.n_head_kv;
            const int g = int(i % s.n_head_kv);
            const int64_t h0 = t * s.n_head + int64_t(g) * group;  // the group's first query head, all tokens counted
            const int64_t p = pos0 + t;
            const int64_t first = first_visible(s, p);
            const KvLayer at = from_row(kv, kv.ring > 0 ? first % kv.ring : first);
            attend_kv_head(s, simd, at, g, 0, group, q + h0 * s.head_dim, p - first + 1, ts, out + h0 * s.head_dim_v);
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
    return group_floats(s, top_k) + size_t(top_k) * size_t(width);
}

void attention_selected(ThreadPool& pool, const AttentionShape& s, const KvLayer& kv, const float* q, int64_t n_tok,
                        const int32_t* sel, const int32_t* n_sel, int top_k, float* scratch, float* out) {
    const int group = s.n_head / s.n_head_kv;
    const size_t per_thread = attention_selected_scratch_floats(s, kv, top_k);
    const size_t loop_floats = group_floats(s, top_k);
    const AttentionKernels* simd = simd_kernels(s);
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
        float* ts = scratch + size_t(thread) * per_thread;
        uint8_t* rows = reinterpret_cast<uint8_t*>(ts + loop_floats);
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
            attend_kv_head(s, simd, at, g, h_part, part_heads, q + h0 * s.head_dim, n_pos, ts, out + h0 * s.head_dim_v);
        }
    });
}

}  // namespace ms
