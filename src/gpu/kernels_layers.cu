// The kernels of gpu.h that the families beyond qwen3moe's layer shape add
// (model/gpu_decoder.cpp, driven by a DecoderSpec): biases, RoPE without
// per-head norms (either pairing), sigmoid routing with a selection bias,
// and the shared expert's sigmoid gate. Each follows the CPU's arithmetic
// (ops/rope.cpp, model/moe.cpp, model/ffn_block.cpp) to float rounding.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "gpu/gpu.h"
#include "gpu/launch.cuh"
#include "gpu/warp_topk.cuh"

namespace ms::gpu {

namespace {

// blockIdx.y: the row (prefill's token).
__global__ void add_kernel(float* y, const float* b, int64_t n) {
    chain_start();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[int64_t(blockIdx.y) * n + i] += b[i];
}

__global__ void add_sigmoid_gated_kernel(float* x, const float* y, const float* gate, int64_t n) {
    chain_start();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, row = blockIdx.y;
    if (i < n) x[row * n + i] += y[row * n + i] * (1.0f / (1.0f + expf(-gate[row])));
}

// One block a head: blocks [0, n_head) rotate q's heads in place, the next
// n_kv_head rotate k's heads into cache row *pos and copy v's beside them.
// Pairs (i, i + n_rot/2) when neox, else (2i, 2i + 1); dimensions past
// n_rot are copied as they are.
__global__ void rope_store_kernel(float* q, const float* k, const float* v, int n_head, int head_dim, int n_rot,
                                  bool neox, const float* cos_sin, float* k_cache, float* v_cache, int64_t kv_width,
                                  const int32_t* pos) {
    chain_start();
    // Prefill: blockIdx.y is the token, at position *pos + blockIdx.y.
    const int64_t t = blockIdx.y, at = *pos + t;
    q += t * n_head * head_dim;
    k += t * kv_width;
    v += t * kv_width;
    cos_sin += t * n_rot;
    const bool is_q = int(blockIdx.x) < n_head;
    const int head = is_q ? blockIdx.x : blockIdx.x - n_head;
    const float* src = is_q ? q + int64_t(head) * head_dim : k + int64_t(head) * head_dim;
    float* dst = is_q ? q + int64_t(head) * head_dim : k_cache + at * kv_width + int64_t(head) * head_dim;
    const int half = n_rot / 2;
    // Each thread reads its pair before writing it: in place for q is safe.
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
        const float c = cos_sin[2 * i], sn = cos_sin[2 * i + 1];
        const float a = src[ia], b = src[ib];
        dst[ia] = a * c - b * sn;
        dst[ib] = a * sn + b * c;
    }
    if (!is_q) {
        for (int i = n_rot + threadIdx.x; i < head_dim; i += blockDim.x) dst[i] = src[i];
        float* vd = v_cache + at * kv_width + int64_t(head) * head_dim;
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) vd[i] = v[int64_t(head) * head_dim + i];
    }
}

// One warp: sigmoid scores, k rounds of a warp-wide argmax of score plus
// bias (the lower id on a tie, as model/moe.cpp's select_topk), the chosen
// unbiased scores as weights, renormalized (sum in double, floored as the
// CPU does) and scaled.
__global__ void route_sigmoid_kernel(const float* logits, const float* bias, int n_expert, int k, bool renorm,
                                     float scale, int32_t* ids, float* weights) {
    chain_start();
    logits += int64_t(blockIdx.x) * n_expert;  // prefill: a block a token
    ids += int64_t(blockIdx.x) * k;
    weights += int64_t(blockIdx.x) * k;
    __shared__ uint32_t taken[32];
    __shared__ int32_t chosen[32];
    __shared__ float score[1024], biased[1024];
    const int lane = threadIdx.x % 32;
    for (int e = lane; e < n_expert; e += 32) {
        score[e] = 1.0f / (1.0f + expf(-logits[e]));
        biased[e] = bias ? score[e] + bias[e] : score[e];
    }
    __syncwarp();
    warp_topk(biased, n_expert, k, taken, chosen, ids);
    if (lane != 0) return;
    double sum = 0;
    for (int r = 0; r < k; r++) sum += double(score[chosen[r]]);
    const float total = fmaxf(float(sum), 6.103515625e-5f);
    for (int r = 0; r < k; r++) {
        const float w = renorm ? score[chosen[r]] / total : score[chosen[r]];
        weights[r] = scale != 1.0f ? w * scale : w;
    }
}

}  // namespace

void add(float* y, const float* b, int64_t n, Stream s, int rows) {
    launch("add", add_kernel, dim3(blocks(n, 256), unsigned(rows)), 256, 0, native(s), y, b, n);
}

void add_sigmoid_gated(float* x, const float* y, const float* gate, int64_t n, Stream s, int rows) {
    launch("add_sigmoid_gated", add_sigmoid_gated_kernel, dim3(blocks(n, 256), unsigned(rows)), 256, 0, native(s), x,
           y, gate, n);
}

void rope_store(float* q, const float* k, const float* v, int n_head, int n_kv_head, int head_dim, int n_rot,
                bool neox, const float* cos_sin, float* k_cache, float* v_cache, const int32_t* pos, Stream s,
                int n) {
    if (n_rot > head_dim || n_rot % 2 != 0) throw std::runtime_error("CUDA rope_store: n_rot even, <= head_dim");
    launch("rope_store", rope_store_kernel, dim3(unsigned(n_head + n_kv_head), unsigned(n)), 64, 0, native(s), q, k, v,
           n_head, head_dim,
           n_rot, neox, cos_sin, k_cache, v_cache, int64_t(n_kv_head) * head_dim, pos);
}

void route_sigmoid_topk(const float* logits, const float* selection_bias, int n_expert, int k, bool renorm,
                        float scale, int32_t* ids, float* weights, Stream s, int n) {
    if (k > 32 || n_expert > 1024 || k > n_expert) throw std::runtime_error("CUDA routing: k <= 32, n_expert <= 1024");
    launch("route_sigmoid_topk", route_sigmoid_kernel, unsigned(n), 32, 0, native(s), logits, selection_bias, n_expert,
           k, renorm, scale, ids, weights);
}

}  // namespace ms::gpu
