#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "ops/activation.h"
#include "ops/attention_kernels.h"
#include "quant/blocks.h"
#include "quant/cpu.h"
#include "quant/half.h"
#include "quant/quantize.h"

namespace ms {

int64_t kv_ring_rows(int64_t window, int64_t max_batch) {
    // The batch's first query still needs window - 1 positions before the
    // batch once all max_batch of its keys are written.
    return window - 1 + max_batch;
}

int64_t kv_row_bytes(GgmlType type, int64_t width) {
    switch (type) {
        case GgmlType::F32: return width * 4;
        case GgmlType::Q8_0: return width / QK * int64_t(sizeof(BlockQ8_0));
        default: return width * 2;
    }
}

void check_kv_type(GgmlType type, int head_dim, int head_dim_v) {
    if (type == GgmlType::F16 || type == GgmlType::F32) return;
    if (type != GgmlType::Q8_0) throw std::runtime_error(std::string("KV cache type ") + type_name(type) + " is not supported");
    if (head_dim % QK != 0 || head_dim_v % QK != 0) {
        throw std::runtime_error("a q8_0 KV cache needs head dimensions that are multiples of 32, not " +
                                 std::to_string(head_dim) + "/" + std::to_string(head_dim_v));
    }
}

namespace {

// The parts a row of `width` elements is kept in: one per KV head with
// planes, else the whole row.
int kv_parts(const KvLayer& kv) { return kv.plane_rows > 0 ? kv.heads : 1; }

// Bytes from the cache's start to part h of row `row`, in rows of `width`
// elements (kv.k_width for K, kv.v_width for V).
size_t part_offset(const KvLayer& kv, int64_t width, int h, int64_t row) {
    const int w = int(width / kv_parts(kv));
    return size_t(kv_row_bytes(kv.type, kv.head_at(h, w) + row * kv.pitch(width, w)));
}

// Element e of row `row` of head h's K in a tiled cache (KvLayer::k_tiled),
// in F16 from kv.k, the heads `dim` wide.
int64_t tiled_k_at(const KvLayer& kv, int dim, int h, int64_t row, int e) {
    const int64_t r = row + kv.k_skip;
    return int64_t(h) * kv.plane_rows * dim + r / kKvTile * kKvTile * dim + int64_t(e) * kKvTile + r % kKvTile;
}

}  // namespace

void kv_store(const KvLayer& kv, int64_t pos, const float* k, const float* v) {
    const bool v_in_k = kv.v == kv.k;
    // Each head's part of the row into its plane (the whole row when the
    // heads sit side by side).
    const int nh = kv_parts(kv);
    const int kd_w = int(kv.k_width / nh), vd_w = int(kv.v_width / nh);
    auto put = [&](int64_t row) {
        for (int h = 0; h < nh; h++) {
            uint8_t* kd = kv.k + part_offset(kv, kv.k_width, h, row);
            uint8_t* vd = kv.v + part_offset(kv, kv.v_width, h, row);
            const float* kh_in = k + int64_t(h) * kd_w;
            const float* vh_in = v_in_k ? nullptr : v + int64_t(h) * vd_w;
            if (kv.type == GgmlType::F32) {
                std::memcpy(kd, kh_in, size_t(kd_w) * 4);
                if (!v_in_k) std::memcpy(vd, vh_in, size_t(vd_w) * 4);
            } else if (kv.type == GgmlType::Q8_0) {
                quantize_row(GgmlType::Q8_0, kh_in, kd, kd_w);
                if (!v_in_k) quantize_row(GgmlType::Q8_0, vh_in, vd, vd_w);
            } else {
                uint16_t* kh = reinterpret_cast<uint16_t*>(kd);
                uint16_t* vh = reinterpret_cast<uint16_t*>(vd);
                if (kv.k_tiled) {
                    uint16_t* k16 = reinterpret_cast<uint16_t*>(kv.k);
                    for (int i = 0; i < kd_w; i++) k16[tiled_k_at(kv, kd_w, h, row, i)] = fp32_to_fp16(kh_in[i]);
                } else {
                    for (int i = 0; i < kd_w; i++) kh[i] = fp32_to_fp16(kh_in[i]);
                }
                if (!v_in_k) {
                    for (int i = 0; i < vd_w; i++) vh[i] = fp32_to_fp16(vh_in[i]);
                }
            }
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

// Element e of a Q8_0 row: its block's scale times its int8 (exact in float).
inline float q8_at(const BlockQ8_0* row, int64_t e, const float* table) {
    const BlockQ8_0& b = row[e / QK];
    return table[b.d] * float(b.qs[e % QK]);
}

// The scalar reference: one query head against positions [0, n_pos) of one
// KV head. A Q8_0 cache is read as the floats its blocks hold, against the
// query as is.
void attend_head(const AttentionShape& s, const KvLayer& kv, int kv_head, const float* q, int64_t n_pos, float sink,
                 float* scores, float* qh, float* out) {
    // Elements of this head's rows: from the start, and from row to row.
    const int64_t k_off = kv.head_at(kv_head, s.head_dim), v_off = kv.head_at(kv_head, s.head_dim_v);
    const int64_t kw = kv.pitch(kv.k_width, s.head_dim), vw = kv.pitch(kv.v_width, s.head_dim_v);
    const float* table = kv.type == GgmlType::F32 ? nullptr : fp16_table();
    if (kv.type == GgmlType::F32) {
        const float* K = reinterpret_cast<const float*>(kv.k) + k_off;
        scores_for(q, s.head_dim, n_pos, [&](int64_t j, int d) { return K[j * kw + d]; }, scores);
    } else if (kv.type == GgmlType::Q8_0) {
        const BlockQ8_0* K = reinterpret_cast<const BlockQ8_0*>(kv.k) + k_off / QK;
        scores_for(q, s.head_dim, n_pos, [&](int64_t j, int d) { return q8_at(K + j * (kw / QK), d, table); }, scores);
    } else if (kv.k_tiled) {
        for (int d = 0; d < s.head_dim; d++) qh[d] = fp16_to_fp32(fp32_to_fp16(q[d]));
        const uint16_t* K = reinterpret_cast<const uint16_t*>(kv.k);
        scores_for(qh, s.head_dim, n_pos,
                   [&](int64_t j, int d) { return table[K[tiled_k_at(kv, s.head_dim, kv_head, j, d)]]; }, scores);
    } else {
        for (int d = 0; d < s.head_dim; d++) qh[d] = fp16_to_fp32(fp32_to_fp16(q[d]));
        const uint16_t* K = reinterpret_cast<const uint16_t*>(kv.k) + k_off;
        scores_for(qh, s.head_dim, n_pos, [&](int64_t j, int d) { return table[K[j * kw + d]]; }, scores);
    }
    softmax(scores, n_pos, s.scale, sink);

    for (int d = 0; d < s.head_dim_v; d++) out[d] = 0;
    if (kv.type == GgmlType::F32) {
        const float* V = reinterpret_cast<const float*>(kv.v) + v_off;
        for (int64_t j = 0; j < n_pos; j++) {
            const float* vr = V + j * vw;
            const float p = scores[j];
            for (int d = 0; d < s.head_dim_v; d++) out[d] += p * vr[d];
        }
    } else if (kv.type == GgmlType::Q8_0) {
        const BlockQ8_0* V = reinterpret_cast<const BlockQ8_0*>(kv.v) + v_off / QK;
        for (int64_t j = 0; j < n_pos; j++) {
            const BlockQ8_0* vr = V + j * (vw / QK);
            const float p = scores[j];
            for (int d = 0; d < s.head_dim_v; d++) out[d] += p * q8_at(vr, d, table);
        }
    } else {
        const uint16_t* V = reinterpret_cast<const uint16_t*>(kv.v) + v_off;
        for (int64_t j = 0; j < n_pos; j++) {
            const uint16_t* vr = V + j * vw;
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
// Tiled K is seen from the tile that holds the row, k_skip rows into it.
KvLayer from_row(const KvLayer& kv, int64_t row) {
    KvLayer at = kv;
    if (kv.k_tiled) {
        const int64_t r = kv.k_skip + row, dim = kv.k_width / kv.heads;
        at.k += size_t(r / kKvTile * kKvTile * dim) * 2;
        at.k_skip = int(r % kKvTile);
    } else {
        at.k += part_offset(kv, kv.k_width, 0, row);
    }
    at.v += part_offset(kv, kv.v_width, 0, row);
    return at;
}

// The cache from position pos on (rows wrap in a ring; a run of up to
// tail + 1 positions is consecutive rows).
KvLayer at_position(const KvLayer& kv, int64_t pos) { return from_row(kv, kv.ring > 0 ? pos % kv.ring : pos); }

// Flash-decoding: a query's positions are cut into blocks, each reduced on
// its own to a partial result (AttentionKernels::block_*), and the partials
// are folded in block order. The cut depends on the query's positions only,
// never on the thread count, the batch or the tile the query is computed in,
// so every way of computing a token gives the same bits. At least kMinBlock
// positions a block (a block's scores, keys and values stay in L2), at most
// kMaxBlocks blocks and one more (the partials of a decoded token stay small).
constexpr int64_t kMinBlock = 256;
constexpr int64_t kMaxBlocks = 32;

int64_t block_len(int64_t n_pos) {
    const int64_t even = (n_pos + kMaxBlocks - 1) / kMaxBlocks;
    return std::max(kMinBlock, (even + 63) / 64 * 64);
}

// The blocks of a query that sees positions [first, last]: cut at the
// multiples of len, counted from position 0 rather than from first, so that
// neighbouring queries of a sliding window or chunk share their inner blocks
// (prefill computes a shared block once for all of them).
struct BlockCut {
    int64_t first = 0, last = 0, len = 0;
    BlockCut(int64_t first_, int64_t last_) : first(first_), last(last_), len(block_len(last_ - first_ + 1)) {}
    int64_t count() const { return last / len - first / len + 1; }
    int64_t begin(int64_t i) const { return std::max(first, (first / len + i) * len); }
    int64_t end(int64_t i) const { return std::min(last + 1, (first / len + i + 1) * len); }
};

// Most blocks a cut of a context of n_ctx positions has.
int64_t max_block_count(int64_t n_ctx) { return std::min(kMaxBlocks, (n_ctx + kMinBlock - 1) / kMinBlock) + 1; }

// A partial result for n_q heads: their unnormalized outputs (n_q rows of
// head_dim_v), then n_q maxima, then n_q sums (attention_kernels.h).
size_t partial_floats(const AttentionShape& s, int n_q) { return size_t(n_q) * size_t(s.head_dim_v + 2); }

struct Partial {
    float* out;
    float* max;
    float* sum;
    Partial rows(int h0, int dim_v) const { return {out + size_t(h0) * size_t(dim_v), max + h0, sum + h0}; }
};

Partial partial_at(const AttentionShape& s, float* p, int n_q) {
    float* max = p + size_t(n_q) * size_t(s.head_dim_v);
    return {p, max, max + n_q};
}

// Prefill computes up to this many query rows (tokens x the heads of one KV
// head) against each block: the block's keys and values are read once for
// them all, and its scores (rows x block floats) stay in L2.
constexpr int kTileRows = 64;

int tile_tokens(const AttentionShape& s) { return std::max(1, kTileRows / (s.n_head / s.n_head_kv)); }

// A thread's scratch on the SIMD path: a tile's query rows (rounded to F16
// for an F16 cache), one block's scores for them, a block's partial and the
// running ones.
size_t simd_group_floats(const AttentionShape& s, int64_t n_ctx) {
    const size_t rows = size_t(tile_tokens(s) * (s.n_head / s.n_head_kv));
    return rows * size_t(s.head_dim + scores_stride(block_len(n_ctx))) + 2 * partial_floats(s, int(rows));
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
// F16 cache (into qh), as is for F32 and Q8_0 ones.
const float* block_query(const KvLayer& kv, const float* q, int n_q, int head_dim, float* qh) {
    if (kv.type != GgmlType::F16) return q;
    for (int i = 0; i < n_q * head_dim; i++) qh[i] = fp16_to_fp32(fp32_to_fp16(q[i]));
    return qh;
}

// block_f16_tiled's arguments for the n positions of `at` (K in tiles) for
// n_q heads of KV head g.
TiledBlock tiled_block(const AttentionShape& s, const KvLayer& at, int g, int n_q, const float* qb, int64_t n,
                       float* scores, const Partial& part) {
    TiledBlock b;
    b.q = qb;
    b.n_q = n_q;
    b.k = reinterpret_cast<const uint16_t*>(at.k) + at.head_at(g, s.head_dim);
    b.k_skip = at.k_skip;
    b.dim = s.head_dim;
    b.v = reinterpret_cast<const uint16_t*>(at.v) + at.head_at(g, s.head_dim_v);
    b.v_stride = at.pitch(at.v_width, s.head_dim_v);
    b.dim_v = s.head_dim_v;
    b.n_pos = n;
    b.scale = s.scale;
    b.scores = scores;
    b.s_stride = scores_stride(n);
    b.max = part.max;
    b.sum = part.sum;
    b.out = part.out;
    return b;
}

// The n positions of `at` (consecutive rows from its start) for n_q heads of
// KV head g, reduced to a partial result.
void block_partial(const AttentionShape& s, const AttentionKernels& simd, const KvLayer& at, int g, int n_q,
                   const float* qb, int64_t n, float* scores, const Partial& part) {
    const int64_t s_stride = scores_stride(n);
    const int64_t k_at = at.head_at(g, s.head_dim), v_at = at.head_at(g, s.head_dim_v);
    const int64_t kw = at.pitch(at.k_width, s.head_dim), vw = at.pitch(at.v_width, s.head_dim_v);
    if (at.type == GgmlType::F32) {
        const float* K = reinterpret_cast<const float*>(at.k) + k_at;
        const float* V = reinterpret_cast<const float*>(at.v) + v_at;
        simd.block_f32(qb, n_q, K, kw, s.head_dim, V, vw, s.head_dim_v, n, s.scale, scores, s_stride, part.max,
                       part.sum, part.out);
    } else if (at.type == GgmlType::Q8_0) {
        const BlockQ8_0* K = reinterpret_cast<const BlockQ8_0*>(at.k) + k_at / QK;
        const BlockQ8_0* V = reinterpret_cast<const BlockQ8_0*>(at.v) + v_at / QK;
        simd.block_q8(qb, n_q, K, kw / QK, s.head_dim, V, vw / QK, s.head_dim_v, n, s.scale, scores, s_stride,
                      part.max, part.sum, part.out);
    } else if (at.k_tiled) {
        const TiledBlock b = tiled_block(s, at, g, n_q, qb, n, scores, part);
        simd.block_f16_tiled(b.q, b.n_q, b.k, b.k_skip, b.dim, b.v, b.v_stride, b.dim_v, b.n_pos, b.scale, b.scores,
                             b.s_stride, b.max, b.sum, b.out);
    } else {
        const uint16_t* K = reinterpret_cast<const uint16_t*>(at.k) + k_at;
        const uint16_t* V = reinterpret_cast<const uint16_t*>(at.v) + v_at;
        simd.block_f16(qb, n_q, K, kw, s.head_dim, V, vw, s.head_dim_v, n, s.scale, scores, s_stride, part.max,
                       part.sum, part.out);
    }
}

void partial_clear(const AttentionShape& s, int n_q, const Partial& acc) {
    std::fill_n(acc.out, size_t(n_q) * size_t(s.head_dim_v), 0.0f);
    std::fill_n(acc.max, n_q, -INFINITY);
    std::fill_n(acc.sum, n_q, 0.0f);
}

// acc = acc combined with part: both rescaled to the larger maximum. Plain
// float code in a unit without FMA, row by row, so the one fold gives the
// same bits wherever it is called from and whatever rows sit beside a head.
void partial_fold(const AttentionShape& s, int n_q, const Partial& part, const Partial& acc) {
    const int dv = s.head_dim_v;
    for (int h = 0; h < n_q; h++) {
        const float m = std::max(acc.max[h], part.max[h]);
        const float a = acc.max[h] == -INFINITY ? 0.0f : std::exp(acc.max[h] - m);
        const float b = part.max[h] == -INFINITY ? 0.0f : std::exp(part.max[h] - m);
        acc.max[h] = m;
        acc.sum[h] = acc.sum[h] * a + part.sum[h] * b;
        float* o = acc.out + size_t(h) * size_t(dv);
        const float* po = part.out + size_t(h) * size_t(dv);
        for (int d = 0; d < dv; d++) o[d] = o[d] * a + po[d] * b;
    }
}

// The heads' outputs from their folded partial, the sinks (or null) joining
// each softmax as one more logit without a value.
void partial_finish(const AttentionShape& s, int n_q, const Partial& acc, const float* sinks, float* out) {
    const int dv = s.head_dim_v;
    for (int h = 0; h < n_q; h++) {
        float sum = acc.sum[h], a = 1.0f;
        if (sinks && sinks[h] > -INFINITY) {
            const float m = std::max(acc.max[h], sinks[h]);
            a = std::exp(acc.max[h] - m);
            sum = sum * a + std::exp(sinks[h] - m);
        }
        const float f = a / sum;
        for (int d = 0; d < dv; d++) out[size_t(h) * size_t(dv) + d] = acc.out[size_t(h) * size_t(dv) + d] * f;
    }
}

// The positions query p sees: [first, p].
int64_t first_visible(const AttentionShape& s, int64_t p) {
    int64_t first = s.window > 0 ? std::max<int64_t>(0, p - s.window + 1) : 0;
    if (s.chunk > 0) first = std::max(first, p - p % s.chunk);
    return first;
}

// Flash attention over a tile of n_t queries at positions p0, p0 + 1, ...
// for the heads of KV head g (qg(i): token i's rows; og(i): its outputs),
// through the SIMD loops on this thread. The blocks that every query of the
// tile sees whole (same cut) are computed once for all their rows; the
// others, at the edges of each query's range, query by query. Each query's
// blocks are folded in its own block order, and a row's partial does not
// depend on the rows beside it, so a query gets the bits it gets alone.
template <class RowsOf, class OutOf>
void attend_tile(const AttentionShape& s, const AttentionKernels& simd, const KvLayer& kv, int g, int64_t p0, int n_t,
                 RowsOf qg, OutOf og, float* scratch) {
    const int group = s.n_head / s.n_head_kv;
    const int rows = n_t * group;
    float* part_p = scratch;
    float* acc_p = part_p + partial_floats(s, rows);
    float* qt = acc_p + partial_floats(s, rows);
    float* scores = qt + size_t(rows) * size_t(s.head_dim);
    const Partial acc = partial_at(s, acc_p, rows);
    for (int i = 0; i < n_t; i++) {  // the tile's rows side by side, as the block loops take them
        float* qi = qt + size_t(i * group) * size_t(s.head_dim);
        const float* qb = block_query(kv, qg(i), group, s.head_dim, qi);
        if (qb != qi) std::memcpy(qi, qb, size_t(group * s.head_dim) * 4);
    }
    partial_clear(s, rows, acc);
    // The shared run [lo, hi): whole blocks of one length inside every query's range.
    const BlockCut c0(first_visible(s, p0), p0);
    int64_t lo = 0, hi = 0;
    bool same_len = true;
    for (int i = 0; i < n_t; i++) {
        const BlockCut c(first_visible(s, p0 + i), p0 + i);
        same_len = same_len && c.len == c0.len;
        lo = std::max(lo, (c.first + c.len - 1) / c.len * c.len);
    }
    hi = (p0 + 1) / c0.len * c0.len;
    if (!same_len || lo >= hi) lo = hi = std::numeric_limits<int64_t>::max();
    // Query i's blocks in [from, to), folded into its rows.
    auto own_blocks = [&](int i, int64_t from, int64_t to) {
        const BlockCut c(first_visible(s, p0 + i), p0 + i);
        const Partial part = partial_at(s, part_p, group);
        const Partial mine = acc.rows(i * group, s.head_dim_v);
        for (int64_t b = 0; b < c.count(); b++) {
            const int64_t j0 = c.begin(b), j1 = c.end(b);
            if (j0 < from || j1 > to) continue;
            block_partial(s, simd, at_position(kv, j0), g, group, qt + size_t(i * group) * size_t(s.head_dim),
                          j1 - j0, scores, part);
            partial_fold(s, group, part, mine);
        }
    };
    const int64_t end = std::numeric_limits<int64_t>::max();
    if (lo == end) {
        for (int i = 0; i < n_t; i++) own_blocks(i, 0, end);
    } else {
        for (int i = 0; i < n_t; i++) own_blocks(i, 0, lo);
        const Partial part = partial_at(s, part_p, rows);
        for (int64_t j0 = lo; j0 < hi; j0 += c0.len) {
            block_partial(s, simd, at_position(kv, j0), g, rows, qt, c0.len, scores, part);
            partial_fold(s, rows, part, acc);
        }
        for (int i = 0; i < n_t; i++) own_blocks(i, hi, end);
    }
    const float* sinks = s.sinks ? s.sinks + g * group : nullptr;
    for (int i = 0; i < n_t; i++) partial_finish(s, group, acc.rows(i * group, s.head_dim_v), sinks, og(i));
}

// One decoded token through the SIMD loops, its blocks shared out over the
// threads (KV heads alone are too few work items for many threads, and one
// for MLA), then each KV head's partials folded in block order.
void attention_decode_split(ThreadPool& pool, const AttentionShape& s, const AttentionKernels& simd,
                            const KvLayer& kv, const float* q, int64_t p, int64_t n_ctx, float* scratch, float* out) {
    const int group = s.n_head / s.n_head_kv;
    const size_t per_thread = group_floats(s, n_ctx);
    const size_t part_size = partial_floats(s, group);
    const BlockCut cut(first_visible(s, p), p);
    const int64_t nb = cut.count();
    float* qh = scratch + size_t(pool.size()) * per_thread;  // the query rounded once, not once a block
    float* parts = qh + size_t(s.n_head) * size_t(s.head_dim);
    const float* qb = block_query(kv, q, s.n_head, s.head_dim, qh);
    // Over K in tiles, where the level has the loop and a thread's scratch
    // two blocks' scores, each block's value loop runs with the next
    // block's score loop (AttentionKernels::tiled_pipe): the same bits.
    const bool pipe = simd.tiled_pipe && kv.k_tiled && 2 * group <= tile_tokens(s) * group;
    pool.parallel_for(s.n_head_kv * nb, [&](int64_t b, int64_t e, int thread) {
        float* scores = scratch + size_t(thread) * per_thread;
        TiledBlock last;
        for (int64_t i = b; i < e; i++) {
            const int g = int(i / nb);
            const int64_t j0 = cut.begin(i % nb), n = cut.end(i % nb) - j0;
            const Partial part = partial_at(s, parts + size_t(i) * part_size, group);
            const float* qg = qb + int64_t(g) * group * s.head_dim;
            if (!pipe) {
                block_partial(s, simd, at_position(kv, j0), g, group, qg, n, scores, part);
                continue;
            }
            // The two score buffers in turn: the last block's terms are read while this one's are written.
            float* sc = scores + ((i - b) % 2) * group * scores_stride(cut.len);
            const TiledBlock next = tiled_block(s, at_position(kv, j0), g, group, qg, n, sc, part);
            simd.tiled_pipe(&next, i > b ? &last : nullptr);
            last = next;
        }
        if (pipe && e > b) simd.tiled_pipe(nullptr, &last);
    });
    auto fold = [&](int64_t b, int64_t e, int thread) {
        const Partial acc = partial_at(s, scratch + size_t(thread) * per_thread, group);
        for (int64_t g = b; g < e; g++) {
            partial_clear(s, group, acc);
            for (int64_t i = 0; i < nb; i++) {
                partial_fold(s, group, partial_at(s, parts + size_t(g * nb + i) * part_size, group), acc);
            }
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

// Query heads [h0, h0 + n_h) of KV head g's group (their rows at qg, outputs
// at og) against positions [0, n_pos) of `at` (no ring), through the SIMD
// loops or the scalar ones.
void attend_kv_head(const AttentionShape& s, const AttentionKernels* simd, const KvLayer& at, int g, int h0, int n_h,
                    const float* qg, int64_t n_pos, float* scratch, float* og) {
    if (simd) {
        AttentionShape part = s;  // n_h heads of the group, as a group of their own
        part.n_head = n_h * s.n_head_kv;
        part.window = part.chunk = 0;
        part.sinks = s.sinks ? s.sinks + (g * (s.n_head / s.n_head_kv) + h0) - g * n_h : nullptr;
        attend_tile(part, *simd, at, g, n_pos - 1, 1, [&](int) { return qg; }, [&](int) { return og; }, scratch);
        return;
    }
    const int group = s.n_head / s.n_head_kv;
    const float* sinks = s.sinks ? s.sinks + g * group + h0 : nullptr;
    float* qh = scratch;
    float* scores = qh + s.head_dim;
    for (int h = 0; h < n_h; h++) {
        attend_head(s, at, g, qg + h * s.head_dim, n_pos, sinks ? sinks[h] : -INFINITY, scores, qh,
                    og + h * s.head_dim_v);
    }
}

}  // namespace

size_t attention_scratch_floats(const AttentionShape& s, int64_t n_ctx, int n_threads) {
    // Each thread's group scratch, then a decoded token's rounded query and
    // block partials.
    const size_t split = size_t(s.n_head) * size_t(s.head_dim) +
                         size_t(s.n_head_kv) * size_t(max_block_count(n_ctx)) * partial_floats(s, s.n_head / s.n_head_kv);
    return size_t(n_threads) * group_floats(s, n_ctx) + split;
}

void attention(ThreadPool& pool, const AttentionShape& s, const KvLayer& kv, const float* q, int64_t n_tok,
               int64_t pos0, int64_t n_ctx, float* scratch, float* out) {
    const int group = s.n_head / s.n_head_kv;
    const size_t per_thread = group_floats(s, n_ctx);
    const AttentionKernels* simd = simd_kernels(s);
    if (simd && n_tok == 1 && pool.size() > 1) {
        attention_decode_split(pool, s, *simd, kv, q, pos0, n_ctx, scratch, out);
        return;
    }
    if (simd) {
        // One work item per (tile of tokens, KV head): the tile's query rows
        // share every block of keys and values read.
        const int64_t T = tile_tokens(s), n_tiles = (n_tok + T - 1) / T;
        pool.parallel_for(n_tiles * s.n_head_kv, [&](int64_t b, int64_t e, int thread) {
            float* ts = scratch + size_t(thread) * per_thread;
            for (int64_t i = b; i < e; i++) {
                const int64_t t0 = i / s.n_head_kv * T;
                const int g = int(i % s.n_head_kv);
                const int n_t = int(std::min(T, n_tok - t0));
                auto head0 = [&](int j) { return (t0 + j) * s.n_head + int64_t(g) * group; };
                attend_tile(s, *simd, kv, g, pos0 + t0, n_t, [&](int j) { return q + head0(j) * s.head_dim; },
                            [&](int j) { return out + head0(j) * s.head_dim_v; }, ts);
            }
        });
        return;
    }
    // The scalar reference: one work item per (token, KV head).
    pool.parallel_for(n_tok * s.n_head_kv, [&](int64_t b, int64_t e, int thread) {
        float* ts = scratch + size_t(thread) * per_thread;
        for (int64_t i = b; i < e; i++) {
            const int64_t t = i / s.n_head_kv;
            const int g = int(i % s.n_head_kv);
            const int64_t h0 = t * s.n_head + int64_t(g) * group;  // the group's first query head, all tokens counted
            const int64_t p = pos0 + t;
            const int64_t first = first_visible(s, p);
            attend_kv_head(s, nullptr, at_position(kv, first), g, 0, group, q + h0 * s.head_dim, p - first + 1, ts,
                           out + h0 * s.head_dim_v);
        }
    });
}

void attention_scores(const KvLayer& kv, const float* q, int n_q, int dim, int64_t first, int64_t n_pos,
                      float* scores, int64_t s_stride) {
    if (kv.k_tiled) throw std::logic_error("attention_scores: K in tiles");
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

namespace {

// Position pos's K and V rows (v_out null: none), each head's part from its
// plane, side by side.
void gather_row(const KvLayer& kv, int64_t pos, uint8_t* k_out, uint8_t* v_out) {
    const int nh = kv_parts(kv);
    const size_t kb = size_t(kv_row_bytes(kv.type, kv.k_width / nh)), vb = size_t(kv_row_bytes(kv.type, kv.v_width / nh));
    for (int h = 0; h < nh; h++) {
        if (kv.k_tiled) {
            const int dim = int(kv.k_width / nh);
            const uint16_t* k16 = reinterpret_cast<const uint16_t*>(kv.k);
            uint16_t* out = reinterpret_cast<uint16_t*>(k_out + h * kb);
            for (int e = 0; e < dim; e++) out[e] = k16[tiled_k_at(kv, dim, h, pos, e)];
        } else {
            std::memcpy(k_out + h * kb, kv.k + part_offset(kv, kv.k_width, h, pos), kb);
        }
        if (v_out) std::memcpy(v_out + h * vb, kv.v + part_offset(kv, kv.v_width, h, pos), vb);
    }
}

}  // namespace

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
    const bool v_in_k = kv.v == kv.k;
    const size_t k_row = size_t(kv_row_bytes(kv.type, kv.k_width)), v_row = size_t(kv_row_bytes(kv.type, kv.v_width));
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
            at.plane_rows = 0;  // gathered with the heads side by side, in rows
            at.k_tiled = false;
            for (int64_t j = 0; j < n_pos; j++) {
                gather_row(kv, pos[j], at.k + size_t(j) * k_row, v_in_k ? nullptr : at.v + size_t(j) * v_row);
            }
            attend_kv_head(s, simd, at, g, h_part, part_heads, q + h0 * s.head_dim, n_pos, ts, out + h0 * s.head_dim_v);
        }
    });
}

}  // namespace ms
