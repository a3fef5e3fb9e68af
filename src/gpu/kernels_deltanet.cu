// The kernels of gpu.h for the hybrid families' layers (Qwen3.5, Qwen3-Next):
// gated attention's [q | gate] heads, and Gated DeltaNet's short
// convolution and its recurrence with the head norm and z gate folded in.
// Each token is evaluated in order inside one launch, with the arithmetic of
// a launch of that token alone, so a prompt in one pass leaves the states a
// token-by-token pass leaves. The CPU's model/deltanet.cpp is the reference
// (to float rounding: the recurrence sums in the same order, the GPU may
// fuse a multiply and an add).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "gpu/block_sum.cuh"
#include "gpu/gpu.h"
#include "gpu/launch.cuh"
#include "ops/gates.h"

namespace ms::gpu {

namespace {

// blockIdx.y: the token; a thread a value of the q halves.
__global__ void split_gated_q_kernel(const float* qg, int n_head, int head_dim, float* q) {
    chain_start();
    const int64_t width = int64_t(n_head) * head_dim, i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= width) return;
    const int64_t h = i / head_dim, d = i % head_dim, t = blockIdx.y;
    q[t * width + i] = qg[t * 2 * width + h * 2 * head_dim + d];
}

__global__ void mul_sigmoid_heads_kernel(float* att, const float* qg, int n_head, int head_dim) {
    chain_start();
    const int64_t width = int64_t(n_head) * head_dim, i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= width) return;
    const int64_t h = i / head_dim, d = i % head_dim, t = blockIdx.y;
    const float g = qg[t * 2 * width + h * 2 * head_dim + head_dim + d];
    att[t * width + i] *= sigmoid(g);
}

// A thread a channel: its n outputs in order, then its state moves on.
__global__ void deltanet_conv_kernel(const float* in, const float* taps, int kernel, int64_t channels, int n,
                                     float* state, float* out) {
    chain_start();
    const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    const float* w = taps + c * kernel;
    // Row i of the sequence [state; in].
    auto seq = [&](int i) { return i < kernel - 1 ? state[i * channels + c] : in[(i - (kernel - 1)) * channels + c]; };
    for (int t = 0; t < n; t++) {
        float s = 0.0f;
        for (int j = 0; j < kernel; j++) s += w[j] * seq(t + j);
        out[t * channels + c] = silu(s);
    }
    // Row n + i >= i is read before row i is written.
    for (int i = 0; i < kernel - 1; i++) state[i * channels + c] = seq(n + i);
}

// A block a value head, a thread a column j of its state (head_k rows of
// head_v): per token, the block L2-normalizes the head's q and k into
// shared memory; each thread decays its column, corrects it along k and
// reads it with q; the block RMS-norms the head's output, gated by z.
__global__ void deltanet_recurrence_kernel(const DeltaNetDims d, const float* conv, const float* z, const float* ba,
                                           const float* dt_bias, const float* ssm_a, const float* out_norm, float eps,
                                           int n, float* state, float* out) {
    chain_start();
    extern __shared__ float qk[];  // q, then k: head_k each
    __shared__ double part[32];
    const int h = blockIdx.x, j = threadIdx.x, HK = d.head_k, HV = d.head_v, NV = d.n_v_heads;
    const int ratio = NV / d.n_k_heads, kh = d.tiled_heads ? h % d.n_k_heads : h / ratio;
    const int64_t QK = int64_t(d.n_k_heads) * HK, VD = int64_t(NV) * HV, C = 2 * QK + VD;
    float* q = qk;
    float* k = qk + HK;
    float* S = state + int64_t(h) * HK * HV;
    const float scale = 1.0f / sqrtf(float(HK));
    for (int t = 0; t < n; t++) {
        const float* row = conv + t * C;
        double sq = 0, sk = 0;
        for (int i = j; i < HK; i += blockDim.x) {
            q[i] = row[kh * HK + i];
            k[i] = row[QK + kh * HK + i];
            sq += double(q[i]) * q[i];
            sk += double(k[i]) * k[i];
        }
        const float inv_q = 1.0f / fmaxf(float(sqrt(block_sum(sq, part))), 1e-6f);
        const float inv_k = 1.0f / fmaxf(float(sqrt(block_sum(sk, part))), 1e-6f);
        for (int i = j; i < HK; i += blockDim.x) q[i] *= inv_q, k[i] *= inv_k;
        __syncthreads();
        float b_logit, a_logit, beta, log_decay;
        deltanet_gate_logits(ba, d.fused_ba, t, n, h, NV, ratio, &b_logit, &a_logit);
        deltanet_gates(b_logit, a_logit, dt_bias[h], ssm_a[h], &beta, &log_decay);
        const float decay = expf(log_decay);
        float acc = 0;
        for (int i = 0; i < HK; i++) acc += (S[i * HV + j] * decay) * k[i];
        const float delta = beta * (row[2 * QK + int64_t(h) * HV + j] - acc);
        float o = 0;
        for (int i = 0; i < HK; i++) {
            const float s = S[i * HV + j] * decay + k[i] * delta;
            S[i * HV + j] = s;
            o += s * q[i];
        }
        o *= scale;
        const float mean = float(block_sum(double(o * o), part) / double(HV));
        const float zj = z[t * VD + int64_t(h) * HV + j];
        out[t * VD + int64_t(h) * HV + j] = (o * (1.0f / sqrtf(mean + eps))) * out_norm[j] * silu(zj);
    }
}

}  // namespace

void split_gated_q(const float* qg, int n_head, int head_dim, float* q, Stream s, int n) {
    launch("split_gated_q", split_gated_q_kernel, dim3(blocks(int64_t(n_head) * head_dim, 256), unsigned(n)), 256, 0,
           native(s), qg, n_head, head_dim, q);
}

void mul_sigmoid_heads(float* att, const float* qg, int n_head, int head_dim, Stream s, int n) {
    launch("mul_sigmoid_heads", mul_sigmoid_heads_kernel, dim3(blocks(int64_t(n_head) * head_dim, 256), unsigned(n)),
           256, 0, native(s), att, qg, n_head, head_dim);
}

void deltanet_conv(const float* in, const float* taps, int kernel, int64_t channels, int n, float* state, float* out,
                   Stream s) {
    if (kernel < 2 || n < 1) throw std::runtime_error("CUDA deltanet_conv: a kernel of 2 taps or more, n >= 1");
    launch("deltanet_conv", deltanet_conv_kernel, blocks(channels, 128), 128, 0, native(s), in, taps, kernel, channels,
           n, state, out);
}

void deltanet_recurrence(const DeltaNetDims& d, const float* conv, const float* z, const float* ba,
                         const float* dt_bias, const float* ssm_a, const float* out_norm, float eps, int n,
                         float* state, float* out, Stream s) {
    if (d.head_v % 32 != 0 || d.head_v > 1024 || d.head_k < 1 || d.head_k > 4096 || d.n_k_heads < 1 ||
        d.n_v_heads % d.n_k_heads != 0 || n < 1) {
        throw std::runtime_error("CUDA deltanet_recurrence: head_v a multiple of 32 up to 1024, head_k up to 4096, "
                                 "value heads a multiple of key heads (head_v " + std::to_string(d.head_v) + ")");
    }
    launch("deltanet_recurrence", deltanet_recurrence_kernel, unsigned(d.n_v_heads), unsigned(d.head_v),
           size_t(2 * d.head_k) * sizeof(float), native(s), d, conv, z, ba, dt_bias, ssm_a, out_norm, eps, n, state,
           out);
}

}  // namespace ms::gpu
