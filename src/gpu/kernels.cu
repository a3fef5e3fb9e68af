// The CUDA kernels of gpu.h. Decode is memory-bound: each matrix-vector
// kernel gives a warp one row, 8 lanes a block of 256 (K-quants) or 32
// weights, dequantizes in registers and multiplies with float32 activations
// (no activation rounding: the golden exact/ files are the reference).
// Block layouts are quant/blocks.h's; the arithmetic follows
// quant/dequant.cpp so results match the CPU to float rounding.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "gpu/gpu.h"
#include "quant/blocks.h"

namespace ms::gpu {

namespace {

cudaStream_t native(Stream s) { return reinterpret_cast<cudaStream_t>(s); }

void launched(const char* what) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

__device__ __forceinline__ float half_at(const uint8_t* p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block (quant's
// get_scale_min_k4).
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, float* sc, float* m) {
    if (j < 4) {
        *sc = float(q[j] & 63);
        *m = float(q[j + 4] & 63);
    } else {
        *sc = float((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = float((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// Lane `lane`'s share of dot(row, x) over `cols` weights of type T.
template <GgmlType T>
__device__ float row_dot(const uint8_t* row, int64_t cols, const float* x, int lane);

template <>
__device__ float row_dot<GgmlType::F32>(const uint8_t* row, int64_t cols, const float* x, int lane) {
    const float* w = reinterpret_cast<const float*>(row);
    float s = 0;
    for (int64_t i = lane; i < cols; i += 32) s += w[i] * x[i];
    return s;
}

template <>
__device__ float row_dot<GgmlType::F16>(const uint8_t* row, int64_t cols, const float* x, int lane) {
    const __half* w = reinterpret_cast<const __half*>(row);
    float s = 0;
    for (int64_t i = lane; i < cols; i += 32) s += __half2float(w[i]) * x[i];
    return s;
}

// Q8_0: 8 lanes a block of 32, 4 weights each; a warp covers 4 blocks.
template <>
__device__ float row_dot<GgmlType::Q8_0>(const uint8_t* row, int64_t cols, const float* x, int lane) {
    const int64_t nb = cols / 32;
    const int j = (lane % 8) * 4;
    float s = 0;
    for (int64_t ib = lane / 8; ib < nb; ib += 4) {
        const uint8_t* b = row + ib * sizeof(BlockQ8_0);
        const int8_t* q = reinterpret_cast<const int8_t*>(b + 2) + j;
        const float4 xv = *reinterpret_cast<const float4*>(x + ib * 32 + j);
        s += half_at(b) * (q[0] * xv.x + q[1] * xv.y + q[2] * xv.z + q[3] * xv.w);
    }
    return s;
}

// Q4_K: 8 lanes a block of 256; lane part p reads 16 bytes of qs: 16 low
// nibbles (sub-block 2g) and 16 high nibbles (2g + 1), g = p / 2.
template <>
__device__ float row_dot<GgmlType::Q4_K>(const uint8_t* row, int64_t cols, const float* x, int lane) {
    const int64_t nb = cols / 256;
    const int p = lane % 8, g = p / 2, l0 = (p % 2) * 16;
    float s = 0;
    for (int64_t ib = lane / 8; ib < nb; ib += 4) {
        const BlockQ4_K* b = reinterpret_cast<const BlockQ4_K*>(row) + ib;
        const float d = half_at(reinterpret_cast<const uint8_t*>(&b->d));
        const float dmin = half_at(reinterpret_cast<const uint8_t*>(&b->dmin));
        float sc0, m0, sc1, m1;
        scale_min_k4(2 * g, b->scales, &sc0, &m0);
        scale_min_k4(2 * g + 1, b->scales, &sc1, &m1);
        const uint4 qv = *reinterpret_cast<const uint4*>(b->qs + 32 * g + l0);
        const float4* xl = reinterpret_cast<const float4*>(x + ib * 256 + g * 64 + l0);
        const float4* xh = xl + 8;  // 32 floats on
        float lo = 0, hi = 0, xs_lo = 0, xs_hi = 0;
        // Words, not a byte pointer into qv: that would put qv in local memory.
        const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float4 a = xl[j], c = xh[j];
            const uint32_t w = qw[j];
            lo += float(w & 0xF) * a.x + float((w >> 8) & 0xF) * a.y + float((w >> 16) & 0xF) * a.z +
                  float((w >> 24) & 0xF) * a.w;
            hi += float((w >> 4) & 0xF) * c.x + float((w >> 12) & 0xF) * c.y + float((w >> 20) & 0xF) * c.z +
                  float(w >> 28) * c.w;
            xs_lo += (a.x + a.y) + (a.z + a.w);
            xs_hi += (c.x + c.y) + (c.z + c.w);
        }
        s += d * (sc0 * lo + sc1 * hi) - dmin * (m0 * xs_lo + m1 * xs_hi);
    }
    return s;
}

// Q5_K: Q4_K's layout plus a high bit per weight in qh (bit 2g for the low
// nibbles of group g, 2g + 1 for the high ones).
template <>
__device__ float row_dot<GgmlType::Q5_K>(const uint8_t* row, int64_t cols, const float* x, int lane) {
    const int64_t nb = cols / 256;
    const int p = lane % 8, g = p / 2, l0 = (p % 2) * 16;
    float s = 0;
    for (int64_t ib = lane / 8; ib < nb; ib += 4) {
        const BlockQ5_K* b = reinterpret_cast<const BlockQ5_K*>(row) + ib;
        const float d = half_at(reinterpret_cast<const uint8_t*>(&b->d));
        const float dmin = half_at(reinterpret_cast<const uint8_t*>(&b->dmin));
        float sc0, m0, sc1, m1;
        scale_min_k4(2 * g, b->scales, &sc0, &m0);
        scale_min_k4(2 * g + 1, b->scales, &sc1, &m1);
        const uint4 qv = *reinterpret_cast<const uint4*>(b->qs + 32 * g + l0);
        const uint4 hv = *reinterpret_cast<const uint4*>(b->qh + l0);
        const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w}, hw[4] = {hv.x, hv.y, hv.z, hv.w};
        const float4* xl = reinterpret_cast<const float4*>(x + ib * 256 + g * 64 + l0);
        const float4* xh = xl + 8;
        float lo = 0, hi = 0, xs_lo = 0, xs_hi = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float4 a = xl[j], c = xh[j];
            const float* af = &a.x;
            const float* cf = &c.x;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint32_t q = (qw[j] >> (8 * k)) & 0xFF, h = (hw[j] >> (8 * k)) & 0xFF;
                lo += float((q & 0xF) + ((h >> (2 * g)) & 1) * 16) * af[k];
                hi += float((q >> 4) + ((h >> (2 * g + 1)) & 1) * 16) * cf[k];
            }
            xs_lo += (a.x + a.y) + (a.z + a.w);
            xs_hi += (c.x + c.y) + (c.z + c.w);
        }
        s += d * (sc0 * lo + sc1 * hi) - dmin * (m0 * xs_lo + m1 * xs_hi);
    }
    return s;
}

// Q6_K: 8 lanes a block; part p takes half n = p / 4 and l in [l0, l0 + 8),
// l0 = (p % 4) * 8: the four weights l, l + 32, l + 64, l + 96 of that half.
template <>
__device__ float row_dot<GgmlType::Q6_K>(const uint8_t* row, int64_t cols, const float* x, int lane) {
    const int64_t nb = cols / 256;
    const int p = lane % 8, n = p / 4, l0 = (p % 4) * 8;
    float s = 0;
    for (int64_t ib = lane / 8; ib < nb; ib += 4) {
        const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(row) + ib;
        const float d = half_at(reinterpret_cast<const uint8_t*>(&b->d));
        const uint8_t* ql = b->ql + 64 * n;
        const uint8_t* qh = b->qh + 32 * n;
        const int8_t* sc = b->scales + 8 * n + l0 / 16;
        const float* xv = x + ib * 256 + 128 * n;
        float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        // Blocks are 210 bytes, so 2-byte loads are the widest aligned ones.
        const uint16_t* lo16 = reinterpret_cast<const uint16_t*>(ql + l0);
        const uint16_t* hi16 = reinterpret_cast<const uint16_t*>(ql + l0 + 32);
        const uint16_t* h16 = reinterpret_cast<const uint16_t*>(qh + l0);
#pragma unroll
        for (int i2 = 0; i2 < 4; i2++) {
            const uint32_t la = lo16[i2], lb = hi16[i2], hh = h16[i2];
#pragma unroll
            for (int k = 0; k < 2; k++) {
                const int l = l0 + 2 * i2 + k;
                const uint32_t qa = (la >> (8 * k)) & 0xFF, qb = (lb >> (8 * k)) & 0xFF, h = (hh >> (8 * k)) & 0xFF;
                a0 += float(int((qa & 0xF) | ((h & 3) << 4)) - 32) * xv[l];
                a1 += float(int((qb & 0xF) | (((h >> 2) & 3) << 4)) - 32) * xv[l + 32];
                a2 += float(int((qa >> 4) | (((h >> 4) & 3) << 4)) - 32) * xv[l + 64];
                a3 += float(int((qb >> 4) | (((h >> 6) & 3) << 4)) - 32) * xv[l + 96];
            }
        }
        s += d * (float(sc[0]) * a0 + float(sc[2]) * a1 + float(sc[4]) * a2 + float(sc[6]) * a3);
    }
    return s;
}

constexpr int kRowsPerBlock = 4;  // one warp a row

// blockIdx.y: which expert (table != null) or 0.
// What a matvec launch computes: blockIdx.y picks a matrix (an expert's,
// through table, when table is set; the second `pair` of them at offset2
// writing after the first n outputs); y is written, or added to (add).
struct MatvecArgs {
    const uint8_t* w0;
    const uint8_t* const* table;
    const int32_t* ids;
    int n;                  // matrices per pair
    size_t offset, offset2;
    int64_t rows, cols;
    size_t row_bytes;
    const float* x;
    int64_t x_stride;
    float* y;
    bool add;
};

template <GgmlType T>
__global__ void matvec_kernel(const MatvecArgs a) {
    const int e = blockIdx.y % a.n, second = blockIdx.y / a.n;
    const uint8_t* w = a.table ? a.table[a.ids[e]] + (second ? a.offset2 : a.offset) : a.w0;
    const float* x = a.x + e * a.x_stride;
    float* y = a.y + int64_t(blockIdx.y) * a.rows;
    const int lane = threadIdx.x % 32;
    const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    if (r >= a.rows) return;
    const float s = warp_sum(row_dot<T>(w + r * a.row_bytes, a.cols, x, lane));
    if (lane == 0) y[r] = a.add ? y[r] + s : s;
}

template <GgmlType T>
void launch_matvec(MatvecArgs a, int n_launch, cudaStream_t s) {
    a.row_bytes = row_bytes(T, a.cols);
    const dim3 grid(unsigned((a.rows + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(n_launch));
    matvec_kernel<T><<<grid, 32 * kRowsPerBlock, 0, s>>>(a);
}

void dispatch_matvec(GgmlType t, const MatvecArgs& a, int n_launch, cudaStream_t s) {
    switch (t) {
        case GgmlType::F32: launch_matvec<GgmlType::F32>(a, n_launch, s); break;
        case GgmlType::F16: launch_matvec<GgmlType::F16>(a, n_launch, s); break;
        case GgmlType::Q8_0: launch_matvec<GgmlType::Q8_0>(a, n_launch, s); break;
        case GgmlType::Q4_K: launch_matvec<GgmlType::Q4_K>(a, n_launch, s); break;
        case GgmlType::Q5_K: launch_matvec<GgmlType::Q5_K>(a, n_launch, s); break;
        case GgmlType::Q6_K: launch_matvec<GgmlType::Q6_K>(a, n_launch, s); break;
        default: throw std::runtime_error(std::string("CUDA matvec: no kernel for ") + type_name(t));
    }
    launched("matvec");
}

// One block a row; sums of squares in double as ops/norm.cpp does.
__global__ void rms_norm_kernel(const float* x, const float* w, int64_t width, float eps, float* out) {
    __shared__ double part[32];
    x += int64_t(blockIdx.x) * width;
    out += int64_t(blockIdx.x) * width;
    double sum = 0;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) sum += double(x[i] * x[i]);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0;
        for (int i = 0; i < int(blockDim.x / 32); i++) t += part[i];
        part[0] = t;
    }
    __syncthreads();
    const float mean = float(part[0] / double(width));
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) out[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

__global__ void attention_kernel(const float* q, const float* k_cache, const float* v_cache, const int32_t* pos,
                                 int n_head, int n_kv_head, int head_dim, float scale, float* out) {
    const int n_pos = *pos + 1;
    extern __shared__ float smem[];
    float* qs = smem;               // head_dim
    float* scores = smem + head_dim;  // n_pos
    __shared__ float red[32];
    const int h = blockIdx.x, kvh = h / (n_head / n_kv_head);
    const int64_t row = int64_t(n_kv_head) * head_dim;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) qs[i] = q[int64_t(h) * head_dim + i];
    __syncthreads();
    float mx = -INFINITY;
    for (int p = threadIdx.x; p < n_pos; p += blockDim.x) {
        const float* k = k_cache + p * row + int64_t(kvh) * head_dim;
        float s = 0;
        for (int i = 0; i < head_dim; i++) s += qs[i] * k[i];
        s *= scale;
        scores[p] = s;
        mx = fmaxf(mx, s);
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = mx;
    __syncthreads();
    mx = red[0];
    for (int i = 1; i < int(blockDim.x / 32); i++) mx = fmaxf(mx, red[i]);
    __syncthreads();
    float sum = 0;
    for (int p = threadIdx.x; p < n_pos; p += blockDim.x) {
        const float e = expf(scores[p] - mx);
        scores[p] = e;
        sum += e;
    }
    sum = warp_sum(sum);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = sum;
    __syncthreads();
    sum = 0;
    for (int i = 0; i < int(blockDim.x / 32); i++) sum += red[i];
    const float inv = 1.0f / sum;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
        const float* v = v_cache + int64_t(kvh) * head_dim + i;
        float acc = 0;
        for (int p = 0; p < n_pos; p++) acc += scores[p] * v[p * row];
        out[int64_t(h) * head_dim + i] = acc * inv;
    }
}

// One block a head: blocks [0, n_head) are q heads (normed and rotated in
// place), the next n_kv_head k heads (normed, rotated, written with their v
// head to cache row *pos). Per-head sums of squares in double, as
// rms_norm_kernel.
__global__ void qk_norm_rope_store_kernel(float* q, const float* k, const float* v, const float* q_norm,
                                          const float* k_norm, int n_head, int head_dim, int n_rot, float eps,
                                          const float* cos_sin, float* k_cache, float* v_cache, int64_t kv_width,
                                          const int32_t* pos) {
    __shared__ float h[512];
    __shared__ double part[32];
    const bool is_q = int(blockIdx.x) < n_head;
    const int head = is_q ? blockIdx.x : blockIdx.x - n_head;
    const float* src = is_q ? q + int64_t(head) * head_dim : k + int64_t(head) * head_dim;
    const float* w = is_q ? q_norm : k_norm;
    double sum = 0;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
        h[i] = src[i];
        sum += double(h[i] * h[i]);
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = sum;
    __syncthreads();
    double total = 0;
    for (int i = 0; i < int(blockDim.x / 32); i++) total += part[i];
    const float scale = 1.0f / sqrtf(float(total / double(head_dim)) + eps);
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) h[i] = (h[i] * scale) * w[i];
    __syncthreads();
    const int half = n_rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float c = cos_sin[2 * i], sn = cos_sin[2 * i + 1];
        const float a = h[i], b = h[i + half];
        h[i] = a * c - b * sn;
        h[i + half] = a * sn + b * c;
    }
    __syncthreads();
    float* dst = is_q ? q + int64_t(head) * head_dim : k_cache + int64_t(*pos) * kv_width + int64_t(head) * head_dim;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) dst[i] = h[i];
    if (!is_q) {
        float* vd = v_cache + int64_t(*pos) * kv_width + int64_t(head) * head_dim;
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) vd[i] = v[int64_t(head) * head_dim + i];
    }
}

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t n, float* h) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) h[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

// One warp: k rounds of a warp-wide argmax over the logits (the lower id
// on a tie), then the chosen probabilities from a softmax over all, as
// model/moe.cpp does (its sum in double, in id order by lane strides here).
__global__ void route_kernel(const float* l, int n_expert, int k, bool renorm, int32_t* ids, float* weights) {
    __shared__ uint32_t taken[32];
    const int lane = threadIdx.x;
    taken[lane] = 0;
    __syncwarp();
    for (int r = 0; r < k; r++) {
        float best = -INFINITY;
        int arg = n_expert;
        for (int e = lane; e < n_expert; e += 32) {
            if (taken[e / 32] & (1u << (e % 32))) continue;
            if (arg == n_expert || l[e] > best) best = l[e], arg = e;
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ob = __shfl_xor_sync(0xffffffffu, best, o);
            const int oa = __shfl_xor_sync(0xffffffffu, arg, o);
            if (oa < n_expert && (arg == n_expert || ob > best || (ob == best && oa < arg))) best = ob, arg = oa;
        }
        if (lane == 0) {
            taken[arg / 32] |= 1u << (arg % 32);
            ids[r] = arg;
        }
        __syncwarp();
    }
    const float mx = l[ids[0]];
    double sum = 0;
    for (int e = lane; e < n_expert; e += 32) sum += double(expf(l[e] - mx));
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane != 0) return;
    const float inv = float(1.0 / sum);
    float wsum = 0;
    for (int r = 0; r < k; r++) {
        weights[r] = expf(l[ids[r]] - mx) * inv;
        wsum += weights[r];
    }
    if (renorm) {
        for (int r = 0; r < k; r++) weights[r] /= wsum;
    }
}

__global__ void add_weighted_kernel(float* x, const float* y, const float* weights, int k, int64_t n) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0;
    for (int r = 0; r < k; r++) acc += weights[r] * y[r * n + i];
    x[i] += acc;
}

unsigned blocks(int64_t n, int per) { return unsigned((n + per - 1) / per); }

}  // namespace

bool supports(GgmlType t) {
    switch (t) {
        case GgmlType::F32:
        case GgmlType::F16:
        case GgmlType::Q8_0:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
        case GgmlType::Q6_K: return true;
        default: return false;
    }
}

void matvec(GgmlType t, const void* w, int64_t rows, int64_t cols, const float* x, float* y, Stream s, bool add) {
    dispatch_matvec(t, {static_cast<const uint8_t*>(w), nullptr, nullptr, 1, 0, 0, rows, cols, 0, x, 0, y, add}, 1,
                    native(s));
}

void matvec_experts(GgmlType t, const uint8_t* const* table, const int32_t* ids, int n, size_t offset, int64_t rows,
                    int64_t cols, const float* x, int64_t x_stride, float* y, Stream s) {
    dispatch_matvec(t, {nullptr, table, ids, n, offset, 0, rows, cols, 0, x, x_stride, y, false}, n, native(s));
}

void matvec_expert_pair(GgmlType t, const uint8_t* const* table, const int32_t* ids, int n, size_t offset,
                        size_t offset2, int64_t rows, int64_t cols, const float* x, float* y, Stream s) {
    dispatch_matvec(t, {nullptr, table, ids, n, offset, offset2, rows, cols, 0, x, 0, y, false}, 2 * n, native(s));
}

void rms_norm(const float* x, const float* w, int64_t rows, int64_t width, float eps, float* out, Stream s) {
    rms_norm_kernel<<<unsigned(rows), 256, 0, native(s)>>>(x, w, width, eps, out);
    launched("rms_norm");
}

static size_t attention_smem = 0;  // dynamic shared memory of every attention launch (prepare_attention)

void prepare_attention(int max_pos, int head_dim) {
    const size_t smem = size_t(head_dim + max_pos) * sizeof(float);
    if (smem <= attention_smem) return;
    if (smem > (48 << 10) &&
        cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess) {
        cudaGetLastError();
        throw std::runtime_error("CUDA attention: a context of " + std::to_string(max_pos) +
                                 " positions needs more shared memory than the device has");
    }
    attention_smem = smem;
}

void attention(const float* q, const float* k_cache, const float* v_cache, const int32_t* pos, int n_head,
               int n_kv_head, int head_dim, float scale, float* out, Stream s) {
    attention_kernel<<<unsigned(n_head), 128, attention_smem, native(s)>>>(q, k_cache, v_cache, pos, n_head,
                                                                           n_kv_head, head_dim, scale, out);
    launched("attention");
}

void qk_norm_rope_store(float* q, const float* k, const float* v, const float* q_norm, const float* k_norm,
                        int n_head, int n_kv_head, int head_dim, int n_rot, float eps, const float* cos_sin,
                        float* k_cache, float* v_cache, const int32_t* pos, Stream s) {
    if (head_dim > 512) throw std::runtime_error("CUDA qk_norm_rope_store: head_dim > 512");
    qk_norm_rope_store_kernel<<<unsigned(n_head + n_kv_head), 128, 0, native(s)>>>(
        q, k, v, q_norm, k_norm, n_head, head_dim, n_rot, eps, cos_sin, k_cache, v_cache,
        int64_t(n_kv_head) * head_dim, pos);
    launched("qk_norm_rope_store");
}

void swiglu(const float* gate, const float* up, int64_t n, float* h, Stream s) {
    swiglu_kernel<<<blocks(n, 256), 256, 0, native(s)>>>(gate, up, n, h);
    launched("swiglu");
}

void route_softmax_topk(const float* logits, int n_expert, int k, bool renorm, int32_t* ids, float* weights,
                        Stream s) {
    if (k > 32 || n_expert > 1024 || k > n_expert) throw std::runtime_error("CUDA routing: k <= 32, n_expert <= 1024");
    route_kernel<<<1, 32, 0, native(s)>>>(logits, n_expert, k, renorm, ids, weights);
    launched("route_softmax_topk");
}

void add_weighted(float* x, const float* y, const float* weights, int k, int64_t n, Stream s) {
    add_weighted_kernel<<<blocks(n, 256), 256, 0, native(s)>>>(x, y, weights, k, n);
    launched("add_weighted");
}

}  // namespace ms::gpu
