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
#include <cuda_runtime.h>

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

}  // namespace

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
