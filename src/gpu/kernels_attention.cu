// Prefill attention in tiles (gpu.h's attention_tiled): the query heads of
// one KV head and several consecutive tokens share a block, which reads each
// tile of the cache's positions into shared memory once for all of its rows,
// and keeps each row's softmax online (a running maximum, sum and weighted
// sum of v rows) across the tiles, as flash attention does. The one-token
// kernels of kernels.cu read every cached position once a token and query
// head, so a long prompt's attention grew with its square from L2; here the
// cache is read once a block of tokens. Float32 throughout; the sums run in
// another order than the decode kernel's, so it is within rounding of it,
// not bit for bit (the tensor-core prefill's contract).
//
// Multi-head latent attention's prompts (attention_tiled_shared): every
// query head reads the same compressed rows, so a block takes 32 query rows
// (heads of a token, or tokens x heads) and walks the positions 32 at a
// time on tensor cores (mma.sync m16n8k16, f16 x f16 -> f32), the tile
// after them copied into shared memory meanwhile with cp.async, the softmax
// online in float32. Each operand is split into two f16 halves (hi and the
// rest) and each product takes three MMAs, so the result is within float32
// rounding of the decode kernel's: one f16 MMA a product (run23 call 1) was
// twice as fast but moved the golden deepseek3 file's logits past the
// bound. The float32 kernel above would do 4x the FLOPs of a GQA head here
// on FP32 units (rows of 576 against 128), which is why MLA prompts kept
// the decode kernel.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <stdexcept>
#include <string>

#include "gpu/block_sum.cuh"
#include "gpu/gpu.h"
#include "gpu/launch.cuh"

namespace ms::gpu {

namespace {

// A block: 8 warps, at most kRows query rows (a token and a query head
// each; a warp takes rows warp, warp + 8, ...), positions in tiles of 32 (a
// lane a position for the scores, a lane a set of dims for the values).
constexpr int kThreads = 256, kWarps = kThreads / 32, kRows = 64, kRowsPerWarp = kRows / kWarps, kTile = 32;

// The first position a query at p attends to.
__device__ __forceinline__ int first_position(int p, int window, int chunk) {
    return window > 0 ? max(0, p - window + 1) : chunk > 0 ? p - p % chunk : 0;
}

// DPL: dims a lane (head_dim / 32). blockIdx.x: the KV head; blockIdx.y:
// the block's tokens, tokens_per_block from blockIdx.y * tokens_per_block.
// Row r of a block is token r / group, query head kv * group + r % group.
template <int DPL>
__global__ void __launch_bounds__(kThreads) attention_tiled_kernel(const float* q, const float* k_cache,
                                                                   const float* v_cache, const int32_t* pos, int n_head,
                                                                   int n_kv_head, float scale, float* out, int n,
                                                                   int tokens_per_block, int window, int chunk,
                                                                   const float* sinks) {
    constexpr int HD = DPL * 32, KS = HD + 4;  // k rows padded: lane j's float4 loads fall in distinct banks
    const int group = n_head / n_kv_head, kv = blockIdx.x;
    const int t0 = int(blockIdx.y) * tokens_per_block;
    const int tokens = min(tokens_per_block, n - t0), rows = tokens * group;
    extern __shared__ float4 smem4[];
    float* ks = reinterpret_cast<float*>(smem4);  // kTile x KS
    float* vs = ks + kTile * KS;                   // kTile x HD
    float* qs = vs + kTile * HD;                   // kRows x HD
    float* ps = qs + kRows * HD;                   // kWarps x kRowsPerWarp x kTile
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    chain_start();
    const int p0 = *pos + t0;  // the block's first token's position
    for (int i = threadIdx.x; i < kRows * HD; i += kThreads) {
        const int r = i / HD, d = i % HD;
        qs[i] = r < rows ? q[(int64_t(t0 + r / group) * n_head + kv * group + r % group) * HD + d] : 0.0f;
    }
    float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][DPL];
    int last[kRowsPerWarp], first[kRowsPerWarp];  // each row's positions [first, last]
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; j++) {
        const int r = warp + kWarps * j;
        m[j] = -INFINITY;
        l[j] = 0;
#pragma unroll
        for (int c = 0; c < DPL; c++) acc[j][c] = 0;
        last[j] = r < rows ? p0 + r / group : -1;
        first[j] = r < rows ? first_position(last[j], window, chunk) : 0;
    }
    const int64_t stride = int64_t(n_kv_head) * HD;
    const int hi = p0 + tokens - 1;  // the last position any row attends to
    for (int base = first_position(p0, window, chunk); base <= hi; base += kTile) {
        __syncthreads();  // the tile before is done with (and, the first time, qs written)
        for (int i = threadIdx.x; i < kTile * HD / 4; i += kThreads) {
            const int j = i / (HD / 4), d = (i % (HD / 4)) * 4, p = base + j;
            float4 kk = make_float4(0, 0, 0, 0), vv = kk;
            if (p <= hi) {
                kk = *reinterpret_cast<const float4*>(k_cache + p * stride + kv * HD + d);
                vv = *reinterpret_cast<const float4*>(v_cache + p * stride + kv * HD + d);
            }
            *reinterpret_cast<float4*>(ks + j * KS + d) = kk;
            *reinterpret_cast<float4*>(vs + j * HD + d) = vv;
        }
        __syncthreads();
        // Scores: lane j takes position base + j against each of the warp's
        // rows, each k value loaded once for all of them.
        float dot[kRowsPerWarp];
#pragma unroll
        for (int j = 0; j < kRowsPerWarp; j++) dot[j] = 0;
        for (int d = 0; d < HD; d += 4) {
            const float4 kk = *reinterpret_cast<const float4*>(ks + lane * KS + d);
#pragma unroll
            for (int j = 0; j < kRowsPerWarp; j++) {
                const float4 qq = *reinterpret_cast<const float4*>(qs + (warp + kWarps * j) * HD + d);
                dot[j] += qq.x * kk.x + qq.y * kk.y + qq.z * kk.z + qq.w * kk.w;
            }
        }
        const int p = base + lane;
        float* pw = ps + warp * kRowsPerWarp * kTile;
#pragma unroll
        for (int j = 0; j < kRowsPerWarp; j++) {
            const float s = p >= first[j] && p <= last[j] ? dot[j] * scale : -INFINITY;
            const float mx = fmaxf(m[j], warp_max(s));
            // No position of this row yet (all -inf): nothing to rescale.
            const float keep = mx == -INFINITY ? 1.0f : expf(m[j] - mx);
            const float e = s == -INFINITY ? 0.0f : expf(s - mx);
            l[j] = l[j] * keep + warp_sum(e);
            m[j] = mx;
#pragma unroll
            for (int c = 0; c < DPL; c++) acc[j][c] *= keep;
            pw[j * kTile + lane] = e;
        }
        __syncwarp();
        // Values: lane takes dims lane, lane + 32, ...; each v value loaded
        // once for all the warp's rows.
        for (int jp = 0; jp < kTile; jp++) {
            float vv[DPL];
#pragma unroll
            for (int c = 0; c < DPL; c++) vv[c] = vs[jp * HD + lane + 32 * c];
#pragma unroll
            for (int j = 0; j < kRowsPerWarp; j++) {
                const float e = pw[j * kTile + jp];
#pragma unroll
                for (int c = 0; c < DPL; c++) acc[j][c] += e * vv[c];
            }
        }
        __syncwarp();
    }
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; j++) {
        const int r = warp + kWarps * j;
        if (r >= rows) continue;
        const int t = t0 + r / group, h = kv * group + r % group;
        float mx = m[j], sum = l[j], f = 1.0f;
        if (sinks) {
            // The head's sink logit takes probability mass but adds no value.
            const float top = fmaxf(mx, sinks[h]);
            f = expf(mx - top);
            sum = sum * f + expf(sinks[h] - top);
        }
        const float inv = 1.0f / sum;
#pragma unroll
        for (int c = 0; c < DPL; c++) out[(int64_t(t) * n_head + h) * HD + lane + 32 * c] = acc[j][c] * f * inv;
    }
}

template <int DPL>
void launch_tiled(const float* q, const float* k_cache, const float* v_cache, const int32_t* pos, int n_head,
                  int n_kv_head, float scale, float* out, Stream s, int n, int window, const float* sinks, int chunk) {
    constexpr int HD = DPL * 32;
    const size_t smem = (size_t(kTile) * (HD + 4) + size_t(kTile) * HD + size_t(kRows) * HD +
                         size_t(kWarps) * kRowsPerWarp * kTile) * sizeof(float);
    static bool sized = false;  // the kernel's shared memory limit raised once
    if (!sized) {
        if (cudaFuncSetAttribute(attention_tiled_kernel<DPL>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) !=
            cudaSuccess) {
            cudaGetLastError();
            throw std::runtime_error("CUDA attention_tiled: " + std::to_string(smem) +
                                     " bytes of shared memory a block are more than the device has");
        }
        sized = true;
    }
    const int group = n_head / n_kv_head, per = kRows / group;
    const dim3 grid(unsigned(n_kv_head), unsigned((n + per - 1) / per));
    launch("attention_tiled", attention_tiled_kernel<DPL>, grid, kThreads, smem, native(s), q, k_cache, v_cache, pos,
           n_head, n_kv_head, scale, out, n, per, window, chunk, sinks);
}

// The shared-rows kernel's geometry: 8 warps in two groups of four, 32
// query rows (16 a group), tiles of 32 positions. A warp's scores: its
// group's rows against 16 of the tile's positions over every other k-step
// (the two partial sums meet in shared memory); its values: a quarter of the
// value dims. At rows of 576, the staging tile, the four f16 planes and the
// partial scores fill the 227 KiB a block may have on Hopper.
constexpr int kMlaThreads = 256, kMlaRows = 32, kMlaTile = 32, kScoreStride = kMlaTile + 4, kMlaMaxK = 576;
static_assert(kMlaRows == kMlaTile, "the query and row planes share one shape");

__device__ __forceinline__ uint32_t shared_address(const void* p) {
    return uint32_t(__cvta_generic_to_shared(p));
}

// Four 8x8 matrices of halves (lanes 8i..8i+7 give matrix i's row
// addresses); .trans: each transposed on the way.
__device__ __forceinline__ void load_matrices(uint32_t (&r)[4], uint32_t address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address)
                 : "memory");
}
__device__ __forceinline__ void load_matrices_transposed(uint32_t (&r)[4], uint32_t address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address)
                 : "memory");
}

// d (16 x 8, float) += a (16 x 16, f16, row-major) . b (16 x 8, f16).
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as two pairs of halves: hi, each rounded to f16, and lo, what
// rounding left, rounded. hi + lo keeps some 22 bits of the mantissa, so
// hi.hi + hi.lo + lo.hi (the lo.lo term is below float32's rounding) is
// within float32's rounding of the product, where one f16 product moved
// the golden deepseek3 file's logits 3e-4 (run23 call 1).
__device__ __forceinline__ void split_pair(float a, float b, uint32_t& hi, uint32_t& lo) {
    const __half2 h = __floats2half2_rn(a, b);
    const float2 back = __half22float2(h);
    const __half2 r = __floats2half2_rn(a - back.x, b - back.y);
    hi = *reinterpret_cast<const uint32_t*>(&h);
    lo = *reinterpret_cast<const uint32_t*>(&r);
}

// Four floats split into the hi plane at `hi` and the lo plane at `lo`.
__device__ __forceinline__ void split_store(const float4& v, __half* hi, __half* lo) {
    uint32_t h0, l0, h1, l1;
    split_pair(v.x, v.y, h0, l0);
    split_pair(v.z, v.w, h1, l1);
    *reinterpret_cast<uint2*>(hi) = make_uint2(h0, h1);
    *reinterpret_cast<uint2*>(lo) = make_uint2(l0, l1);
}

// 16 bytes from global to shared memory without passing registers; zeros
// where !valid.
__device__ __forceinline__ void copy_async(uint32_t to, const void* from, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to), "l"(from), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void copy_async_wait() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

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
            float mx = -INFINITY;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int col = (i / 4) * 16 + (i / 2 % 2) * 8 + 2 * t4 + i % 2, idx = base + col;
                const bool ok = idx < n_pos && (sel ? last[x] >= 0 : idx <= last[x]);
                s[i] = ok ? (sr[col] + sr[kMlaRows * kScoreStride + col]) * scale2 : -INFINITY;
                mx = fmaxf(mx, s[i]);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float top = fmaxf(m[x], mx);
            const float keep = top == -INFINITY ? 1.0f : exp2f(m[x] - top);
            float sum = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                s[i] = s[i] == -INFINITY ? 0.0f : exp2f(s[i] - top);
                sum += s[i];
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            l[x] = l[x] * keep + sum;
            m[x] = top;
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
                mma_f16(acc[j], pl_[k2], bv[0], bv[1]);
                mma_f16(acc[j], ph_[k2], bv[2], bv[3]);
                mma_f16(acc[j], ph_[k2], bv[0], bv[1]);
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

}  // namespace

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

bool attention_tiled(const float* q, const float* k_cache, const float* v_cache, const int32_t* pos, int n_head,
                     int n_kv_head, int head_dim, float scale, float* out, Stream s, void* act, int n, int window,
                     const float* sinks, int chunk) {
    if (n < 1 || n_kv_head < 1 || n_head % n_kv_head != 0 || n_head / n_kv_head > kRows) return false;
    switch (head_dim) {
        case 64: launch_tiled<2>(q, k_cache, v_cache, pos, n_head, n_kv_head, scale, out, s, n, window, sinks, chunk); break;
        case 128: launch_tiled<4>(q, k_cache, v_cache, pos, n_head, n_kv_head, scale, out, s, n, window, sinks, chunk); break;
        case 256: launch_tiled<8>(q, k_cache, v_cache, pos, n_head, n_kv_head, scale, out, s, n, window, sinks, chunk); break;
        default: return false;
    }
    if (act) quantize_act(out, n, int64_t(n_head) * head_dim, act, s);
    return true;
}

}  // namespace ms::gpu
