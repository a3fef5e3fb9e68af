// Prefill attention in tiles, flash-attention style: a block's query rows
// walk the cached positions a tile at a time, each tile copied into shared
// memory once for all of them (cp.async, the next tile while this one is
// used), each row's softmax kept online (a running maximum, sum and weighted
// sum of value rows). The products run on tensor cores (mma.sync m16n8k16,
// f16 x f16 -> f32) with each operand split into two f16 halves (hi and
// the rest) and three MMAs a product, so the result is within float32
// rounding of the decode kernel's, not its bits (the tensor-core prefill's
// contract): one f16 MMA a product (run23 call 1) was twice as fast but
// moved the golden deepseek3 file's logits past the bound.
//
// Grouped-query attention (attention_tiled): the query heads of one KV head
// and a few consecutive tokens share a block; the k and v rows are split
// into f16 planes once a layer. It replaced a float32 kernel of the same
// tiling that ran a qwen3-30b-a3b 4,096-token prompt's attention at some 18
// TFLOP/s on an H100 (docs/gpu.md, twenty-sixth session's profile).
//
// Multi-head latent attention's prompts in the expanded form
// (attention_expanded): each head's keys [k_b c | k_pe] and values v_b c
// built for every cached position (mla_expand_planes, straight into the
// split planes), then the grouped-query kernel with one query head a KV
// head over keys of nope + rope dims and values of v: DeepSeek V3's 192 and
// 128 against the latent form's 576 and 512, 3.4 times fewer products.
//
// Multi-head latent attention's prompts (attention_tiled_shared): every
// query head reads the same compressed rows (keys of 576, their first 512
// the values), so a block takes 32 query rows (heads of a token, or tokens
// x heads) and its warps split a tile's positions and value dims, the
// scores meeting in shared memory.

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <stdexcept>
#include <string>

#include "gpu/block_sum.cuh"
#include "gpu/gpu.h"
#include "gpu/launch.cuh"
#include "gpu/split_f16.cuh"

namespace ms::gpu {

namespace {

// The first position a query at p attends to.
__device__ __forceinline__ int first_position(int p, int window, int chunk) {
    return window > 0 ? max(0, p - window + 1) : chunk > 0 ? p - p % chunk : 0;
}

// One row's scores in a tile (this thread's 8, in base 2, -inf where the
// row does not attend; the quad of lanes sharing the row holds the rest)
// made into its softmax weights against the row's running maximum m, and
// its running sum l updated: returns the factor its earlier sums are to be
// rescaled by.
__device__ __forceinline__ float online_softmax(float (&s)[8], float& m, float& l) {
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < 8; i++) mx = fmaxf(mx, s[i]);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float top = fmaxf(m, mx);
    const float keep = top == -INFINITY ? 1.0f : exp2f(m - top);  // no position yet: nothing to rescale
    float sum = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        s[i] = s[i] == -INFINITY ? 0.0f : exp2f(s[i] - top);
        sum += s[i];
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    l = l * keep + sum;
    m = top;
    return keep;
}

// Grouped-query prompts (attention_tiled). A block: 4 warps of 16 query
// rows (a token and a query head each; rows of one KV head), tiles of 32
// positions. A warp keeps its rows' scores, softmax and outputs in
// registers (the score fragments of two position tiles are the A fragment
// of the products with the values), so nothing but the tiles passes
// through shared memory.
constexpr int kGqaRows = 64, kGqaTile = 32;
static_assert(kGqaTile == 32, "a thread holds 8 positions of a tile for each of its rows (online_softmax)");

// The k and v rows of positions first_position(*pos) .. *pos + n - 1 as f16
// planes: row (p, kv) at planes + (p * n_kv_head + kv) * 4 * hd holds k's
// hi and lo halves, then v's. Split once a layer here, the prompt kernel's
// blocks (a few tokens each) copy them as they are instead of each
// splitting every tile it reads.
__global__ void split_kv_kernel(const float* k_cache, const float* v_cache, const int32_t* pos, int n, int n_kv_head,
                                int hd, int window, int chunk, __half* planes) {
    chain_start();
    const int64_t lo = first_position(*pos, window, chunk), hi = int64_t(*pos) + n;  // [lo, hi)
    const int64_t quads = (hi - lo) * n_kv_head * (hd / 4), first = lo * n_kv_head * hd;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < quads; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t e = first + 4 * i, row = e / hd, d = e % hd;
        __half* to = planes + row * 4 * hd + d;
        split_store(*reinterpret_cast<const float4*>(k_cache + e), to, to + hd);
        split_store(*reinterpret_cast<const float4*>(v_cache + e), to + 2 * hd, to + 3 * hd);
    }
}

// HD: the keys' (and queries') dims, HDV the values' (MLA's expanded
// heads: 192 and 128; else HDV == HD). A plane row holds k's hi and lo
// halves, then v's: 2 HD + 2 HDV halves. blockIdx.x: the KV head;
// blockIdx.y (the last first: later tokens attend to more positions):
// tokens_per_block tokens from t0; row r is token t0 + r / group, query
// head kv * group + r % group. Scores in base 2 (scale2 = scale * log2 e).
// W: warps a block, of 16 query rows each (4: kGqaRows; the expanded MLA
// heads take 8, two blocks' rows for each tile copied).
template <int HD, int HDV, int W>
__global__ void __launch_bounds__(32 * W) attention_tiled_kernel(const float* q, const __half* planes,
                                                                      const int32_t* pos, int n_head, int n_kv_head,
                                                                      float scale2, float* out, int n,
                                                                      int tokens_per_block, int window, int chunk,
                                                                      const float* sinks) {
    constexpr int RS = 2 * HD + 8;  // halves a shared row: hi, lo, 8 more (rows an odd number of 16 bytes apart)
    constexpr int NT = HDV / 8, KS = HD / 16, PT = kGqaTile / 8, Q4 = HD / 4, PR = 2 * HD + 2 * HDV;
    static_assert(HDV <= HD && HD % 16 == 0 && HDV % 8 == 0, "a v row fits a shared row of RS halves");
    const int group = n_head / n_kv_head, kv = blockIdx.x;
    const int t0 = int(gridDim.y - 1 - blockIdx.y) * tokens_per_block;
    const int tokens = min(tokens_per_block, n - t0), rows = tokens * group;
    extern __shared__ float4 smem4[];
    constexpr int kRows = 16 * W, kThreads = 32 * W;
    __half* qs = reinterpret_cast<__half*>(smem4);  // kRows rows
    __half* kvs = qs + kRows * RS;                  // two buffers of kGqaTile k rows, then kGqaTile v rows
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t4 = lane % 4;
    chain_start();
    const int p0 = *pos + t0;  // the block's first token's position
    for (int i = threadIdx.x; i < kRows * Q4; i += kThreads) {
        const int r = i / Q4, d = (i % Q4) * 4;
        float4 v = make_float4(0, 0, 0, 0);
        if (r < rows) v = *reinterpret_cast<const float4*>(q + (int64_t(t0 + r / group) * n_head + kv * group + r % group) * HD + d);
        split_store(v, qs + r * RS + d, qs + r * RS + HD + d);
    }
    // This thread's two rows (g and g + 8 of its warp's 16): the positions
    // each attends to, [first, last]; last -1 for rows past the block's.
    int first[2], last[2];
#pragma unroll
    for (int x = 0; x < 2; x++) {
        const int r = warp * 16 + g + 8 * x;
        last[x] = r < rows ? p0 + r / group : -1;
        first[x] = r < rows ? first_position(last[x], window, chunk) : INT_MAX;
    }
    // The warp's positions (a tile outside them is skipped) and the block's.
    const int w0 = warp * 16, w1 = min(w0 + 15, rows - 1);
    const int w_first = w0 < rows ? first_position(p0 + w0 / group, window, chunk) : INT_MAX;
    const int w_last = w0 < rows ? p0 + w1 / group : -1;
    const int lo = first_position(p0, window, chunk), hi = p0 + tokens - 1;
    auto load_tile = [&](int base, int buf) {
        __half* to = kvs + buf * 2 * kGqaTile * RS;
        for (int i = threadIdx.x; i < kGqaTile * PR / 8; i += kThreads) {  // 16 bytes each: HD / 4 a k row, HDV / 4 a v row
            const int j = i / (PR / 8), c = i % (PR / 8), p = base + j;
            const bool ok = p <= hi;
            const __half* from = planes + (int64_t(ok ? p : 0) * n_kv_head + kv) * PR + c * 8;
            const int at = c < HD / 4 ? j * RS + c * 8 : (kGqaTile + j) * RS + (c - HD / 4) * 8;
            copy_async(shared_address(to + at), from, ok);
        }
        copy_async_commit();
    };
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
    float o[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0;
    // Lanes' ldmatrix rows. q: the warp's 16 rows, dims 0/8 (+ HD: lo).
    // k: hi dims 0-7, hi 8-15, lo 0-7, lo 8-15 of 8 positions. v,
    // transposed: hi positions 0-7, hi 8-15, lo 0-7, lo 8-15 of 8 dims.
    const uint32_t qa = shared_address(qs + (w0 + lane % 16) * RS + (lane / 16) * 8);
    const uint32_t qa_lo = qa + HD * 2;
    const int k_lane = (lane % 8) * RS + (lane / 8) % 2 * 8 + (lane / 16) * HD;
    const int v_lane = kGqaTile * RS + ((lane / 8) % 2 * 8 + lane % 8) * RS + (lane / 16) * HDV;
    load_tile(lo, 0);
    for (int base = lo, buf = 0; base <= hi; base += kGqaTile, buf ^= 1) {
        copy_async_wait();
        __syncthreads();  // this tile is in; every warp is done with the other buffer
        if (base + kGqaTile <= hi) load_tile(base + kGqaTile, buf ^ 1);
        if (base > w_last || base + kGqaTile - 1 < w_first) continue;
        const uint32_t kb = shared_address(kvs + buf * 2 * kGqaTile * RS + k_lane);
        const uint32_t vb = shared_address(kvs + buf * 2 * kGqaTile * RS + v_lane);
        // Scores: the warp's 16 rows against the tile's 32 positions.
        float c[PT][4] = {};
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            uint32_t ah[4], al[4];
            load_matrices(ah, qa + kk * 32);
            load_matrices(al, qa_lo + kk * 32);
#pragma unroll
            for (int j = 0; j < PT; j++) {
                uint32_t b[4];
                load_matrices(b, kb + (j * 8 * RS + kk * 16) * 2);
                mma_split(c[j], ah, al, b);
            }
        }
        // Online softmax over this thread's 8 positions of each of its two
        // rows; c then holds the weights.
#pragma unroll
        for (int x = 0; x < 2; x++) {
            float w[8];
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int j = i / 2, y = i % 2, p = base + 8 * j + 2 * t4 + y;
                w[i] = p >= first[x] && p <= last[x] ? c[j][2 * x + y] * scale2 : -INFINITY;
            }
            const float keep = online_softmax(w, m[x], l[x]);
#pragma unroll
            for (int i = 0; i < 8; i++) c[i / 2][2 * x + i % 2] = w[i];
#pragma unroll
            for (int j = 0; j < NT; j++) {
                o[j][2 * x] *= keep;
                o[j][2 * x + 1] *= keep;
            }
        }
        // Values: o += P . V, 16 positions a step.
#pragma unroll
        for (int k2 = 0; k2 < PT / 2; k2++) {
            uint32_t ph[4], pl[4];  // rows g, g + 8 x positions 2 t4 (+8)
            split_pair(c[2 * k2][0], c[2 * k2][1], ph[0], pl[0]);
            split_pair(c[2 * k2][2], c[2 * k2][3], ph[1], pl[1]);
            split_pair(c[2 * k2 + 1][0], c[2 * k2 + 1][1], ph[2], pl[2]);
            split_pair(c[2 * k2 + 1][2], c[2 * k2 + 1][3], ph[3], pl[3]);
#pragma unroll
            for (int j = 0; j < NT; j++) {
                uint32_t bv[4];
                load_matrices_transposed(bv, vb + (k2 * 16 * RS + j * 8) * 2);
                mma_split(o[j], ph, pl, bv);
            }
        }
    }
#pragma unroll
    for (int x = 0; x < 2; x++) {
        const int r = w0 + g + 8 * x;
        if (r >= rows) continue;
        const int t = t0 + r / group, h = kv * group + r % group;
        float f = 1.0f, sum = l[x];
        if (sinks) {
            // The head's sink logit takes probability mass but adds no value.
            const float sink = sinks[h] * 1.44269504088896341f, top = fmaxf(m[x], sink);
            f = exp2f(m[x] - top);
            sum = sum * f + exp2f(sink - top);
        }
        const float k = sum > 0 ? f / sum : 0.0f;
        float* to = out + (int64_t(t) * n_head + h) * HDV + 2 * t4;
#pragma unroll
        for (int j = 0; j < NT; j++) *reinterpret_cast<float2*>(to + j * 8) = make_float2(o[j][2 * x] * k, o[j][2 * x + 1] * k);
    }
}

// The tiles over planes already split (HD-wide keys, HDV-wide values).
template <int HD, int HDV, int W = kGqaRows / 16>
void launch_planes(const float* q, const __half* planes, const int32_t* pos, int n_head, int n_kv_head, float scale,
                   float* out, Stream s, int n, int window, const float* sinks, int chunk) {
    constexpr size_t smem = (16 * size_t(W) + 4 * size_t(kGqaTile)) * (2 * HD + 8) * sizeof(__half);
    static bool sized = false;  // the kernel's shared memory limit raised once
    if (!sized) {
        if (cudaFuncSetAttribute(attention_tiled_kernel<HD, HDV, W>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 int(smem)) != cudaSuccess) {
            cudaGetLastError();
            throw std::runtime_error("CUDA attention_tiled: " + std::to_string(smem) +
                                     " bytes of shared memory a block are more than the device has");
        }
        sized = true;
    }
    const int group = n_head / n_kv_head, per = 16 * W / group;
    const dim3 grid(unsigned(n_kv_head), unsigned((n + per - 1) / per));
    launch("attention_tiled", attention_tiled_kernel<HD, HDV, W>, grid, 32 * W, smem, native(s), q, planes, pos,
           n_head, n_kv_head, scale * 1.44269504088896341f, out, n, per, window, chunk, sinks);
}

template <int HD>
void launch_tiled(const float* q, const float* k_cache, const float* v_cache, void* planes, const int32_t* pos,
                  int n_head, int n_kv_head, float scale, float* out, Stream s, int n, int window, const float* sinks,
                  int chunk) {
    __half* p = static_cast<__half*>(planes);
    launch("split_kv", split_kv_kernel, dim3(1024), 256, 0, native(s), k_cache, v_cache, pos, n, n_kv_head, HD, window,
           chunk, p);
    launch_planes<HD, HD>(q, p, pos, n_head, n_kv_head, scale, out, s, n, window, sinks, chunk);
}

// The shared-rows kernel's geometry: 8 warps in two groups of four, 32
// query rows (16 a group), tiles of 32 positions. A warp's scores: its
// group's rows against 16 of the tile's positions over every other k-step
// (the two partial sums meet in shared memory); its values: a quarter of the
// value dims. At rows of 576, the staging tile, the four f16 planes and the
// partial scores fill the 227 KiB a block may have on Hopper.
constexpr int kMlaThreads = 256, kMlaRows = 32, kMlaTile = 32, kScoreStride = kMlaTile + 4, kMlaMaxK = 576;
static_assert(kMlaRows == kMlaTile, "the query and row planes share one shape");

// NW: n-tiles of 8 value dims a warp (values 32 NW wide). Block b (the last
// first: later tokens attend to more positions) takes tokens_per_block
// tokens from t0 and heads [h0, h0 + min(n_head, 32)); row r is token t0 +
// r / Hb, head h0 + r % Hb. Dense: positions 0 .. the row's own; chosen:
// the token's chosen positions (one token a block).
template <int NW>
__global__ void __launch_bounds__(kMlaThreads, 1)
    attention_shared_tiled_kernel(const float* q, const float* rows, const int32_t* pos, int n_head, int k_dim,
                                  float scale, float* out, int n, int tokens_per_block, int head_blocks,
                                  const int32_t* chosen, const int32_t* count, int top_k) {
    constexpr int DW = 8 * NW, DV = 4 * DW;
    const int QS = k_dim + 8;  // halves a shared row: rows an odd number of 16 bytes apart, ldmatrix conflict-free
    const int K4 = k_dim / 4, plane = kMlaRows * QS;
    extern __shared__ float4 smem4[];
    float* stage = reinterpret_cast<float*>(smem4);                    // kMlaTile x k_dim floats, the next tile
    __half* ks = reinterpret_cast<__half*>(stage + kMlaTile * k_dim);  // this tile: hi plane, lo plane
    __half* qs = ks + 2 * plane;                                       // the queries: hi plane, lo plane
    float* ss = reinterpret_cast<float*>(qs + 2 * plane);              // 2 x kMlaRows x kScoreStride: scores
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, group = warp / 4, quarter = warp % 4;
    const int kh = quarter / 2, ph = quarter % 2;  // scores: k-steps kh, kh + 2, ...; positions 16 ph ..
    const int g = lane / 4, t4 = lane % 4;
    const int Hb = min(n_head, kMlaRows);
    const int b = int(gridDim.x - 1 - blockIdx.x);
    const int t0 = b / head_blocks * tokens_per_block, h0 = b % head_blocks * kMlaRows;
    const int tokens = min(tokens_per_block, n - t0);
    chain_start();
    const int p0 = *pos;
    auto row_ok = [&](int r) { return r / Hb < tokens && h0 + r % Hb < n_head; };
    for (int i = threadIdx.x; i < kMlaRows * K4; i += kMlaThreads) {
        const int r = i / K4, d = (i % K4) * 4;
        float4 v = make_float4(0, 0, 0, 0);
        if (row_ok(r)) v = *reinterpret_cast<const float4*>(q + (int64_t(t0 + r / Hb) * n_head + h0 + r % Hb) * k_dim + d);
        split_store(v, qs + r * QS + d, qs + plane + r * QS + d);
    }
    const int32_t* sel = chosen ? chosen + int64_t(t0) * top_k : nullptr;
    const int n_pos = sel ? count[t0] : p0 + t0 + tokens;  // the block's positions (chosen: indices into sel)
    // This thread's two rows (g and g + 8 of its group): the last position
    // each attends to (dense), -1 for rows past the block's.
    int last[2];
    for (int x = 0; x < 2; x++) {
        const int r = group * 16 + g + 8 * x;
        last[x] = !row_ok(r) ? -1 : sel ? INT_MAX : p0 + t0 + r / Hb;
    }
    auto load_tile = [&](int base) {
        for (int i = threadIdx.x; i < kMlaTile * K4; i += kMlaThreads) {
            const int j = i / K4, d = (i % K4) * 4, idx = base + j;
            const bool ok = idx < n_pos;
            const int64_t p = !ok ? 0 : sel ? sel[idx] : idx;
            copy_async(shared_address(stage + j * k_dim + d), rows + p * k_dim + d, ok);
        }
        copy_async_commit();
    };
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
    float acc[NW][4];
#pragma unroll
    for (int j = 0; j < NW; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0;
    const float scale2 = scale * 1.44269504088896341f;  // scores in base 2: exp2f
    const int K16 = k_dim / 16;
    // Lanes' ldmatrix rows. q: the group's 16 rows, dims 0/8 (+ plane: lo).
    // k: hi dims 0-7, hi 8-15, lo 0-7, lo 8-15 of positions 16 ph + 0..7
    // (+ 8 rows: the next 8). v, transposed: hi positions 0-7, hi 8-15, lo
    // 0-7, lo 8-15 of the quarter's 8 dims.
    const uint32_t qa = shared_address(qs + (group * 16 + lane % 16) * QS + (lane / 16) * 8);
    const uint32_t qa_lo = qa + uint32_t(plane) * 2;
    const uint32_t kb = shared_address(ks + (lane / 16) * plane + (ph * 16 + lane % 8) * QS + (lane / 8) % 2 * 8);
    const uint32_t kb8 = kb + uint32_t(8 * QS) * 2;
    const uint32_t vb = shared_address(ks + (lane / 16) * plane + ((lane / 8) % 2 * 8 + lane % 8) * QS + quarter * DW);
    float* const scores = ss + kh * kMlaRows * kScoreStride;
    load_tile(0);
    for (int base = 0; base < n_pos; base += kMlaTile) {
        copy_async_wait();
        __syncthreads();  // the stage holds this tile; every warp is done with the last one's ks and ss
        for (int i = threadIdx.x; i < kMlaTile * K4; i += kMlaThreads) {
            const int j = i / K4, d = (i % K4) * 4;
            split_store(*reinterpret_cast<const float4*>(stage + j * k_dim + d), ks + j * QS + d,
                        ks + plane + j * QS + d);
        }
        __syncthreads();
        if (base + kMlaTile < n_pos) load_tile(base + kMlaTile);
        // Scores: hi.hi in c, the cross terms in e (four chains).
        float c[2][4] = {}, e[2][4] = {};
#pragma unroll 2
        for (int kk = kh; kk < K16; kk += 2) {
            uint32_t ah[4], al[4], b0[4], b1[4];
            load_matrices(ah, qa + kk * 32);
            load_matrices(al, qa_lo + kk * 32);
            load_matrices(b0, kb + kk * 32);
            load_matrices(b1, kb8 + kk * 32);
            mma_f16(e[0], ah, b0[2], b0[3]);
            mma_f16(e[1], ah, b1[2], b1[3]);
            mma_f16(e[0], al, b0[0], b0[1]);
            mma_f16(e[1], al, b1[0], b1[1]);
            mma_f16(c[0], ah, b0[0], b0[1]);
            mma_f16(c[1], ah, b1[0], b1[1]);
        }
        float* srow = scores + (group * 16 + g) * kScoreStride + ph * 16 + 2 * t4;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            *reinterpret_cast<float2*>(srow + j * 8) = make_float2(c[j][0] + e[j][0], c[j][1] + e[j][1]);
            *reinterpret_cast<float2*>(srow + 8 * kScoreStride + j * 8) =
                make_float2(c[j][2] + e[j][2], c[j][3] + e[j][3]);
        }
        __syncthreads();
        // Softmax over the tile's 32 positions: this thread's 8 of each of
        // its two rows (the columns of the A fragments below), the two
        // k-halves' partial scores summed; the quad of lanes sharing a row
        // reduces. The four warps of a group compute the same values.
        uint32_t ph_[2][4], pl_[2][4];  // P's A fragments (hi, lo) for positions 0-15 and 16-31
#pragma unroll
        for (int x = 0; x < 2; x++) {
            const float* sr = ss + (group * 16 + g + 8 * x) * kScoreStride;
            float s[8];
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int col = (i / 4) * 16 + (i / 2 % 2) * 8 + 2 * t4 + i % 2, idx = base + col;
                const bool ok = idx < n_pos && (sel ? last[x] >= 0 : idx <= last[x]);
                s[i] = ok ? (sr[col] + sr[kMlaRows * kScoreStride + col]) * scale2 : -INFINITY;
            }
            const float keep = online_softmax(s, m[x], l[x]);
#pragma unroll
            for (int j = 0; j < NW; j++) {
                acc[j][2 * x] *= keep;
                acc[j][2 * x + 1] *= keep;
            }
#pragma unroll
            for (int k2 = 0; k2 < 2; k2++) {
                split_pair(s[k2 * 4], s[k2 * 4 + 1], ph_[k2][x], pl_[k2][x]);  // row g (+8), columns 2t4, +1
                split_pair(s[k2 * 4 + 2], s[k2 * 4 + 3], ph_[k2][2 + x], pl_[k2][2 + x]);  // columns 8 + 2t4, +1
            }
        }
        // Values: acc += P . V over the quarter's dims, the cross terms
        // first.
#pragma unroll
        for (int k2 = 0; k2 < 2; k2++) {
#pragma unroll
            for (int j = 0; j < NW; j++) {
                uint32_t bv[4];
                load_matrices_transposed(bv, vb + (k2 * 16 * QS + j * 8) * 2);
                mma_split(acc[j], ph_[k2], pl_[k2], bv);
            }
        }
    }
#pragma unroll
    for (int x = 0; x < 2; x++) {
        const int r = group * 16 + g + 8 * x;
        if (!row_ok(r)) continue;
        const float inv = l[x] > 0 ? 1.0f / l[x] : 0.0f;  // no positions (an empty choice): zeros
        float* o = out + (int64_t(t0 + r / Hb) * n_head + h0 + r % Hb) * DV + quarter * DW + 2 * t4;
#pragma unroll
        for (int j = 0; j < NW; j++) {
            *reinterpret_cast<float2*>(o + j * 8) = make_float2(acc[j][2 * x] * inv, acc[j][2 * x + 1] * inv);
        }
    }
}

// False, with nothing launched, where the device cannot give a block the
// shared memory (before Hopper's 227 KiB, rows of 576 do not fit).
template <int NW>
bool launch_shared_tiled(const float* q, const float* rows, const int32_t* pos, int n_head, int k_dim, float scale,
                         float* out, Stream s, int n, const Chosen& chosen) {
    const size_t QS = size_t(k_dim) + 8;
    const size_t smem =
        size_t(kMlaTile) * k_dim * 4 + 4 * size_t(kMlaRows) * QS * 2 + 2 * size_t(kMlaRows) * kScoreStride * 4;
    static size_t sized = 0;  // the kernel's shared memory limit, raised as shapes need
    if (smem > sized) {
        if (cudaFuncSetAttribute(attention_shared_tiled_kernel<NW>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 int(smem)) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        sized = smem;
    }
    const int head_blocks = (n_head + kMlaRows - 1) / kMlaRows;
    const int tokens_per_block = chosen.pos || n_head >= kMlaRows ? 1 : kMlaRows / n_head;
    const unsigned grid = unsigned((n + tokens_per_block - 1) / tokens_per_block * head_blocks);
    launch("attention_tiled_shared", attention_shared_tiled_kernel<NW>, dim3(grid), kMlaThreads, smem, native(s), q,
           rows, pos, n_head, k_dim, scale, out, n, tokens_per_block, head_blocks, chosen.pos, chosen.count,
           chosen.top_k);
    return true;
}

// Positions first .. first + count - 1 of MLA's expanded heads into the
// planes (row (p, h): k hi, k lo, v hi, v lo): k = [k_nope | the cache
// row's rope dims], v as given.
__global__ void mla_expand_planes_kernel(const float* k_nope, const float* v, const float* rows, int64_t first,
                                         int count, int n_head, int nope, int rope, int hv, int row_width,
                                         int rope_at, __half* planes) {
    chain_start();
    const int hd = nope + rope, kq = hd / 4, per = kq + hv / 4;
    const int64_t total = int64_t(count) * n_head * per;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / per, lp = r / n_head;  // r: (local position, head)
        const int c = int(i % per), h = int(r % n_head);
        __half* to = planes + ((first + lp) * n_head + h) * (2 * hd + 2 * hv);
        if (c < kq) {
            const int d = 4 * c;
            const float* from = d < nope ? k_nope + r * nope + d : rows + (first + lp) * row_width + rope_at + d - nope;
            split_store(*reinterpret_cast<const float4*>(from), to + d, to + hd + d);
        } else {
            const int d = 4 * (c - kq);
            split_store(*reinterpret_cast<const float4*>(v + r * hv + d), to + 2 * hd + d, to + 2 * hd + hv + d);
        }
    }
}

}  // namespace

size_t attention_expanded_scratch_bytes(int64_t positions, int n_head, int head_dim, int v_dim) {
    return size_t(positions) * size_t(n_head) * size_t(2 * head_dim + 2 * v_dim) * sizeof(__half);
}

bool attention_expanded_supports(int head_dim, int v_dim) {
    return (head_dim == 192 && v_dim == 128) || (head_dim == 48 && v_dim == 32);
}

void mla_expand_planes(const float* k_nope, const float* v, const float* rows, int64_t first, int count, int n_head,
                       int nope, int rope, int v_dim, int row_width, int rope_at, void* planes, Stream s) {
    if (count < 1) return;
    if (nope % 4 != 0 || rope % 4 != 0 || v_dim % 4 != 0 || row_width % 4 != 0 || rope_at % 4 != 0) {
        throw std::runtime_error("CUDA mla_expand_planes: widths of 4s are needed");
    }
    launch("mla_expand_planes", mla_expand_planes_kernel, dim3(1024), 256, 0, native(s), k_nope, v, rows, first, count,
           n_head, nope, rope, v_dim, row_width, rope_at, static_cast<__half*>(planes));
}

bool attention_expanded(const float* q, const void* planes, const int32_t* pos, int n_head, int head_dim, int v_dim,
                        float scale, float* out, Stream s, int n) {
    if (n < 1 || n_head < 1) return false;
    const __half* p = static_cast<const __half*>(planes);
    if (head_dim == 192 && v_dim == 128) {
        launch_planes<192, 128, 8>(q, p, pos, n_head, n_head, scale, out, s, n, 0, nullptr, 0);
    } else if (head_dim == 48 && v_dim == 32) {
        launch_planes<48, 32, 8>(q, p, pos, n_head, n_head, scale, out, s, n, 0, nullptr, 0);
    } else {
        return false;
    }
    return true;
}

bool attention_tiled_shared(const float* q, const float* rows, const int32_t* pos, int n_head, int k_dim, int v_dim,
                            float scale, float* out, Stream s, int n, const Chosen& chosen) {
    if (n < 1 || n_head < 1 || k_dim % 16 != 0 || v_dim > k_dim || k_dim > kMlaMaxK) return false;
    switch (v_dim) {
        case 32: return launch_shared_tiled<1>(q, rows, pos, n_head, k_dim, scale, out, s, n, chosen);
        case 64: return launch_shared_tiled<2>(q, rows, pos, n_head, k_dim, scale, out, s, n, chosen);
        case 128: return launch_shared_tiled<4>(q, rows, pos, n_head, k_dim, scale, out, s, n, chosen);
        case 256: return launch_shared_tiled<8>(q, rows, pos, n_head, k_dim, scale, out, s, n, chosen);
        case 512: return launch_shared_tiled<16>(q, rows, pos, n_head, k_dim, scale, out, s, n, chosen);
        default: return false;
    }
}

size_t attention_tiled_scratch_bytes(int64_t positions, int n_kv_head, int head_dim) {
    return size_t(positions) * size_t(n_kv_head) * size_t(head_dim) * 4 * sizeof(__half);
}

bool attention_tiled(const float* q, const float* k_cache, const float* v_cache, const int32_t* pos, int n_head,
                     int n_kv_head, int head_dim, float scale, float* out, Stream s, void* act, int n, void* planes,
                     int window, const float* sinks, int chunk) {
    if (n < 1 || n_kv_head < 1 || n_head % n_kv_head != 0 || n_head / n_kv_head > kGqaRows) return false;
    switch (head_dim) {
        case 64: launch_tiled<64>(q, k_cache, v_cache, planes, pos, n_head, n_kv_head, scale, out, s, n, window, sinks, chunk); break;
        case 128: launch_tiled<128>(q, k_cache, v_cache, planes, pos, n_head, n_kv_head, scale, out, s, n, window, sinks, chunk); break;
        case 256: launch_tiled<256>(q, k_cache, v_cache, planes, pos, n_head, n_kv_head, scale, out, s, n, window, sinks, chunk); break;
        default: return false;
    }
    if (act) quantize_act(out, n, int64_t(n_head) * head_dim, act, s);
    return true;
}

}  // namespace ms::gpu
