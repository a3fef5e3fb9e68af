// Causal grouped-query attention over a KV cache held in F16, F32 or Q8_0,
// optionally limited to a sliding window and with a sink logit per head. With
// an F16 cache the query is rounded to F16 before its dot products with the keys
// and each value row is widened to float, the way the reference engine mixes
// the two precisions. A Q8_0 cache (blocks of 32: an F16 scale and 32 int8,
// half the bytes of F16) is read as the floats its blocks hold, against the
// query in float.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ops/thread_pool.h"
#include "quant/types.h"

namespace ms {

// One layer's cache: at each position, a K row of k_width and a V row of
// v_width elements (all KV heads' parts of it), of type F16, F32 or Q8_0
// (kv_row_bytes; every head starts a block: check_kv_type).
// Layout: with plane_rows > 0 each of the `heads` KV heads keeps its own
// plane of plane_rows rows (its part of row r at plane h, row r), so that a
// head's run of positions is one stretch of memory, which DRAM streams
// (a plain read on the 2-core box: 37 GB/s, against 20 GB/s for 256 B of
// every 1 KB row). With plane_rows == 0 the heads sit side
// by side in one row (one head, or tests and gathered copies).
// A sliding-window layer keeps only a ring of rows: position p lives in row
// p % ring, and rows [ring, ring + tail) repeat rows [0, tail), so that any
// tail + 1 consecutive positions are consecutive rows (the attention loops
// read a window as one run). ring == 0: row p holds position p.
// v == k: V is a view of K (MLA's compressed rows, whose front is the value):
// v_width equals k_width (the row pitch), the AttentionShape's head_dim_v
// says how much of each row is read, and there are no planes.
// k_tiled (an F16 cache with planes, V not a view of K): each K plane is
// kept in tiles of kKvTile rows, transposed, element d of the tile's keys
// side by side (row r, element e of head h at h * plane_rows * dim +
// (r / kKvTile) * kKvTile * dim + e * kKvTile + r % kKvTile), so that the
// score loop loads a column of kKvTile keys as one vector; rows need a
// transpose in registers first, which halves that loop's speed
// (docs/performance.md). plane_rows is then a multiple of kKvTile
// (kv_plane_rows); the rows past the cache's last are never read into a
// result. V keeps its rows.
constexpr int kKvTile = 16;

struct KvLayer {
    GgmlType type = GgmlType::F16;
    int64_t k_width = 0;
    int64_t v_width = 0;
    uint8_t* k = nullptr;
    uint8_t* v = nullptr;
    int64_t ring = 0;
    int64_t tail = 0;
    int64_t plane_rows = 0;  // rows of each head's plane; 0: heads side by side
    int heads = 1;           // KV heads, with planes
    bool k_tiled = false;    // K's planes in transposed tiles (above)
    int k_skip = 0;          // a view inside ops/attention: rows of its first tile before its first row

    // Elements (blocks for Q8_0) from one row of a head to the next, and
    // from the cache's start to head h's first row, for heads of `dim`.
    int64_t pitch(int64_t width, int dim) const { return plane_rows > 0 ? dim : width; }
    int64_t head_at(int h, int dim) const { return plane_rows > 0 ? int64_t(h) * plane_rows * dim : int64_t(h) * dim; }
};

// Bytes of a cache row of `width` elements.
int64_t kv_row_bytes(GgmlType type, int64_t width);

// The rows a plane of at least `rows` rows takes: a whole number of tiles.
inline int64_t kv_plane_rows(int64_t rows) { return (rows + kKvTile - 1) / kKvTile * kKvTile; }

// Whether a cache of this type keeps K in tiles when it has planes.
inline bool kv_tiles_k(GgmlType type) { return type == GgmlType::F16; }

// Throws unless a cache of this type holds heads of these dimensions: F16,
// F32, or Q8_0 with dimensions that are multiples of 32.
void check_kv_type(GgmlType type, int head_dim, int head_dim_v);

// Rows a ring needs so that a window of `window` positions stays readable
// while a batch of max_batch new positions is written before it is read.
int64_t kv_ring_rows(int64_t window, int64_t max_batch);

// Writes k (k_width floats) and v (v_width floats) at position pos, rounding to F16 with
// round-to-nearest-even when the cache is F16, to Q8_0 blocks (quant/quantize.h)
// when it is Q8_0 (only k when v is a view of k).
void kv_store(const KvLayer& kv, int64_t pos, const float* k, const float* v);

struct AttentionShape {
    int n_head = 0;
    int n_head_kv = 0;
    int head_dim = 0;   // of q and k
    int head_dim_v = 0; // of v and the output
    float scale = 1.0f; // applied to q.k before the softmax
    int64_t window = 0; // > 0: a query at p sees only positions (p - window, p]
    // n_head logits (or null): each joins its head's softmax as one more
    // score, unscaled, that takes probability mass but adds no value.
    const float* sinks = nullptr;
    // > 0: chunked attention (Llama 4): a query at p sees only the positions
    // of its own chunk, [p - p % chunk, p]. A ring sized for a window of
    // `chunk` positions holds every chunk.
    int64_t chunk = 0;
};

// Floats of scratch attention() needs for contexts up to n_ctx on a pool of
// n_threads.
size_t attention_scratch_floats(const AttentionShape& s, int64_t n_ctx, int n_threads);

// For each of n_tok queries (q: n_tok rows of n_head*head_dim), query t at
// position pos0 + t attends to cache positions [0, pos0 + t] (the last
// s.window of them for a sliding window, those of its chunk for a chunked
// layer; a ring's tail must be at least s.window - 1 (s.chunk - 1) rows);
// out gets n_tok rows of n_head*head_dim_v. scratch holds
// attention_scratch_floats(s, n_ctx, pool.size()) floats; allocates nothing.
// With head_dim and head_dim_v multiples of 16 and an AVX2 or AVX-512 level
// active (quant/cpu.h), flash-decoding: each KV head's keys and values are
// read once for all its query heads, a block of positions at a time, the
// blocks reduced with an online softmax and folded in order; a decoded
// token's blocks are shared out over the threads, and a batch's tokens go
// in tiles (flash attention) whose blocks are read once for the whole tile.
// The cut into blocks depends on the positions only, so the bits do not
// depend on the thread count, batch or tile; they differ from the scalar
// reference's by rounding (fused products, a polynomial exponential;
// docs/performance.md).
void attention(ThreadPool& pool, const AttentionShape& s, const KvLayer& kv, const float* q, int64_t n_tok,
               int64_t pos0, int64_t n_ctx, float* scratch, float* out);

// The dot products of n_q query rows (dim floats each, side by side) with the
// K rows of positions [first, first + n_pos) of a one-head cache:
// scores[h * s_stride + j] = q_h . k_{first + j}, each summed in element order
// (fused products at the SIMD levels: within rounding of the scalar sums).
// With an F16 cache, q holds F16 values widened. kv must not be a ring, nor
// Q8_0, nor tiled.
void attention_scores(const KvLayer& kv, const float* q, int n_q, int dim, int64_t first, int64_t n_pos,
                      float* scores, int64_t s_stride);

// Sparse attention (DeepSeek sparse attention's top-k selection): query t
// attends only to the n_sel[t] cache positions sel[t * top_k ..] (ascending,
// each at most its own position), otherwise as attention(): the selected rows
// are gathered into scratch and run through the same loops, so the cost per
// token is bounded by top_k, not by the context. kv must not be a ring.
// scratch holds pool.size() times attention_selected_scratch_floats(s, kv,
// top_k) floats.
size_t attention_selected_scratch_floats(const AttentionShape& s, const KvLayer& kv, int top_k);
void attention_selected(ThreadPool& pool, const AttentionShape& s, const KvLayer& kv, const float* q, int64_t n_tok,
                        const int32_t* sel, const int32_t* n_sel, int top_k, float* scratch, float* out);

}  // namespace ms
